/* String -> index map for the extender's node and pod tables (smap.h). */
#include "smap.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"

static const char tomb_key[] = "";
#define TOMB tomb_key

static uint32_t hash(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

/* Probes compare the stored hash first: a string compare (and the cache
 * miss of reading the key) only for a probable match, not on every probe of
 * a run of names that share a prefix ("node-00017", "node-00018"). */
int64_t gf__smap_get(const gf__smap *m, const char *key) {
  if (!m->cap)
    return -1;
  uint32_t h = hash(key);
  for (uint32_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    const gf__smap_slot *s = &m->slots[i];
    if (!s->key)
      return -1;
    if (s->hash == h && s->key != TOMB && strcmp(s->key, key) == 0)
      return s->val;
  }
}

static int grow(gf__smap *m) {
  uint32_t cap = m->cap ? m->cap : 64;
  while ((m->live + 1) * 2 > cap)
    cap *= 2;
  gf__smap_slot *slots = gf__calloc(cap, sizeof(*slots));
  if (!slots)
    return GF_ENOMEM;
  for (uint32_t j = 0; j < m->cap; j++) {
    const gf__smap_slot *s = &m->slots[j];
    if (!s->key || s->key == TOMB)
      continue;
    uint32_t i = s->hash & (cap - 1);
    while (slots[i].key)
      i = (i + 1) & (cap - 1);
    slots[i] = *s;
  }
  gf__free(m->slots);
  m->slots = slots;
  m->cap = cap;
  m->used = m->live;
  return 0;
}

int gf__smap_put(gf__smap *m, const char *key, uint32_t val) {
  uint32_t h = hash(key);
  if (m->cap) {
    for (uint32_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
      gf__smap_slot *s = &m->slots[i];
      if (!s->key)
        break;
      if (s->hash == h && s->key != TOMB && strcmp(s->key, key) == 0) {
        s->key = key;
        s->val = val;
        return 0;
      }
    }
  }
  if ((m->used + 1) * 4 > m->cap * 3 && grow(m))
    return GF_ENOMEM;
  uint32_t i = h & (m->cap - 1);
  while (m->slots[i].key && m->slots[i].key != TOMB)
    i = (i + 1) & (m->cap - 1);
  if (!m->slots[i].key)
    m->used++;
  m->slots[i].key = key;
  m->slots[i].val = val;
  m->slots[i].hash = h;
  m->live++;
  return 0;
}

void gf__smap_del(gf__smap *m, const char *key) {
  if (!m->cap)
    return;
  uint32_t h = hash(key);
  for (uint32_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    gf__smap_slot *s = &m->slots[i];
    if (!s->key)
      return;
    if (s->hash == h && s->key != TOMB && strcmp(s->key, key) == 0) {
      s->key = TOMB;
      m->live--;
      return;
    }
  }
}

void gf__smap_release(gf__smap *m) {
  gf__free(m->slots);
  memset(m, 0, sizeof(*m));
}
