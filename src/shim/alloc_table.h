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
 * doubles past 3/4 full and halves under 1/8 (never below
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
int gf__atab_put(gf__atab *t, const gf__atab_entry *in, gf__atab_entry *old);

/* Removes the entry under key into *out; returns 0, or -1 when there is
 * none. */
int gf__atab_take(gf__atab *t, uint64_t key, gf__atab_entry *out);

/* Frees the table's memory and empties it. */
void gf__atab_release(gf__atab *t);

#endif
