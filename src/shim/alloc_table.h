/*
 * The interposer's table of live allocations: pointer or handle -> what was
 * charged for it.  One per kind of key (device pointers, handles,
 * contexts) in each process.
 *
 * Open addressing with linear probing, keyed by a 64-bit mix of the
 * address.  Keys 0 and 1 are reserved (no driver hands out either).  The
 * table is not thread-safe: the interposer holds its table lock around
 * every call, and none of them calls out (at worst one calloc and a
 * rehash while growing or shrinking).
 *
 * Memory is bounded by the live entries: a removal leaves no tombstone
 * (the entries after it in its probe run are shifted back), so churn
 * never fills the table, and the capacity follows the live count - it
 * doubles past 1/2 full and halves under 1/8 (never below
 * GF__ATAB_MIN).  10 M alloc/free pairs with at most one live keep it at
 * GF__ATAB_MIN entries (tests/shim/test_alloc_table.c).
 */
#ifndef GPUFRAC_SHIM_ALLOC_TABLE_H
#define GPUFRAC_SHIM_ALLOC_TABLE_H

#include <stddef.h>
#include <stdint.h>

#define GF__ATAB_MIN 1024 /* smallest capacity, a power of two */

typedef struct gf__atab_entry {
  uint64_t key; /* 0 = empty */
  uint64_t bytes;
  uint32_t dev;  /* CUDA index */
  uint32_t pool; /* pool table index + 1 for pool allocations, else 0 */
} gf__atab_entry;

typedef struct gf__atab {
  gf__atab_entry *e;
  size_t cap;  /* 0 until the first put, then a power of two */
  size_t live; /* entries in use */
} gf__atab;

/* Adds *in (in->key > 1).  An entry already under the key is replaced and
 * copied to *old; old->key is 0 when there was none.  Returns 0, or -1
 * when the key is reserved or memory to grow cannot be had (nothing
 * changed). */
static inline int gf__atab_put(gf__atab *t, const gf__atab_entry *in,
                               gf__atab_entry *old);

/* Removes the entry under key into *out; returns 0, or -1 when there is
 * none. */
static inline int gf__atab_take(gf__atab *t, uint64_t key, gf__atab_entry *out);

/* The general cases, out of line (alloc_table.c); the inline functions
 * below take the common ones (an insert or a removal with no resize due)
 * and come here for the rest (a resize, a replacement, a missing key).  At most
 * half full, runs are short (1.5 slots probed on average for an insert), so the
 * common case stays common with 10,000 live. */
int gf__atab_put_slow(gf__atab *t, const gf__atab_entry *in,
                      gf__atab_entry *old);
int gf__atab_take_slow(gf__atab *t, uint64_t key, gf__atab_entry *out);
/* Empties slot i, moving later entries of its run back (no tombstones). */
void gf__atab_shift_out(gf__atab *t, size_t i);

/* The home slot of key in a table of cap slots (a power of two, >= 2):
 * multiplicative (Fibonacci) hashing, the top bits of key x 2^64/phi,
 * which depend on every bit of the key (device addresses are aligned, so
 * their low bits say nothing).  Four instructions where the xor-shift
 * mix it replaced took seven, on every insert and removal. */
static inline size_t gf__atab_home(size_t cap, uint64_t key) {
  return (size_t)((key * 0x9e3779b97f4a7c15ull) >>
                  (64 - __builtin_ctzll((unsigned long long)cap)));
}

static inline int gf__atab_put(gf__atab *t, const gf__atab_entry *in,
                               gf__atab_entry *old) {
  size_t cap = t->cap;
  if (in->key > 1 && (t->live + 1) * 2 <= cap) {
    size_t m = cap - 1, j = gf__atab_home(cap, in->key);
    for (; t->e[j].key; j = (j + 1) & m)
      if (t->e[j].key == in->key)
        return gf__atab_put_slow(t, in, old); /* a replacement */
    old->key = 0;
    t->e[j] = *in;
    t->live++;
    return 0;
  }
  return gf__atab_put_slow(t, in, old);
}

static inline int gf__atab_take(gf__atab *t, uint64_t key,
                                gf__atab_entry *out) {
  size_t cap = t->cap;
  if (cap && key > 1 && (cap <= GF__ATAB_MIN || (t->live - 1) * 8 >= cap)) {
    size_t m = cap - 1, i = gf__atab_home(cap, key);
    for (; t->e[i].key && t->e[i].key != key; i = (i + 1) & m)
      ;
    if (t->e[i].key == key) {
      *out = t->e[i];
      if (__builtin_expect(!!t->e[(i + 1) & m].key, 0))
        gf__atab_shift_out(t, i); /* later entries of the run move back */
      else
        t->e[i].key = 0;
      t->live--;
      return 0;
    }
  }
  return gf__atab_take_slow(t, key, out);
}

/* Frees the table's memory and empties it. */
void gf__atab_release(gf__atab *t);

#endif
