/*
 * Internal allocation wrappers.  Every allocation in core goes through these
 * so tests can make the Nth one fail (gf__alloc_fail_after) and prove that
 * each failure path unwinds cleanly.
 */
#ifndef GPUFRAC_CORE_ALLOC_H
#define GPUFRAC_CORE_ALLOC_H

#include <stddef.h>

void *gf__malloc(size_t n);
void *gf__calloc(size_t n, size_t size);
void *gf__realloc(void *p, size_t n);
char *gf__strdup(const char *s);
void gf__free(void *p);

/* Test hook: after `n` more successful allocations, every further one fails
 * until reset with n < 0.  Not thread-safe; tests only. */
void gf__alloc_fail_after(long n);

#endif
