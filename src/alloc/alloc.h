/*
 * Internal allocation wrappers (library gf_alloc, which every part links).
 * The allocations of core, kube, plan and node go through these so tests
 * can make the Nth one fail (gf__alloc_fail_after) and prove that each
 * failure path unwinds cleanly.  Memory from them is plain malloc memory
 * (free() releases it too), but only gf__free() counts it released in
 * gf__alloc_live().
 */
#ifndef GPUFRAC_ALLOC_H
#define GPUFRAC_ALLOC_H

#include <stddef.h>

void *gf__malloc(size_t n);
void *gf__calloc(size_t n, size_t size);
void *gf__realloc(void *p, size_t n);
char *gf__strdup(const char *s);
void gf__free(void *p);

/* Test hook: after `n` more successful allocations, every further one fails
 * until reset with n < 0.  Not thread-safe; tests only. */
void gf__alloc_fail_after(long n);

/* Test hook: refuse only the allocation after `n` more successful ones, and
 * none after it; a test that fails each allocation alone in turn catches a
 * refusal that is swallowed (a later step cannot report it for it). */
void gf__alloc_fail_once(long n);

/* Test hook: how many allocations the hook has refused since the last
 * gf__alloc_fail_after(). A test asserts on it: a refusal must surface as
 * an error, and a run with none must succeed in full. */
long gf__alloc_refused(void);

/* Test hook: blocks allocated through these wrappers and not yet freed
 * through gf__free (counted always; relaxed atomics).  A test that refuses
 * allocations asserts it returns to where it was: no leak on any path.
 * Meaningful only where everything a test frees came from the wrappers
 * (a test may route jansson through them with json_set_alloc_funcs). */
long gf__alloc_live(void);

#endif
