/*
 * The extender's pending pods (sched_state.h).
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "buf.h"
#include "gpufrac/engine.h"
#include "gpufrac/error.h"
#include "sched_state.h"

/* ---- pending pods --------------------------------------------------------
 *
 * Which entry a pod is: the one with its uid; an entry without a uid is
 * matched by namespace and name (as is any entry, when the pod has no
 * uid).  So two pods of the same name with different uids (one replaced
 * by the other) are two entries.  Lookups are O(1): a map by uid and a
 * map by "ns/name" to the newest entry so named, the older ones chained
 * through `same` (two at most in practice).  When the table is full, a
 * new pod evicts the entry seen least recently (a pod seen again, by
 * filter, prioritize or the watch, becomes the most recent).  Under s->mu.
 */

static bool pend_named(const pend *e, const char *ns, const char *name) {
  size_t nl = strlen(ns);
  return nl == e->ns_len && memcmp(e->nskey, ns, nl) == 0 &&
         strcmp(e->nskey + nl + 1, name) == 0;
}

/* The newest entry named ns/name, with no uid if uidless. */
static pend *pend_by_name(const pend_tab *t, const char *ns, const char *name,
                          bool uidless) {
  char key[2 * GF_NAME_MAX + 2];
  int kl = snprintf(key, sizeof(key), "%s/%s", ns, name);
  if (kl < 0 || (size_t)kl >= sizeof(key))
    return NULL; /* longer than any entry's name */
  int64_t i = gf__smap_get(&t->by_ns, key);
  for (pend *e = i < 0 ? NULL : t->slots[i]; e; e = e->same)
    if ((!uidless || !e->uid[0]) && pend_named(e, ns, name))
      return e;
  return NULL;
}

pend *gf__pending_find(gf_sched *s, const char *uid, const char *ns,
                       const char *name) {
  if (uid && *uid) {
    int64_t i = gf__smap_get(&s->pend.by_uid, uid);
    if (i >= 0)
      return s->pend.slots[i];
    return pend_by_name(&s->pend, ns, name, true);
  }
  return pend_by_name(&s->pend, ns, name, false);
}

/* A new entry for p, not linked; NULL when out of memory or p's names do
 * not fit an entry. */
static pend *pend_new(const gf__pod *p) {
  size_t ln = strlen(p->ns), lm = strlen(p->name), lu = strlen(p->uid),
         lr = strlen(p->rv), lc = strlen(p->container), lmo = strlen(p->models);
  size_t lno = strlen(p->nominated);
  size_t text = ln + 1 + lm + 1 + lu + 1 + lr + 1 + lc + 1 + lmo + 1 + lno + 1;
  pend *e = gf__malloc(sizeof(*e) + text);
  if (!e)
    return NULL;
  memset(e, 0, sizeof(*e));
  e->ns_len = (uint32_t)ln;
  e->req = p->req;
  e->dp_slots = p->dp_slots;
  e->priority = p->priority;
  e->never_preempts = p->never_preempts;
  char *t = e->nskey;
  memcpy(t, p->ns, ln);
  t[ln] = '/';
  memcpy(t + ln + 1, p->name, lm + 1);
  t += ln + 1 + lm + 1;
#define PEND_STR(field, src, len)                                              \
  do {                                                                         \
    memcpy(t, src, len + 1);                                                   \
    e->field = t;                                                              \
    t += len + 1;                                                              \
  } while (0)
  PEND_STR(uid, p->uid, lu);
  PEND_STR(rv, p->rv, lr);
  PEND_STR(container, p->container, lc);
  PEND_STR(models, p->models, lmo);
  PEND_STR(nominated, p->nominated, lno);
#undef PEND_STR
  return e;
}

/* Takes e out of the maps, the name chain and the recency list, and frees
 * it.  Allocates nothing, so cannot fail. */
