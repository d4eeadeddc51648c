/*
 * Internal to gf_sched: a string -> index map (open addressing with
 * tombstones).  Keys are borrowed: each points into the record it indexes
 * and must stay valid while present.  Not thread-safe (the caller's mutex).
 */
#ifndef GPUFRAC_SCHED_SMAP_H
#define GPUFRAC_SCHED_SMAP_H

#include <stdint.h>

typedef struct gf__smap_slot {
  const char *key; /* NULL: empty; &gf__smap_tomb: deleted */
  uint32_t val;
  uint32_t hash; /* of key: probes compare it before the strings */
} gf__smap_slot;

typedef struct gf__smap {
  gf__smap_slot *slots;
  uint32_t cap;  /* power of two, or 0 */
  uint32_t used; /* live + tombstones */
  uint32_t live;
} gf__smap;

/* Value of key, or -1. */
int64_t gf__smap_get(const gf__smap *m, const char *key);
/* Inserts or replaces.  Returns 0 or GF_ENOMEM (map unchanged). */
int gf__smap_put(gf__smap *m, const char *key, uint32_t val);
/* Removes key if present. */
void gf__smap_del(gf__smap *m, const char *key);
void gf__smap_release(gf__smap *m);

#endif
