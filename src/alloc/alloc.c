#include "alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static long fail_after = -1; /* test hook only; -1 = never fail */
static int fail_once;        /* refuse one allocation, then none */
static long refused;         /* refusals since the hook was last set */
static atomic_long live;     /* blocks handed out and not freed */

static int should_fail(void) {
  if (fail_after < 0)
    return 0;
  if (fail_after == 0) {
    refused++;
    if (fail_once)
      fail_after = -1;
    return 1;
  }
  fail_after--;
  return 0;
}

void gf__alloc_fail_after(long n) {
  fail_after = n;
  fail_once = 0;
  refused = 0;
}

void gf__alloc_fail_once(long n) {
  gf__alloc_fail_after(n);
  fail_once = n >= 0;
}

long gf__alloc_refused(void) { return refused; }

long gf__alloc_live(void) {
  return atomic_load_explicit(&live, memory_order_relaxed);
}

static void *counted(void *p) {
  if (p)
    atomic_fetch_add_explicit(&live, 1, memory_order_relaxed);
  return p;
}

void *gf__malloc(size_t n) {
  return should_fail() ? NULL : counted(malloc(n ? n : 1));
}

void *gf__calloc(size_t n, size_t size) {
  return should_fail() ? NULL : counted(calloc(n ? n : 1, size ? size : 1));
}

void *gf__realloc(void *p, size_t n) {
  if (should_fail())
    return NULL;
  void *r = realloc(p, n ? n : 1);
  return p ? r : counted(r);
}

char *gf__strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *r = gf__malloc(n);
  if (r)
    memcpy(r, s, n);
  return r;
}

void gf__free(void *p) {
  if (p)
    atomic_fetch_sub_explicit(&live, 1, memory_order_relaxed);
  free(p);
}
