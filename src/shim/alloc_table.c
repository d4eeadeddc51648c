/* The interposer's allocation table (alloc_table.h): linear probing with
 * backward-shift removal, so there are no tombstones and the capacity
 * follows the live entries. */
#include "alloc_table.h"

#include <stdlib.h>

static size_t home(const gf__atab *t, uint64_t key) {
  return gf__atab_home(t->cap, key);
}

/* Moves every entry into a new array of cap slots (a power of two that
 * holds them).  -1 when it cannot be had: the table is unchanged. */
static int resize(gf__atab *t, size_t cap) {
  gf__atab_entry *e = calloc(cap, sizeof(*e));
  if (!e)
    return -1;
  gf__atab n = {e, cap, t->live};
  for (size_t i = 0; i < t->cap; i++) {
    if (!t->e[i].key)
      continue;
    size_t j = home(&n, t->e[i].key);
    while (e[j].key)
      j = (j + 1) & (cap - 1);
    e[j] = t->e[i];
  }
  free(t->e);
  *t = n;
  return 0;
}

int gf__atab_put_slow(gf__atab *t, const gf__atab_entry *in,
                      gf__atab_entry *old) {
  old->key = 0;
  if (in->key <= 1)
    return -1;
  if ((t->live + 1) * 2 > t->cap &&
      resize(t, t->cap ? t->cap * 2 : GF__ATAB_MIN))
    return -1;
  size_t j = home(t, in->key);
  for (; t->e[j].key; j = (j + 1) & (t->cap - 1))
    if (t->e[j].key == in->key) {
      *old = t->e[j];
      t->e[j] = *in;
      return 0;
    }
  t->e[j] = *in;
  t->live++;
  return 0;
}

/* Backward shift: pull each later entry of the run into the hole unless
 * that would put it before its home.  The entry at k may go back to the
 * hole at i when its home is at least as far back from k as the hole is
 * (its home not in (i, k] cyclically): one comparison of distances, no
 * branches on the order of i, h and k. */
void gf__atab_shift_out(gf__atab *t, size_t i) {
  gf__atab_entry *e = t->e; /* locals: the stores below cannot alias them */
  size_t cap = t->cap, m = cap - 1;
  for (size_t k = (i + 1) & m; e[k].key; k = (k + 1) & m) {
    size_t h = gf__atab_home(cap, e[k].key);
    if (((k - h) & m) < ((k - i) & m))
      continue;
    e[i] = e[k];
    i = k;
  }
  e[i].key = 0;
}

int gf__atab_take_slow(gf__atab *t, uint64_t key, gf__atab_entry *out) {
  if (!t->cap || key <= 1)
    return -1;
  size_t m = t->cap - 1, i = home(t, key);
  while (t->e[i].key != key) {
    if (!t->e[i].key)
      return -1;
    i = (i + 1) & m;
  }
  *out = t->e[i];
  gf__atab_shift_out(t, i);
  t->live--;
  if (t->cap > GF__ATAB_MIN && t->live * 8 < t->cap)
    resize(t, t->cap / 2); /* no memory to shrink: stay as is */
  return 0;
}

void gf__atab_release(gf__atab *t) {
  free(t->e);
  t->e = NULL;
  t->cap = t->live = 0;
}