static void pend_drop(pend_tab *t, pend *e) {
  if (e->uid[0])
    gf__smap_del(&t->by_uid, e->uid);
  int64_t h = gf__smap_get(&t->by_ns, e->nskey);
  pend *head = h < 0 ? NULL : t->slots[h];
  if (head == e) {
    if (e->same) /* the next older one heads the chain: replaces the key */
      gf__smap_put(&t->by_ns, e->same->nskey, e->same->slot);
    else
      gf__smap_del(&t->by_ns, e->nskey);
  } else {
    for (pend *q = head; q; q = q->same)
      if (q->same == e) {
        q->same = e->same;
        break;
      }
  }
  *(e->older ? &e->older->newer : &t->oldest) = e->newer;
  *(e->newer ? &e->newer->older : &t->newest) = e->older;
  t->slots[e->slot] = NULL;
  t->free_slots[t->nfree++] = e->slot;
  t->n--;
  t->nominated -= e->nominated[0] != '\0';
  gf__free(e);
}

/* Links e as the newest entry.  GF_ENOMEM (e not linked) when a map or
 * the slot table cannot grow. */
static int pend_link(pend_tab *t, pend *e) {
  if (!t->nfree && t->nslots == t->cap) {
    uint32_t cap = t->cap ? t->cap * 2 : 16;
    pend **sl = gf__realloc(t->slots, cap * sizeof(*sl));
    if (!sl)
      return GF_ENOMEM;
    t->slots = sl;
    uint32_t *fs = gf__realloc(t->free_slots, cap * sizeof(*fs));
    if (!fs)
      return GF_ENOMEM;
    t->free_slots = fs;
    t->cap = cap;
  }
  uint32_t slot = t->nfree ? t->free_slots[t->nfree - 1] : t->nslots;
  if (e->uid[0] && gf__smap_put(&t->by_uid, e->uid, slot))
    return GF_ENOMEM;
  int64_t h = gf__smap_get(&t->by_ns, e->nskey);
  if (gf__smap_put(&t->by_ns, e->nskey, slot)) {
    if (e->uid[0])
      gf__smap_del(&t->by_uid, e->uid);
    return GF_ENOMEM;
  }
  if (t->nfree)
    t->nfree--;
  else
    t->nslots++;
  e->slot = slot;
  t->slots[slot] = e;
  e->same = h < 0 ? NULL : t->slots[h];
  e->older = t->newest;
  e->newer = NULL;
  *(t->newest ? &t->newest->newer : &t->oldest) = e;
  t->newest = e;
  t->n++;
  t->nominated += e->nominated[0] != '\0';
  return 0;
}

/* Remembers pending pod p (replacing what was known of it) as the most
 * recently seen.  Out of memory: nothing is remembered of p (its /bind
 * will say so and be retried). */
void gf__pending_put(gf_sched *s, const gf__pod *p) {
  pend_tab *t = &s->pend;
  pend *e = pend_new(p);
  if (!e)
    return;
  pend *old = gf__pending_find(s, p->uid, p->ns, p->name);
  if (old) {
    pend_drop(t, old);
  } else {
    s->changes++;
    if (t->n >= t->max && t->oldest)
      pend_drop(t, t->oldest);
  }
  if (pend_link(t, e))
    gf__free(e);
}

/* Remembers a pending pod sent in a request (the Pod of /filter or
 * /prioritize).  When an informer feeds the model and has already delivered
 * this pod (same uid), the watch's copy is kept: what /bind books and
 * grants comes from the API server, not from a request anyone reaching the
 * extender could send.  A pod the watch has not delivered yet is taken from
 * the request (kube-scheduler can be faster than the watch); the watch's
 * copy replaces it when it comes. */
void gf__request_pending_put(gf_sched *s, const gf__pod *p) {
  if (s->watched && p->uid[0] && gf__smap_get(&s->pend.by_uid, p->uid) >= 0)
    return;
  gf__pending_put(s, p);
}

/* Forgets the pending pod with this uid, if any. */
void gf__pending_forget(gf_sched *s, const char *uid) {
  int64_t i = gf__smap_get(&s->pend.by_uid, uid);
  if (i >= 0)
    pend_drop(&s->pend, s->pend.slots[i]);
}

void gf__pending_release(pend_tab *t) {
  while (t->oldest)
    pend_drop(t, t->oldest);
  gf__free(t->slots);
  gf__free(t->free_slots);
  gf__smap_release(&t->by_uid);
  gf__smap_release(&t->by_ns);
}
