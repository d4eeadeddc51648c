/*
 * kube-scheduler's preemption verb (ExtenderPreemptionArgs ->
 * ExtenderPreemptionResult) and the hold on capacity freed for a
 * nominated pod (docs/scheduler.md, "Preemption").
 *
 * Why it exists.  kube-scheduler's own preemption picks victims by
 * priority with its own view of the node: it counts gpufrac.io/gpu slots,
 * CPU and memory, not which GPU's memory a victim frees.  It can evict a
 * pod on the wrong GPU, or more pods than the preemptor needs.  With
 * preemptVerb set, kube-scheduler sends the candidate nodes it found (and
 * the victims it would take there) and uses the answer instead: for each
 * node, the smallest set of lower-priority pods whose removal lets the
 * preemptor fit on one concrete GPU of the model, or the node is left out.
 *
 * The choice, per node (everything read from the model under s->mu; the
 * model is never changed: candidates are tried on a copy of the node):
 *   - victims: pods bound there (P_BOUND or P_ASSUMED) with a priority
 *     below the preemptor's; a pod the disruption guard holds (loading its
 *     weights) only when the preemptor's priority exceeds its own by at
 *     least GF__PREEMPT_GUARD_GAP;
 *   - a share: per GPU, subsets of the victims on it in increasing size
 *     (all of a size are compared before a larger one is tried, and a
 *     larger size is tried while every set found breaks a budget; at most
 *     GF__PREEMPT_TRIES per node; past that, the cheapest victims one by
 *     one); whole GPUs: the GPUs whose pods are all victims, those whose
 *     victims risk fewest budgets first, then the fewest victims;
 *   - the best set: fewest PodDisruptionBudget violations, then fewest
 *     victims, then the lowest highest priority, then the lowest sum of
 *     priorities, then the least capacity left over on the GPU the
 *     preemptor would take (a tight fit leaves no sliver).
 * A node where the preemptor already fits the model is one where
 * kube-scheduler needs victims for its own reasons (slots, CPU, memory):
 * its own proposal is answered unchanged.
 *
 * PodDisruptionBudgets (pdb.h, the kube feed's informer): violations are
 * counted per set as kube-scheduler counts them; until the budgets are
 * listed the verb answers 503 (kube-scheduler retries the pod later).
 * Without a store (--no-kube) no victim breaks a budget.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "buf.h"
#include "defrag.h"
#include "gpufrac/error.h"
#include "pdb.h"
#include "sched_state.h"

/* Subsets tried per node before the greedy fallback. */
#define GF__PREEMPT_TRIES 20000u

typedef struct victim {
  const prec *p;
  uint64_t pdbs; /* the budgets of the node's view it counts against */
  bool always;   /* past the view's budgets: a violation in any set */
  bool risky;    /* one of its budgets allows no disruption now */
} victim;

typedef gf__preempt_pick vset;

/* What choose works on: one node, its victims, their budgets. */
typedef struct pickctx {
  const gf_node *base;
  victim *vs;
  uint32_t nv;
  const gf_request *r;
  const gf__pdb_view *pv; /* NULL: no budgets */
} pickctx;

/* PodDisruptionBudget violations of the set v, counted as kube-scheduler
 * counts them: each budget starts at its disruptionsAllowed and goes down
 * by one per victim it matches, the most important victims first (vs is
 * cheapest first); a victim that takes one below zero is a violation. */
static uint32_t violations(const pickctx *k, const vset *v) {
  int32_t left[GF__PDB_VIEW_MAX];
  uint32_t nb = k->pv ? k->pv->n : 0, out = 0;
  for (uint32_t b = 0; b < nb; b++)
    left[b] = k->pv->allowed[b];
  uint16_t at[GF__PREEMPT_MAX_VICTIMS];
  memcpy(at, v->at, v->n * sizeof(at[0]));
  for (uint32_t i = 1; i < v->n; i++) /* insertion sort, most important first */
    for (uint32_t j = i; j > 0 && at[j - 1] < at[j]; j--) {
      uint16_t t = at[j];
      at[j] = at[j - 1];
      at[j - 1] = t;
    }
  for (uint32_t i = 0; i < v->n; i++) {
    const victim *x = &k->vs[at[i]];
    bool bad = x->always;
    for (uint64_t m = x->pdbs; m; m &= m - 1)
      if (--left[__builtin_ctzll(m)] < 0)
        bad = true;
    out += bad;
  }
  return out;
}

static int vset_cmp(const vset *a, const vset *b) {
  if (a->ok != b->ok)
    return a->ok ? -1 : 1;
  if (a->pdb != b->pdb)
    return a->pdb < b->pdb ? -1 : 1;
  if (a->n != b->n)
    return a->n < b->n ? -1 : 1;
  if (a->max_prio != b->max_prio)
    return a->max_prio < b->max_prio ? -1 : 1;
  if (a->sum_prio != b->sum_prio)
    return a->sum_prio < b->sum_prio ? -1 : 1;
  if (a->left != b->left)
    return a->left < b->left ? -1 : 1;
  return 0;
}

static void reindex_copy(gf_node *n) {
  n->free_gpus = 0;
  n->max_free_milli = 0;
  for (uint32_t i = 0; i < n->ngpus; i++) {
    const gf_gpu *g = &n->gpus[i];
    if (g->npods == 0)
      n->free_gpus++;
    int32_t fm = g->exclusive ? 0 : GF_GPU_MILLI - g->milli_used;
    if (fm > n->max_free_milli)
      n->max_free_milli = fm;
  }
}

static int64_t booked_mem(const gf_gpu *g, const gf_request *r) {
  return r->gpu_milli >= GF_GPU_MILLI ? g->mem_bytes : r->gpu_mem_bytes;
}

/* Takes p's booking off the copy n (as gf_cluster_release would). */
static void unbook_copy(gf_node *n, const prec *p) {
  n->cpu_used -= p->req.cpu_milli;
  n->mem_used -= p->req.mem_bytes;
  for (uint32_t k = 0; k < p->pl.ngpus; k++) {
    gf_gpu *g = &n->gpus[p->pl.gpus[k]];
    g->milli_used -= p->req.gpu_milli;
    g->mem_used -= booked_mem(g, &p->req);
    if (g->npods)
      g->npods--;
    g->exclusive = false;
  }
}

/* Books r on GPUs gpus[0..r->gpu_count) of the copy n. */
static void book_copy(gf_node *n, const gf_request *r, const uint8_t *gpus) {
  n->cpu_used += r->cpu_milli;
  n->mem_used += r->mem_bytes;
  for (uint32_t k = 0; k < r->gpu_count; k++) {
    gf_gpu *g = &n->gpus[gpus[k]];
    g->milli_used += r->gpu_milli;
    g->mem_used += booked_mem(g, r);
    g->npods++;
    g->exclusive = r->mode == GF_MODE_EXCLUSIVE;
  }
  reindex_copy(n);
}

/* Capacity a GPU has left once r is on it: free memory and compute as
 * fractions of the GPU (0 when it is full on both axes). */
static double left_on(const gf_gpu *g, const gf_request *r) {
  double m = g->mem_bytes > 0
                 ? (double)(g->mem_bytes - g->mem_used - booked_mem(g, r)) /
                       (double)g->mem_bytes
                 : 0.0;
  double c = (double)(GF_GPU_MILLI - g->milli_used - r->gpu_milli) /
             (double)GF_GPU_MILLI;
  return (m > 0 ? m : 0) + (c > 0 ? c : 0);
}

/* Tries the victims set v->at[0..v->n) on a copy of k->base: fills v's
 * key, v->ok when r then fits (for a share: on GPU `gpu` when gpu >= 0). */
static void try_set(const pickctx *k, vset *v, int gpu) {
  gf_node n = *k->base;
  const gf_request *r = k->r;
  v->max_prio = INT64_MIN;
  v->sum_prio = 0;
  for (uint32_t i = 0; i < v->n; i++) {
    const victim *x = &k->vs[v->at[i]];
    unbook_copy(&n, x->p);
    if (x->p->priority > v->max_prio)
      v->max_prio = x->p->priority;
    v->sum_prio += x->p->priority;
  }
  reindex_copy(&n);
  v->ok = false;
  if (gpu >= 0) {
    if (gf_gpu_fits(&n.gpus[gpu], r) && gf_node_fits(&n, r)) {
      v->ok = true;
      v->left = left_on(&n.gpus[gpu], r);
    }
  } else if (gf_node_fits(&n, r)) {
    /* whole GPUs: the tightest leftover is none; count what stays free */
    v->ok = true;
    v->left = (double)n.free_gpus - (double)r->gpu_count;
  }
  v->pdb = v->ok ? violations(k, v) : 0;
}

static bool on_gpu(const prec *p, uint32_t g) {
  for (uint32_t k = 0; k < p->pl.ngpus; k++)
    if (p->pl.gpus[k] == g)
      return true;
  return false;
}

/* Next k-combination of [0, n) in c[0..k); false after the last. */
static bool comb_next(uint32_t *c, uint32_t k, uint32_t n) {
  uint32_t i = k;
  while (i > 0 && c[i - 1] == n - k + i - 1)
    i--;
  if (i == 0)
    return false;
  c[i - 1]++;
  for (uint32_t j = i; j < k; j++)
    c[j] = c[j - 1] + 1;
  return true;
}

static int cheaper(const void *a, const void *b) {
  const victim *x = a, *y = b;
  if (x->risky != y->risky)
    return x->risky ? 1 : -1;
  if (x->p->priority != y->p->priority)
    return x->p->priority < y->p->priority ? -1 : 1;
  /* the larger first: fewer of them free as much */
  int64_t mx = x->p->req.gpu_mem_bytes + x->p->req.gpu_milli;
  int64_t my = y->p->req.gpu_mem_bytes + y->p->req.gpu_milli;
  return mx > my ? -1 : mx < my ? 1 : 0;
}

/* Whole GPUs: a GPU frees only with every pod on it gone.  Per GPU the
 * pods that must go (none may be a non-victim); the GPUs whose victims
 * risk fewest budgets, then the fewest victims, as many as asked; then,
 * CPU or memory short, the cheapest other victims one by one. */
static void choose_whole(const pickctx *k, vset *cur, vset *best) {
  const gf_node *base = k->base;
  const gf_request *r = k->r;
  uint32_t cost[GF_MAX_GPUS_PER_NODE], risk[GF_MAX_GPUS_PER_NODE];
  bool usable[GF_MAX_GPUS_PER_NODE], take[GF_MAX_GPUS_PER_NODE] = {false};
  for (uint32_t g = 0; g < base->ngpus; g++) {
    usable[g] =
        !r->model_mask || (r->model_mask & (1ull << base->gpus[g].model));
    cost[g] = risk[g] = 0;
    for (uint32_t i = 0; i < k->nv && usable[g]; i++)
      if (on_gpu(k->vs[i].p, g)) {
        cost[g]++;
        risk[g] += k->vs[i].risky;
      }
    usable[g] = usable[g] && cost[g] == base->gpus[g].npods;
  }
  for (uint32_t n = 0; n < r->gpu_count; n++) {
    int pk = -1;
    for (uint32_t g = 0; g < base->ngpus; g++)
      if (usable[g] && !take[g] &&
          (pk < 0 || risk[g] < risk[pk] ||
           (risk[g] == risk[pk] && cost[g] < cost[pk])))
        pk = (int)g;
    if (pk < 0)
      return;
    take[pk] = true;
  }
  cur->n = 0;
  for (uint32_t i = 0; i < k->nv; i++) {
    bool in = false;
    for (uint32_t g = 0; g < base->ngpus && !in; g++)
      in = take[g] && on_gpu(k->vs[i].p, g);
    if (in)
      cur->at[cur->n++] = (uint16_t)i;
  }
  try_set(k, cur, -1);
  for (uint32_t i = 0; !cur->ok && i < k->nv; i++) {
    bool in = false;
    for (uint32_t j = 0; j < cur->n && !in; j++)
      in = cur->at[j] == i;
    if (!in) {
      cur->at[cur->n++] = (uint16_t)i;
      try_set(k, cur, -1);
    }
  }
  if (cur->ok && cur->n > 0)
    *best = *cur;
}

/* A share on GPU g: subsets of the victims there in increasing size, all
 * of a size compared, until a size yields a set that breaks no budget (a
 * larger set that breaks none beats a smaller that breaks one, as the
 * order says); *tries counts against GF__PREEMPT_TRIES.  True when a set
 * was found. */
static bool share_subsets(const pickctx *k, uint32_t g, const uint32_t *on,
                          uint32_t non, uint32_t *tries, vset *cur,
                          vset *best) {
  bool found = false, clean = false;
  for (uint32_t n = 1; n <= non && !clean; n++) {
    uint32_t c[GF__PREEMPT_MAX_VICTIMS];
    for (uint32_t j = 0; j < n; j++)
      c[j] = j;
    do {
      if (++*tries > GF__PREEMPT_TRIES)
        return found;
      cur->n = n;
      for (uint32_t j = 0; j < n; j++)
        cur->at[j] = (uint16_t)on[c[j]];
      try_set(k, cur, (int)g);
      if (cur->ok) {
        found = true;
        clean = clean || cur->pdb == 0;
        if (vset_cmp(cur, best) < 0)
          *best = *cur;
      }
    } while (comb_next(c, n, non));
  }
  return found;
}

/* A share: on one GPU. */
static void choose_share(const pickctx *k, vset *cur, vset *best) {
  uint32_t on[GF__PREEMPT_MAX_VICTIMS], tries = 0;
  for (uint32_t g = 0; g < k->base->ngpus; g++) {
    const gf_gpu *gp = &k->base->gpus[g];
    if (gp->whole_only ||
        (k->r->model_mask && !(k->r->model_mask & (1ull << gp->model))))
      continue;
    uint32_t non = 0;
    for (uint32_t i = 0; i < k->nv; i++)
      if (on_gpu(k->vs[i].p, g))
        on[non++] = i;
    if (share_subsets(k, g, on, non, &tries, cur, best))
      continue;
    /* Past the budget, or the GPU alone is not enough (CPU or memory):
     * the cheapest victims, this GPU's first, one by one. */
    *cur = (vset){0}; /* nothing tried on this GPU yet (it may hold none) */
    for (uint32_t j = 0; j < non && !cur->ok; j++) {
      cur->at[cur->n++] = (uint16_t)on[j];
      try_set(k, cur, (int)g);
    }
    for (uint32_t i = 0; !cur->ok && i < k->nv; i++) {
      if (on_gpu(k->vs[i].p, g))
        continue;
      cur->at[cur->n++] = (uint16_t)i;
      try_set(k, cur, (int)g);
    }
    if (cur->ok && cur->n > 0 && vset_cmp(cur, best) < 0)
      *best = *cur;
  }
}

/* The best victim set for k (victims sorted cheapest first) into *best
 * (best->ok false when none frees a GPU).  GF_ENOMEM, or 0. */
static int choose(const pickctx *k, vset *best) {
  memset(best, 0, sizeof(*best));
  vset *cur = gf__calloc(1, sizeof(*cur));
  if (!cur)
    return GF_ENOMEM;
  if (k->r->gpu_milli >= GF_GPU_MILLI)
    choose_whole(k, cur, best);
  else
    choose_share(k, cur, best);
  gf__free(cur);
  return 0;
}

int gf__preempt_pick_cmp(const gf__preempt_pick *a, const gf__preempt_pick *b) {
  return vset_cmp(a, b);
}

/* The budgets of vs[0..n) (their pdbs, always, risky) and the view, as
 * node_victims counts them. */
static void budgets_of(gf__pdb *db, victim *vs, uint32_t n, gf__pdb_view *pv) {
  const char *uids[GF__PREEMPT_MAX_VICTIMS] = {NULL};
  uint64_t masks[GF__PREEMPT_MAX_VICTIMS];
  bool always[GF__PREEMPT_MAX_VICTIMS];
  for (uint32_t i = 0; i < n; i++)
    uids[i] = vs[i].p->uid ? vs[i].p->uid : "";
  gf__pdb_match(db, GF__PDB_EVICTION, uids, n, masks, always, pv);
  for (uint32_t i = 0; i < n; i++) {
    vs[i].pdbs = masks[i];
    vs[i].always = vs[i].risky = always[i];
    for (uint64_t m = masks[i]; m; m &= m - 1)
      vs[i].risky |= pv->allowed[__builtin_ctzll(m)] <= 0;
  }
}

int gf__preempt_choose(const gf_node *base, const prec *cands, uint32_t n,
                       const gf_request *r, struct gf__pdb *db,
                       gf__preempt_pick *out) {
  memset(out, 0, sizeof(*out));
  if (n > GF__PREEMPT_MAX_VICTIMS)
    n = GF__PREEMPT_MAX_VICTIMS;
  victim *vs = gf__malloc((n ? n : 1) * sizeof(*vs));
  if (!vs)
    return GF_ENOMEM;
  for (uint32_t i = 0; i < n; i++)
    vs[i] = (victim){&cands[i], 0, false, false};
  gf__pdb_view pv = {0};
  if (db && n)
    budgets_of(db, vs, n, &pv);
  qsort(vs, n, sizeof(*vs), cheaper);
  pickctx k = {base, vs, n, r, db ? &pv : NULL};
  int rc = choose(&k, out);
  /* the victims' indices in cands, not in the sorted copy */
  for (uint32_t j = 0; !rc && out->ok && j < out->n; j++)
    out->at[j] = (uint16_t)(vs[out->at[j]].p - cands);
  gf__free(vs);
  return rc;
}

/* ---- the hold for nominated pods ---------------------------------------*/

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Hold i ends: the pods refused because of it are to be nudged. */
static void dhold_end(gf_sched *s, uint32_t i) {
  const struct gf__dhold *d = &s->dhold[i];
  for (uint32_t k = 0; k < d->nrefused; k++) {
    bool dup = false;
    for (uint32_t j = 0; j < s->nnudge && !dup; j++)
      dup = !strcmp(s->nudge[j].uid, d->refused[k].uid);
    if (!dup && s->nnudge < sizeof(s->nudge) / sizeof(s->nudge[0]))
      s->nudge[s->nnudge++] = d->refused[k];
  }
}

/* The defragmentation holds still wanted, into h (their pods pending);
 * those that ended are dropped (h NULL: only that). */
static void dholds_collect(gf_sched *s, int32_t priority, const char *uid,
                           gf__holds *h) {
  int64_t now = mono_ms();
  uint32_t keep = 0;
  for (uint32_t i = 0; i < s->ndhold; i++) {
    const pend *e = gf__pending_find(s, s->dhold[i].uid, "", "");
    if (!e || now >= s->dhold[i].until_ms) {
      dhold_end(s, i); /* placed, gone, or expired: dropped */
      continue;
    }
    if (keep != i)
      s->dhold[keep] = s->dhold[i];
    keep++;
    if (!h)
      continue;
    if (h->n < GF__HOLDS_MAX && e->priority >= priority &&
        !(uid && uid[0] && strcmp(e->uid, uid) == 0)) {
      h->node[h->n] = s->dhold[keep - 1].node;
      h->dh[h->n] = &s->dhold[keep - 1];
      h->e[h->n++] = e;
    }
  }
  s->ndhold = keep;
}

uint32_t gf__holds_collect(gf_sched *s, int32_t priority, const char *uid,
                           gf__holds *h) {
  h->n = 0;
  if (s->pend.nominated == 0 && s->ndhold == 0)
    return 0; /* the common case: no preemption or defragmentation waiting */
  for (const pend *e = s->pend.newest;
       e && h->n < GF__HOLDS_MAX && s->pend.nominated; e = e->older)
    if (e->nominated[0] && e->priority >= priority &&
        !(uid && uid[0] && strcmp(e->uid, uid) == 0)) {
      h->node[h->n] = e->nominated;
      h->dh[h->n] = NULL;
      h->e[h->n++] = e;
    }
  if (s->ndhold)
    dholds_collect(s, priority, uid, h);
  return h->n;
}

static void hold_add(gf_sched *s, const char *uid, const char *node,
                     const char *const *moved, uint32_t nmoved, int64_t ms,
                     bool preempt) {
  pthread_mutex_lock(&s->mu);
  uint32_t at = s->ndhold;
  if (at == sizeof(s->dhold) / sizeof(s->dhold[0])) {
    at = 0; /* full: the one that expires first makes room */
    for (uint32_t i = 1; i < s->ndhold; i++)
      if (s->dhold[i].until_ms < s->dhold[at].until_ms)
        at = i;
    dhold_end(s, at);
  } else {
    s->ndhold++;
  }
  snprintf(s->dhold[at].uid, sizeof(s->dhold[at].uid), "%s", uid);
  snprintf(s->dhold[at].node, sizeof(s->dhold[at].node), "%s", node);
  s->dhold[at].until_ms = mono_ms() + ms;
  s->dhold[at].preempt = preempt;
  s->dhold[at].told = false;
  s->dhold[at].nmoved = 0;
  s->dhold[at].nrefused = 0;
  for (uint32_t i = 0; i < nmoved && i < 8; i++)
    snprintf(s->dhold[at].moved[s->dhold[at].nmoved++], GF__UID_MAX, "%s",
             moved[i]);
  pthread_mutex_unlock(&s->mu);
}

void gf__defrag_hold(gf_sched *s, const char *uid, const char *node,
                     const char *const *moved, uint32_t nmoved, int64_t ms) {
  hold_add(s, uid, node, moved, nmoved, ms, false);
}

void gf__preempt_hold(gf_sched *s, const char *uid, const char *node,
                      const char *const *victims, uint32_t n, int64_t ms) {
  hold_add(s, uid, node, victims, n, ms, true);
}

void gf__hold_drop(gf_sched *s, const char *uid) {
  pthread_mutex_lock(&s->mu);
  uint32_t keep = 0;
  for (uint32_t i = 0; i < s->ndhold; i++) {
    if (!strcmp(s->dhold[i].uid, uid)) {
      dhold_end(s, i);
      continue;
    }
    s->dhold[keep++] = s->dhold[i];
  }
  s->ndhold = keep;
  pthread_mutex_unlock(&s->mu);
}

/* Takes the pods moved for defrag hold k off copy (node ni): they are
 * leaving, the model may not have seen them go yet. */
static void hold_leave(gf_sched *s, const gf__holds *h, uint32_t k, uint32_t ni,
                       gf_node *copy) {
  for (uint32_t m = 0; h->dh[k] && m < h->dh[k]->nmoved; m++) {
    prec *q = gf__find_pod(s, h->dh[k]->moved[m]);
    if (q && q->placed && q->pl.node == ni) {
      unbook_copy(copy, q);
      reindex_copy(copy);
    }
  }
}

/* Books hold k's pod into copy (its moved pods already left): the GPUs it
 * takes into gpus[], how many (0: it does not fit yet). */
static uint32_t hold_book(gf_sched *s, const gf__holds *h, uint32_t k,
                          gf_node *copy, uint8_t *gpus) {
  const pend *e = h->e[k];
  gf_request r = e->req;
  if (s->whole && r.gpu_count > 0) /* as gf__effective does */
    r.gpu_milli = GF_GPU_MILLI;
  bool named;
  r.model_mask = gf__models_mask(s->c, e->models, &named);
  if (!gf_node_fits(copy, &r))
    return 0; /* its victims are still there: they hold it meanwhile */
  /* The GPUs it would take: the tightest that fit. */
  bool used[GF_MAX_GPUS_PER_NODE] = {false};
  uint32_t got = 0;
  for (; got < r.gpu_count; got++) {
    int pick = -1;
    double pl = 0;
    for (uint32_t g = 0; g < copy->ngpus; g++) {
      if (used[g] || !gf_gpu_fits(&copy->gpus[g], &r))
        continue;
      double l = left_on(&copy->gpus[g], &r);
      if (pick < 0 || l < pl) {
        pick = (int)g;
        pl = l;
      }
    }
    if (pick < 0)
      return 0;
    used[pick] = true;
    gpus[got] = (uint8_t)pick;
  }
  book_copy(copy, &r, gpus);
  return got;
}

bool gf__holds_apply(gf_sched *s, const gf__holds *h, uint32_t ni,
                     const char *node, gf_node *copy) {
  bool any = false;
  uint8_t gpus[GF_MAX_GPUS_PER_NODE];
  for (uint32_t k = 0; k < h->n; k++) {
    if (strcmp(h->node[k], node) != 0 || h->e[k]->req.gpu_count == 0)
      continue;
    if (!any) {
      *copy = *gf_cluster_node(s->c, ni);
      any = true;
    }
    hold_leave(s, h, k, ni, copy);
    hold_book(s, h, k, copy, gpus);
  }
  return any;
}

/* The hold of h on node ni that keeps r off it: with the pods leaving for
 * the holds gone r fits, and this hold's booking leaves it no room (else
 * the first that books anything), with the GPUs it takes; -1 when the
 * holds are not the reason. */
static int hold_culprit(gf_sched *s, const gf__holds *h, uint32_t ni,
                        const char *node, const gf_request *r, gf_node *copy,
                        uint8_t *gpus, uint32_t *ngot) {
  int first = -1;
  uint8_t g[GF_MAX_GPUS_PER_NODE];
  *copy = *gf_cluster_node(s->c, ni);
  for (uint32_t k = 0; k < h->n; k++)
    if (!strcmp(h->node[k], node))
      hold_leave(s, h, k, ni, copy);
  if (!gf_node_fits(copy, r))
    return -1; /* refused without the holds too */
  for (uint32_t k = 0; k < h->n; k++) {
    if (strcmp(h->node[k], node) != 0 || h->e[k]->req.gpu_count == 0)
      continue;
    uint32_t got = hold_book(s, h, k, copy, g);
    if (!got)
      continue;
    bool blocks = !gf_node_fits(copy, r);
    if (first < 0 || blocks) {
      first = (int)k;
      *ngot = got;
      memcpy(gpus, g, got);
    }
    if (blocks)
      break;
  }
  return first;
}

/* A CLOCK_MONOTONIC time in ms as the wall clock's HH:MM:SS UTC. */
static void until_text(int64_t until_ms, char *out, size_t cap) {
  time_t t = time(NULL) + (time_t)((until_ms - mono_ms() + 999) / 1000);
  struct tm tm;
  if (gmtime_r(&t, &tm))
    strftime(out, cap, "%H:%M:%S UTC", &tm);
  else
    snprintf(out, cap, "(unknown)");
}

/* Remembers pod p on defrag hold d (refused because of it). */
static void hold_refused(struct gf__dhold *d, const gf__pod *p) {
  if (!p->uid[0])
    return;
  for (uint32_t i = 0; i < d->nrefused; i++)
    if (!strcmp(d->refused[i].uid, p->uid))
      return;
  if (d->nrefused == sizeof(d->refused) / sizeof(d->refused[0]))
    return;
  gf__podref *x = &d->refused[d->nrefused++];
  snprintf(x->uid, sizeof(x->uid), "%s", p->uid);
  snprintf(x->ns, sizeof(x->ns), "%s", p->ns);
  snprintf(x->name, sizeof(x->name), "%s", p->name);
}

void gf__holds_why(gf_sched *s, const gf__holds *h, uint32_t ni,
                   const char *node, const gf_request *r, const gf__pod *p,
                   char *why, size_t cap) {
  gf_request rn = *r; /* a compute-only share's memory on this node */
  gf__part_of_memory(gf_cluster_node(s->c, ni), &rn);
  gf_node *copy = gf__malloc(sizeof(*copy));
  uint8_t gpus[GF_MAX_GPUS_PER_NODE];
  uint32_t ngot = 0;
  int k = copy ? hold_culprit(s, h, ni, node, &rn, copy, gpus, &ngot) : -1;
  gf__free(copy);
  if (k < 0)
    return;
  const gf_node *n = gf_cluster_node(s->c, ni);
  const pend *e = h->e[k];
  char list[GF_MAX_GPUS_PER_NODE * 4 + 8] = "";
  size_t w = 0;
  for (uint32_t i = 0; i < ngot && w < sizeof(list); i++)
    w += (size_t)snprintf(list + w, sizeof(list) - w, "%s%u", i ? "," : "",
                          n->gpus[gpus[i]].index);
  char by[96], old[GF_DIAG_MAX];
  if (h->dh[k]) {
    char until[32];
    until_text(h->dh[k]->until_ms, until, sizeof(until));
    snprintf(by, sizeof(by), "by %s until %s",
             h->dh[k]->preempt ? "gpufrac's preemption" : "defragmentation",
             until);
    hold_refused(&s->dhold[h->dh[k] - s->dhold], p);
  } else {
    snprintf(by, sizeof(by), "(nominated here after a preemption)");
  }
  snprintf(old, sizeof(old), "%s", why);
  snprintf(why, cap, "GPU%s %s held for %.*s/%.120s %s (%s)",
           ngot > 1 ? "s" : "", list, (int)e->ns_len, e->nskey,
           e->nskey + e->ns_len + 1, by, old);
}

/* At bind: pick's GPUs on node ni that the holds of pods other than pp
 * (of no lower priority) need are traded for GPUs that r fits once those
 * pods are booked (the tightest), so a pod that passed /filter beside a
 * held pod does not take the held GPU.  Under the mutex. */
void gf__holds_steer(gf_sched *s, const pend *pp, uint32_t ni, const char *node,
                     const gf_request *r, gf_placement *pick) {
  gf__holds *h = gf__malloc(sizeof(*h));
  gf_node *copy = gf__malloc(sizeof(*copy));
  if (h && copy && gf__holds_collect(s, pp->priority, pp->uid, h) &&
      gf__holds_apply(s, h, ni, node, copy)) {
    bool used[GF_MAX_GPUS_PER_NODE] = {false};
    for (uint32_t k = 0; k < pick->ngpus; k++)
      used[pick->gpus[k]] = true;
    for (uint32_t k = 0; k < pick->ngpus; k++) {
      if (gf_gpu_fits(&copy->gpus[pick->gpus[k]], r))
        continue;
      int best = -1;
      double bl = 0;
      for (uint32_t g = 0; g < copy->ngpus; g++) {
        if (used[g] || !gf_gpu_fits(&copy->gpus[g], r))
          continue;
        double l = left_on(&copy->gpus[g], r);
        if (best < 0 || l < bl) {
          best = (int)g;
          bl = l;
        }
      }
      if (best >= 0) {
        used[best] = true;
        pick->gpus[k] = (uint8_t)best;
      }
    }
  }
  gf__free(h);
  gf__free(copy);
}

/* ---- the verb ------------------------------------------------------------*/

/* The UID of a victim as kube-scheduler sends it: a MetaPod {"UID"} or a
 * v1 Pod (metadata.uid). */
static const char *victim_uid(const json_t *v) {
  const json_t *u = gf__json_get(v, "UID");
  if (!u)
    u = gf__json_get(gf__json_get(v, "metadata"), "uid");
  return json_string_value(u);
}

static bool eligible(const prec *p, int32_t prio) {
  if (!p->placed || p->state == P_BINDING || p->priority >= prio)
    return false;
  if (p->loading &&
      (int64_t)prio - (int64_t)p->priority < GF__PREEMPT_GUARD_GAP)
    return false;
  return true;
}

/* The victims on one node (its pods from `first` along nxt) for a
 * preemptor of priority prio into vs, their budgets counted by rule into
 * *pv (when the extender has a store), cheapest first.  Returns how
 * many. */
static uint32_t node_victims(gf_sched *s, int64_t first, const int64_t *nxt,
                             int32_t prio, gf__pdb_rule rule, victim *vs,
                             gf__pdb_view *pv) {
  uint32_t nv = 0;
  for (int64_t k = first; k >= 0 && nv < GF__PREEMPT_MAX_VICTIMS; k = nxt[k])
    if (eligible(&s->pods[k], prio))
      vs[nv++] = (victim){&s->pods[k], 0, false, false};
  if (s->pdb && nv) {
    const char *uids[GF__PREEMPT_MAX_VICTIMS];
    uint64_t masks[GF__PREEMPT_MAX_VICTIMS];
    bool always[GF__PREEMPT_MAX_VICTIMS];
    for (uint32_t i = 0; i < nv; i++)
      uids[i] = vs[i].p->uid;
    gf__pdb_match(s->pdb, rule, uids, nv, masks, always, pv);
    for (uint32_t i = 0; i < nv; i++) {
      vs[i].pdbs = masks[i];
      vs[i].always = vs[i].risky = always[i];
      for (uint64_t m = masks[i]; m; m &= m - 1)
        vs[i].risky |= pv->allowed[__builtin_ctzll(m)] <= 0;
    }
  } else if (s->pdb) {
    pv->n = 0;
  }
  qsort(vs, nv, sizeof(*vs), cheaper);
  return nv;
}

/* node_victims for the preempt verb: budgets as kube-scheduler counts. */
static uint32_t verb_victims(gf_sched *s, int64_t first, const int64_t *nxt,
                             int32_t prio, victim *vs, gf__pdb_view *pv) {
  return node_victims(s, first, nxt, prio, GF__PDB_SCHEDULER, vs, pv);
}

static void bad(reply_buf *out, const char *what) {
  char msg[GF_DIAG_MAX + 32];
  snprintf(msg, sizeof(msg), "gpufrac extender: preempt: %s", what);
  gf__utf8_fix(msg);
  out->status = 400;
  out->refused = true;
  out->json = gf__error_obj(msg);
}

/* The pods of each node the request names, in one pass over the pods:
 * slot[node] (-1: not named), head[slot] and nxt[pod] the lists (owned by
 * the caller, also on failure).  Under the mutex.  GF_ENOMEM or 0. */
static int node_lists(gf_sched *s, const json_t *map, int32_t **slot,
                      int64_t **head, int64_t **nxt) {
  int32_t *sl = *slot = gf__malloc(((size_t)s->nnodes + 1) * sizeof(*sl));
  if (!sl)
    return GF_ENOMEM;
  for (uint32_t i = 0; i < s->nnodes; i++)
    sl[i] = -1;
  const char *name;
  const json_t *val;
  int32_t nasked = 0;
  json_object_foreach((json_t *)map, name, val) {
    int64_t ni = gf__smap_get(&s->nmap, name);
    if (ni >= 0 && sl[ni] < 0)
      sl[ni] = nasked++;
  }
  int64_t *h = *head = gf__malloc(((size_t)nasked + 1) * sizeof(*h));
  int64_t *nx = *nxt = gf__malloc(((size_t)s->npods + 1) * sizeof(*nx));
  if (!h || !nx)
    return GF_ENOMEM;
  for (int32_t i = 0; i < nasked; i++)
    h[i] = -1;
  for (uint32_t k = s->npods; k-- > 0;) {
    const prec *q = &s->pods[k];
    if (q->placed && sl[q->pl.node] >= 0) {
      nx[k] = h[sl[q->pl.node]];
      h[sl[q->pl.node]] = (int64_t)k;
    }
  }
  return 0;
}

void gf__do_preempt(gf_sched *s, const char *body, size_t len, reply_buf *out) {
  json_error_t je;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  char msg[GF_DIAG_MAX];
  if (!root && json_error_code(&je) == json_error_out_of_memory) {
    out->status = 500;
    out->json = gf__error_obj("gpufrac extender: preempt: out of memory");
    return;
  }
  if (!root) {
    snprintf(msg, sizeof(msg), "invalid JSON at line %d column %d: %s", je.line,
             je.column, je.text);
    bad(out, msg);
    return;
  }
  const json_t *pod = gf__json_get(root, "Pod");
  const json_t *meta = gf__json_get(root, "NodeNameToMetaVictims");
  const json_t *full = gf__json_get(root, "NodeNameToVictims");
  const json_t *map = json_is_object(meta) && json_object_size(meta) ? meta
                      : json_is_object(full)                         ? full
                                                                     : meta;
  gf__pod *p = gf__malloc(sizeof(*p));
  victim *vs = gf__malloc(GF__PREEMPT_MAX_VICTIMS * sizeof(*vs));
  vset *best = gf__malloc(sizeof(*best));
  gf_node *base = gf__malloc(sizeof(*base));
  int32_t *slot = NULL;
  int64_t *head = NULL, *nxt = NULL;
  json_t *res = json_object();
  gf_diag d = {""};
  if (!p || !vs || !best || !base || !res) {
    out->status = 500;
    goto done;
  }
  if (!json_is_object(root) || !json_is_object(pod)) {
    bad(out, "the request has no Pod object");
    goto done;
  }
  if ((meta && !json_is_object(meta) && !json_is_null(meta)) ||
      (full && !json_is_object(full) && !json_is_null(full))) {
    bad(out, "NodeNameToMetaVictims / NodeNameToVictims is not an object");
    goto done;
  }
  if (gf__pod_parse_ex(pod, s->accept, p, &d)) {
    bad(out, d.msg);
    goto done;
  }
  pthread_mutex_lock(&s->mu);
  if (map && json_object_size(map) > (size_t)s->nnodes + 256) {
    size_t known = s->nnodes;
    pthread_mutex_unlock(&s->mu);
    snprintf(msg, sizeof(msg),
             "the request names %zu nodes and the extender knows %zu",
             json_object_size(map), known);
    bad(out, msg);
    goto done;
  }
  if (s->pdb && !gf__pdb_synced(s->pdb)) {
    pthread_mutex_unlock(&s->mu);
    out->status = 503;
    out->json = gf__error_obj("gpufrac extender: preempt: the "
                              "PodDisruptionBudgets are not listed yet");
    goto done;
  }
  int rc = gf__ensure_model(s);
  if (rc) {
    pthread_mutex_unlock(&s->mu);
    out->status = 500;
    out->json = gf__error_obj("extender out of memory rebuilding its model");
    goto done;
  }
  gf_request r = p->req;
  if (s->whole && r.gpu_count > 0) /* gf__effective, without the call back */
    r.gpu_milli = GF_GPU_MILLI;
  bool named;
  r.model_mask = gf__models_mask(s->c, p->models, &named);
  bool hopeless = r.gpu_count == 0 || (named && r.model_mask == 0);
  if (node_lists(s, map, &slot, &head, &nxt))
    goto oom_locked;
  const char *name;
  const json_t *val;
  json_object_foreach((json_t *)map, name, val) {
    int64_t ni = hopeless ? -1 : gf__smap_get(&s->nmap, name);
    if (ni < 0)
      continue; /* unknown to the model: left out of the answer */
    const nrec *nr = &s->nodes[ni];
    if (nr->disrupted || nr->cordoned || !nr->has_inv)
      continue;
    const json_t *pods = gf__json_get(val, "Pods");
    if (val && !json_is_object(val))
      continue;
    *base = *gf_cluster_node(s->c, (uint32_t)ni);
    gf_request rn = r; /* a compute-only share's memory on this node */
    gf__part_of_memory(base, &rn);
    gf__pdb_view pv;
    pickctx k = {base, vs, 0, &rn, s->pdb ? &pv : NULL};
    k.nv = verb_victims(s, head[slot[ni]], nxt, p->priority, vs, &pv);
    json_t *list = json_array();
    if (!list || json_object_set_new(res, name, list))
      goto oom_locked;
    int64_t npdb = 0;
    if (gf_node_fits(base, &rn)) {
      /* kube-scheduler needs victims for its own reasons (slots, CPU,
       * memory): its proposal, unless it takes a pod we protect */
      const json_t *npv = gf__json_get(val, "NumPDBViolations");
      npdb = json_is_integer(npv) ? json_integer_value(npv) : 0;
      size_t i;
      const json_t *v;
      bool keep = json_array_size(pods) > 0;
      json_array_foreach(pods, i, v) {
        const char *uid = victim_uid(v);
        const prec *q = uid ? gf__find_pod(s, uid) : NULL;
        if (!uid || (q && !eligible(q, p->priority))) {
          keep = false;
          break;
        }
        if (json_array_append_new(list, json_pack("{s:s}", "UID", uid)))
          goto oom_locked;
      }
      if (!keep) {
        json_object_del(res, name);
        continue;
      }
    } else {
      if (choose(&k, best)) {
        pthread_mutex_unlock(&s->mu);
        out->status = 500;
        out->json = gf__error_obj("gpufrac extender: preempt: out of memory");
        goto done;
      }
      if (!best->ok) {
        json_object_del(res, name); /* no set frees a GPU here */
        continue;
      }
      for (uint32_t j = 0; j < best->n; j++)
        if (json_array_append_new(
                list, json_pack("{s:s}", "UID", vs[best->at[j]].p->uid)))
          goto oom_locked;
      npdb = best->pdb;
    }
    json_t *mv = json_pack("{s:O,s:I}", "Pods", list, "NumPDBViolations",
                           (json_int_t)npdb);
    if (!mv || json_object_set_new(res, name, mv))
      goto oom_locked;
  }
  pthread_mutex_unlock(&s->mu);
  out->json = json_pack("{s:O}", "NodeNameToMetaVictims", res);
  out->status = out->json ? 200 : 500;
  goto done;
oom_locked:
  pthread_mutex_unlock(&s->mu);
  out->status = 500;
done:
  json_decref(res);
  json_decref(root);
  gf__free(slot);
  gf__free(head);
  gf__free(nxt);
  gf__free(p);
  gf__free(vs);
  gf__free(best);
  gf__free(base);
}

void gf__sched_set_pdb(gf_sched *s, struct gf__pdb *db) {
  pthread_mutex_lock(&s->mu);
  s->pdb = db;
  pthread_mutex_unlock(&s->mu);
}

/* ---- defragmentation's candidate nodes (defrag.h) ----------------------*/

/* kube-scheduler's candidate nodes for one pending pod: the nodes its own
 * filters passed (nodeSelector, node affinity, taints and tolerations,
 * volumes, ...) as the last /filter for it named them, as sorted 64-bit
 * hashes of their names. */
struct gf__doffer {
  char uid[GF__UID_MAX]; /* "" when free */
  uint64_t seq;          /* when last written (the oldest makes room) */
  int64_t first_ms;      /* CLOCK_MONOTONIC of the pod's first record */
  uint32_t n, cap;
  uint64_t *h;
  bool open; /* between begin and end */
};

#define GF__DOFFER_MAX 256u

static uint64_t name_hash(const char *name) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const unsigned char *c = (const unsigned char *)name; *c; c++)
    h = (h ^ *c) * 1099511628211ull;
  return h;
}

static int hash_cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

void gf__defrag_enable(gf_sched *s) {
  pthread_mutex_lock(&s->mu);
  s->defrag_on = true;
  pthread_mutex_unlock(&s->mu);
}

static struct gf__doffer *offer_find(gf_sched *s, const char *uid) {
  for (uint32_t i = 0; uid && uid[0] && i < s->ndoffer; i++)
    if (!s->doffer[i].open && !strcmp(s->doffer[i].uid, uid))
      return &s->doffer[i];
  return NULL;
}

struct gf__doffer *gf__defrag_offer_begin(gf_sched *s, const gf__pod *p,
                                          size_t nnodes) {
  if (!s->defrag_on || !p->uid[0])
    return NULL;
  if (!s->doffer &&
      !(s->doffer = gf__calloc(GF__DOFFER_MAX, sizeof(*s->doffer))))
    return NULL;
  struct gf__doffer *o = NULL, *old = NULL;
  for (uint32_t i = 0; i < s->ndoffer && !o; i++) {
    struct gf__doffer *d = &s->doffer[i];
    uint64_t age = d->uid[0] ? d->seq : 0; /* a free one first */
    if (!strcmp(d->uid, p->uid))
      o = d;
    else if (!old || age < (old->uid[0] ? old->seq : 0))
      old = d;
  }
  if (!o) { /* a new one, or the oldest makes room */
    o = s->ndoffer < GF__DOFFER_MAX ? &s->doffer[s->ndoffer++] : old;
    o->first_ms = mono_ms();
  }
  snprintf(o->uid, sizeof(o->uid), "%s", p->uid);
  o->seq = ++s->doffer_seq;
  o->n = 0;
  o->open = true;
  if (nnodes > o->cap) {
    uint64_t *h = gf__realloc(o->h, nnodes * sizeof(*h));
    if (!h) {
      o->uid[0] = 0; /* no record: no plan for the pod */
      o->open = false;
      return NULL;
    }
    o->h = h;
    o->cap = (uint32_t)nnodes;
  }
  return o;
}

void gf__defrag_offer_add(struct gf__doffer *o, const char *node) {
  if (o->n < o->cap)
    o->h[o->n++] = name_hash(node);
}

void gf__defrag_offer_end(struct gf__doffer *o, bool keep) {
  o->open = false;
  if (!keep || o->n == 0) {
    o->uid[0] = 0; /* it fits somewhere (or may go nowhere): no record */
    return;
  }
  qsort(o->h, o->n, sizeof(o->h[0]), hash_cmp);
}

void gf__defrag_release(gf_sched *s) {
  for (uint32_t i = 0; s->doffer && i < s->ndoffer; i++)
    gf__free(s->doffer[i].h);
  gf__free(s->doffer);
  s->doffer = NULL;
  s->ndoffer = 0;
}

static bool offered(const struct gf__doffer *o, const char *node) {
  uint64_t h = name_hash(node);
  return bsearch(&h, o->h, o->n, sizeof(o->h[0]), hash_cmp) != NULL;
}

uint32_t gf__defrag_nudges(gf_sched *s, gf__podref *out, uint32_t max) {
  pthread_mutex_lock(&s->mu);
  if (s->ndhold)
    dholds_collect(s, 0, NULL, NULL); /* ended holds give up their pods */
  uint32_t n = 0, i = 0;
  for (; i < s->nnudge && n < max; i++) /* those still pending */
    if (gf__pending_find(s, s->nudge[i].uid, "", ""))
      out[n++] = s->nudge[i];
  memmove(s->nudge, s->nudge + i, (s->nnudge - i) * sizeof(*out));
  s->nnudge -= i;
  pthread_mutex_unlock(&s->mu);
  return n;
}

/* ---- defragmentation's rate limits (defrag.h) ---------------------------*/

void gf__defrag_rate_init(gf__defrag_rate *r, uint32_t per_hour,
                          int64_t gap_ms) {
  memset(r, 0, sizeof(*r));
  r->per_hour = per_hour ? per_hour : 6;
  if (r->per_hour > GF__DEFRAG_RATE_MAX)
    r->per_hour = GF__DEFRAG_RATE_MAX;
  r->gap_ms = gap_ms ? gap_ms : 600000;
  for (int i = 0; i < 16; i++)
    r->node_at[i] = INT64_MIN / 2;
}

bool gf__defrag_rate_allowed(const gf__defrag_rate *r, const char *node,
                             int64_t now) {
  uint32_t n = r->nhour < r->per_hour ? r->nhour : r->per_hour;
  uint32_t recent = 0;
  for (uint32_t i = 0; i < n; i++)
    recent += now - r->hour[i] < 3600000;
  if (recent >= r->per_hour)
    return false;
  for (int i = 0; i < 16; i++)
    if (!strcmp(r->nodes[i], node) && now - r->node_at[i] < r->gap_ms)
      return false;
  return true;
}

void gf__defrag_rate_note(gf__defrag_rate *r, const char *node, int64_t now) {
  r->hour[r->nhour++ % r->per_hour] = now;
  int at = 0;
  for (int i = 1; i < 16; i++)
    if (r->node_at[i] < r->node_at[at])
      at = i; /* the oldest slot */
  snprintf(r->nodes[at], GF_NAME_MAX, "%s", node);
  r->node_at[at] = now;
}

/* ---- defragmentation's plan (defrag.h) ---------------------------------*/

gf_node *gf__copies_get(gf__copies *c, const gf_cluster *cl, uint32_t ni) {
  for (uint32_t i = 0; i < c->n; i++)
    if (c->idx[i] == ni)
      return &c->node[i];
  if (c->n == GF__DEFRAG_MOVES_MAX + 1)
    return NULL;
  c->idx[c->n] = ni;
  c->node[c->n] = *gf_cluster_node(cl, ni);
  return &c->node[c->n++];
}

void gf__copies_unbook(gf_node *n, const prec *p) {
  unbook_copy(n, p);
  reindex_copy(n);
}

int gf__copies_tightest(const gf_node *m, const gf_request *r,
                        const bool *skip) {
  if (!gf_node_fits(m, r))
    return -1;
  int pick = -1;
  double pl = 0;
  for (uint32_t g = 0; g < m->ngpus; g++) {
    if ((skip && skip[g]) || !gf_gpu_fits(&m->gpus[g], r))
      continue;
    double l = left_on(&m->gpus[g], r);
    if (pick < 0 || l < pl) {
      pick = (int)g;
      pl = l;
    }
  }
  return pick;
}

bool gf__copies_book(gf__copies *c, const gf_cluster *cl, uint32_t ni,
                     const gf_request *r, bool *taken) {
  gf_node *w = gf__copies_get(c, cl, ni);
  uint8_t gpus[GF_MAX_GPUS_PER_NODE];
  bool skip[GF_MAX_GPUS_PER_NODE] = {false};
  if (!w || r->gpu_count == 0 || r->gpu_count > w->ngpus)
    return false;
  /* one GPU at a time, as a share; then booked as the request */
  gf_request one = *r;
  one.gpu_count = 1;
  for (uint32_t t = 0; t < r->gpu_count; t++) {
    int g = gf__copies_tightest(w, &one, skip);
    if (g < 0)
      return false;
    skip[g] = true;
    gpus[t] = (uint8_t)g;
  }
  book_copy(w, r, gpus);
  for (uint32_t t = 0; taken && t < r->gpu_count; t++)
    taken[gpus[t]] = true;
  return true;
}

bool gf__copies_rehome(gf__copies *c, const gf_cluster *cl, uint32_t nnodes,
                       const gf_request *r, uint32_t from, const bool *taken,
                       bool (*dest_ok)(void *u, uint32_t ni), void *u) {
  for (uint32_t ni = 0; ni < nnodes; ni++) {
    if (dest_ok && !dest_ok(u, ni))
      continue;
    const gf_node *m = NULL;
    for (uint32_t i = 0; i < c->n && !m; i++)
      if (c->idx[i] == ni)
        m = &c->node[i];
    if (!m)
      m = gf_cluster_node(cl, ni);
    int pick = gf__copies_tightest(m, r, ni == from ? taken : NULL);
    gf_node *w = pick >= 0 ? gf__copies_get(c, cl, ni) : NULL;
    if (!w)
      continue;
    uint8_t gpu = (uint8_t)pick;
    book_copy(w, r, &gpu);
    return true;
  }
  return false;
}

static bool node_open(const gf_sched *s, uint32_t ni) {
  const nrec *nr = &s->nodes[ni];
  return nr->has_inv && !nr->cordoned && !nr->disrupted;
}

/* The lowest priority of the system PriorityClasses (system-cluster-
 * critical is 2000000000, system-node-critical 2000001000); a user's
 * PriorityClass may not go above 1000000000, so a pod at or above this
 * has one of them. */
#define GF__SYSTEM_PRIORITY 2000000000

/* Bound, a share of one GPU, not loading, not pinned to its node (a
 * nodeSelector or required nodeAffinity: the model has no node labels to
 * tell where else its replacement may run; a PersistentVolumeClaim or a
 * hostPath volume: its data may live on this node alone), of no higher
 * priority than the pending pod's (prio), not a system pod (namespace
 * kube-system or a system PriorityClass), owned by a controller that makes
 * a replacement. */
static bool movable(gf_sched *s, const prec *q, int32_t prio) {
  if (q->state != P_BOUND || q->req.gpu_count != 1 ||
      q->req.gpu_milli >= GF_GPU_MILLI || q->loading || q->pinned || !s->pdb ||
      q->priority > prio || q->priority >= GF__SYSTEM_PRIORITY)
    return false;
  char ns[GF_NAME_MAX], name[GF_NAME_MAX], owner[GF_NAME_MAX];
  if (!gf__pdb_pod_info(s->pdb, q->uid, ns, name, owner) ||
      !strcmp(ns, "kube-system"))
    return false;
  return !strcmp(owner, "ReplicaSet") || !strcmp(owner, "Deployment") ||
         !strcmp(owner, "StatefulSet");
}

typedef struct dest {
  gf_sched *s;
  const prec *q;
} dest;

/* A node that may take q's replacement: open, its taints tolerated by q
 * (as kube-scheduler would ask of the replacement). */
static bool dest_ok(void *u, uint32_t ni) {
  const dest *x = u;
  return node_open(x->s, ni) &&
         gf__tolerates(x->q->tols, x->s->nodes[ni].taints);
}

/* Books q (moved) on the tightest GPU of some node that takes it, the
 * freed GPUs of node `from` excluded (`taken`); false when none does. */
static bool rehome(gf_sched *s, gf__copies *c, const prec *q, uint32_t from,
                   const bool *taken) {
  gf_request r = q->req;
  gf__effective(s, &r);
  bool named;
  r.model_mask = gf__models_mask(s->c, q->models, &named);
  dest x = {s, q};
  return gf__copies_rehome(c, s->c, s->nnodes, &r, from, taken, dest_ok, &x);
}

/* The plan's moves (mv[0..nm)) for r on GPUs gpus[] of node ni into out. */
static void plan_out(gf_sched *s, uint32_t ni, const gf_request *r,
                     const uint8_t *gpus, const prec *const *mv, uint32_t nm,
                     gf__defrag_plan *out) {
  const gf_node *n = gf_cluster_node(s->c, ni);
  snprintf(out->node, sizeof(out->node), "%s", s->nodes[ni].name);
  out->ngpus = r->gpu_count;
  for (uint32_t t = 0; t < r->gpu_count; t++)
    out->gpus[t] = n->gpus[gpus[t]].index;
  out->n = nm;
  for (uint32_t j = 0; j < nm; j++) {
    char owner[GF_NAME_MAX];
    snprintf(out->moves[j].uid, sizeof(out->moves[j].uid), "%s", mv[j]->uid);
    gf__pdb_pod_info(s->pdb, mv[j]->uid, out->moves[j].ns, out->moves[j].name,
                     owner);
  }
}

/* Tries node ni for r (pending entry e): fills *out and returns the moves
 * (0: no plan here). */
static uint32_t try_node(gf_sched *s, uint32_t ni, const gf_request *r,
                         int32_t prio, const int64_t *head, const int64_t *nxt,
                         uint32_t max_moves, gf__defrag_plan *out) {
  const gf_node *n = gf_cluster_node(s->c, ni);
  uint32_t cnt[GF_MAX_GPUS_PER_NODE] = {0};
  bool ok[GF_MAX_GPUS_PER_NODE], taken[GF_MAX_GPUS_PER_NODE] = {false};
  for (uint32_t g = 0; g < n->ngpus; g++)
    ok[g] = !r->model_mask || (r->model_mask & (1ull << n->gpus[g].model));
  for (int64_t k = head[ni]; k >= 0; k = nxt[k]) {
    const prec *q = &s->pods[k];
    bool mv = movable(s, q, prio);
    for (uint32_t j = 0; j < q->pl.ngpus; j++) {
      cnt[q->pl.gpus[j]]++;
      ok[q->pl.gpus[j]] = ok[q->pl.gpus[j]] && mv;
    }
  }
  uint32_t moves = 0;
  uint8_t gpus[GF_MAX_GPUS_PER_NODE];
  for (uint32_t t = 0; t < r->gpu_count; t++) {
    int pk = -1;
    for (uint32_t g = 0; g < n->ngpus; g++)
      if (ok[g] && !taken[g] && (pk < 0 || cnt[g] < cnt[pk]))
        pk = (int)g;
    if (pk < 0)
      return 0;
    taken[pk] = true;
    gpus[t] = (uint8_t)pk;
    moves += cnt[pk];
  }
  if (moves == 0 || moves > max_moves)
    return 0;
  gf__copies *c = gf__calloc(1, sizeof(*c));
  if (!c)
    return 0;
  const prec *mv[GF__DEFRAG_MOVES_MAX];
  const char *uids[GF__DEFRAG_MOVES_MAX];
  uint32_t nm = 0;
  gf_node *w = gf__copies_get(c, s->c, ni);
  for (int64_t k = head[ni]; k >= 0; k = nxt[k]) {
    const prec *q = &s->pods[k];
    bool in = false;
    for (uint32_t t = 0; t < r->gpu_count && !in; t++)
      in = on_gpu(q, gpus[t]);
    if (in && nm < GF__DEFRAG_MOVES_MAX) {
      unbook_copy(w, q);
      uids[nm] = q->uid;
      mv[nm++] = q;
    }
  }
  reindex_copy(w);
  bool fits = nm == moves && gf_node_fits(w, r);
  for (uint32_t t = 0; t < r->gpu_count && fits; t++)
    fits = gf_gpu_fits(&w->gpus[gpus[t]], r);
  if (fits)
    book_copy(w, r, gpus);
  if (fits && gf__pdb_violations(s->pdb, GF__PDB_EVICTION, uids, nm) > 0)
    fits = false;
  for (uint32_t j = 0; j < nm && fits; j++)
    fits = rehome(s, c, mv[j], ni, taken);
  gf__free(c);
  if (!fits)
    return 0;
  plan_out(s, ni, r, gpus, mv, nm, out);
  return moves;
}

static int larger_first(const void *a, const void *b) {
  const prec *x = *(const prec *const *)a, *y = *(const prec *const *)b;
  int64_t mx = x->req.gpu_mem_bytes + x->req.gpu_milli;
  int64_t my = y->req.gpu_mem_bytes + y->req.gpu_milli;
  return mx > my ? -1 : mx < my ? 1 : 0;
}

/* A share on GPU g of node ni: its movable pods, largest first, until r
 * fits there; then as try_node (budgets, every one rehomed elsewhere).
 * Returns the moves (0: no plan on g). */
static uint32_t try_gpu_share(gf_sched *s, uint32_t ni, uint32_t g,
                              const gf_request *r, int32_t prio,
                              const int64_t *head, const int64_t *nxt,
                              uint32_t max_moves, gf__defrag_plan *out) {
  const prec *cand[64];
  uint32_t nc = 0, nm = 0;
  for (int64_t k = head[ni]; k >= 0 && nc < 64; k = nxt[k])
    if (on_gpu(&s->pods[k], g) && movable(s, &s->pods[k], prio))
      cand[nc++] = &s->pods[k];
  qsort(cand, nc, sizeof(cand[0]), larger_first);
  gf__copies *c = gf__calloc(1, sizeof(*c));
  gf_node *w = c ? gf__copies_get(c, s->c, ni) : NULL;
  bool fits = false;
  const char *uids[GF__DEFRAG_MOVES_MAX];
  while (w && nm < nc && nm < max_moves && !fits) {
    unbook_copy(w, cand[nm]);
    reindex_copy(w);
    uids[nm] = cand[nm]->uid;
    nm++;
    fits = gf_node_fits(w, r) && gf_gpu_fits(&w->gpus[g], r);
  }
  bool taken[GF_MAX_GPUS_PER_NODE] = {false};
  taken[g] = true;
  uint8_t gpu = (uint8_t)g;
  if (fits) {
    book_copy(w, r, &gpu);
    fits = gf__pdb_violations(s->pdb, GF__PDB_EVICTION, uids, nm) == 0;
  }
  for (uint32_t j = 0; j < nm && fits; j++)
    fits = rehome(s, c, cand[j], ni, taken);
  gf__free(c);
  if (!fits)
    return 0;
  plan_out(s, ni, r, &gpu, cand, nm, out);
  return nm;
}

/* A share on node ni: the GPU needing fewest moves (0: none). */
static uint32_t try_node_share(gf_sched *s, uint32_t ni, const gf_request *r,
                               int32_t prio, const int64_t *head,
                               const int64_t *nxt, uint32_t max_moves,
                               gf__defrag_plan *out) {
  const gf_node *n = gf_cluster_node(s->c, ni);
  gf_request rn = *r; /* a compute-only share's memory on this node */
  gf__part_of_memory(n, &rn);
  gf__defrag_plan cur;
  uint32_t best = 0;
  for (uint32_t g = 0; g < n->ngpus; g++) {
    const gf_gpu *x = &n->gpus[g];
    if (x->whole_only ||
        (rn.model_mask && !(rn.model_mask & (1ull << x->model))))
      continue;
    uint32_t m = try_gpu_share(s, ni, g, &rn, prio, head, nxt,
                               best ? best - 1 : max_moves, &cur);
    if (m && (!best || m < best)) {
      best = m;
      *out = cur;
    }
  }
  return best;
}

/* The placed pods of each node as chains (under the mutex): head[node]
 * the first pod's index (-1: none), nxt[pod] the next, in pod order.
 * Both owned by the caller (also on failure).  GF_ENOMEM or 0. */
static int pod_chains(const gf_sched *s, int64_t **head, int64_t **nxt) {
  int64_t *h = *head = gf__malloc(((size_t)s->nnodes + 1) * sizeof(*h));
  int64_t *x = *nxt = gf__malloc(((size_t)s->npods + 1) * sizeof(*x));
  if (!h || !x)
    return GF_ENOMEM;
  for (uint32_t i = 0; i < s->nnodes; i++)
    h[i] = -1;
  for (uint32_t k = s->npods; k-- > 0;)
    if (s->pods[k].placed && s->pods[k].pl.node < s->nnodes) {
      x[k] = h[s->pods[k].pl.node];
      h[s->pods[k].pl.node] = (int64_t)k;
    }
  return 0;
}

/* Whether r fits one of the nodes kube-scheduler offered (o) now. */
static bool fits_somewhere(gf_sched *s, const gf_request *r,
                           const struct gf__doffer *o) {
  for (uint32_t ni = 0; ni < s->nnodes; ni++) {
    gf_request rn = *r;
    gf__part_of_memory(gf_cluster_node(s->c, ni), &rn);
    if (node_open(s, ni) && offered(o, s->nodes[ni].name) &&
        gf_node_fits(gf_cluster_node(s->c, ni), &rn))
      return true;
  }
  return false;
}

/* The plan for pending entry e (asking r), the node with fewest moves. */
static bool plan_for(gf_sched *s, const pend *e, const gf_request *r,
                     const struct gf__doffer *o, const int64_t *head,
                     const int64_t *nxt, uint32_t max_moves,
                     gf__defrag_plan *out) {
  gf__defrag_plan cur;
  uint32_t best = 0;
  int32_t prio = e->priority;
  for (uint32_t ni = 0; ni < s->nnodes && best != 1; ni++) {
    /* only where kube-scheduler would put the pod (its nodeSelector,
     * affinity, tolerations): a GPU freed elsewhere it can never use */
    if (!node_open(s, ni) || !offered(o, s->nodes[ni].name))
      continue;
    uint32_t m =
        r->gpu_milli < GF_GPU_MILLI
            ? try_node_share(s, ni, r, prio, head, nxt, max_moves, &cur)
            : try_node(s, ni, r, prio, head, nxt, max_moves, &cur);
    if (m && (!best || m < best)) {
      best = m;
      *out = cur;
    }
  }
  if (!best)
    return false;
  snprintf(out->ns, sizeof(out->ns), "%.*s", (int)e->ns_len, e->nskey);
  snprintf(out->name, sizeof(out->name), "%s", e->nskey + e->ns_len + 1);
  snprintf(out->uid, sizeof(out->uid), "%s", e->uid);
  return true;
}

int gf__defrag_plan_one(gf_sched *s, uint32_t max_moves, gf__defrag_plan *out) {
  if (max_moves > GF__DEFRAG_MOVES_MAX)
    max_moves = GF__DEFRAG_MOVES_MAX;
  pthread_mutex_lock(&s->mu);
  int rc = s->pdb && s->pend.n ? gf__ensure_model(s) : 0;
  int64_t *head = NULL, *nxt = NULL;
  if (rc || !s->pdb || !s->pend.n)
    goto done;
  if ((rc = pod_chains(s, &head, &nxt)))
    goto done;
  for (const pend *e = s->pend.oldest; e && !rc; e = e->newer) {
    const struct gf__doffer *o = offer_find(s, e->uid);
    if (e->nominated[0] || e->req.gpu_count == 0 || !o)
      continue; /* no /filter for it yet: where it may run is unknown */
    gf_request r = e->req;
    gf__effective(s, &r);
    bool named;
    r.model_mask = gf__models_mask(s->c, e->models, &named);
    /* whole GPUs, or a share of one GPU (a large one: the smaller ones
     * fit) */
    if ((r.gpu_milli < GF_GPU_MILLI && r.gpu_count != 1) ||
        (named && !r.model_mask) || fits_somewhere(s, &r, o))
      continue;
    if (plan_for(s, e, &r, o, head, nxt, max_moves, out))
      rc = 1;
  }
done:
  pthread_mutex_unlock(&s->mu);
  gf__free(head);
  gf__free(nxt);
  return rc;
}

/* ---- the extender's own preemption (GPU memory) -------------------------
 * kube-scheduler calls the preempt verb only for nodes where its own dry
 * run needs victims (slots, CPU, memory).  A pod the extender's /filter
 * refused for GPU memory or compute on every node kube-scheduler's
 * filters passed gets none there: kube-scheduler finds no candidate and
 * nothing is preempted (issue 32, F1).  For such a pod, not nominated
 * (kube-scheduler's own preemption did not act) settle_ms after its first
 * refusal, the verb's choice on each of those nodes, the best of them,
 * breaking no PodDisruptionBudget.  The model is never changed. */

static bool held(const gf_sched *s, const char *uid) {
  for (uint32_t i = 0; i < s->ndhold; i++)
    if (!strcmp(s->dhold[i].uid, uid))
      return true;
  return false;
}

typedef struct pscratch {
  victim vs[GF__PREEMPT_MAX_VICTIMS];
  vset cur, best;
  gf_node base;
  gf__defrag_move named[GF__DEFRAG_MOVES_MAX]; /* cur's victims, by name */
} pscratch;

/* Names cur's victims into w->named; false when the pod store lacks one
 * (the model has it, the informer's store not yet): no name to evict by. */
static bool name_victims(gf_sched *s, pscratch *w) {
  char owner[GF_NAME_MAX];
  for (uint32_t j = 0; j < w->cur.n; j++) {
    gf__defrag_move *m = &w->named[j];
    const prec *q = w->vs[w->cur.at[j]].p;
    snprintf(m->uid, sizeof(m->uid), "%s", q->uid);
    if (!gf__pdb_pod_info(s->pdb, q->uid, m->ns, m->name, owner))
      return false;
  }
  return true;
}

/* The best victims for pending e (asking r) over the nodes of o: into
 * out, true when some node has a set. */
static bool preempt_for(gf_sched *s, const pend *e, const gf_request *r,
                        const struct gf__doffer *o, const int64_t *head,
                        const int64_t *nxt, pscratch *w, gf__defrag_plan *out) {
  bool found = false;
  for (uint32_t ni = 0; ni < s->nnodes; ni++) {
    if (!node_open(s, ni) || !offered(o, s->nodes[ni].name))
      continue;
    w->base = *gf_cluster_node(s->c, ni);
    gf_request rn = *r;
    gf__part_of_memory(&w->base, &rn);
    gf__pdb_view pv;
    pickctx k = {&w->base, w->vs, 0, &rn, &pv};
    k.nv = node_victims(s, head[ni], nxt, e->priority, GF__PDB_EVICTION, w->vs,
                        &pv);
    if (!k.nv || gf_node_fits(&w->base, &rn) || choose(&k, &w->cur) ||
        !w->cur.ok || w->cur.pdb > 0 || w->cur.n > GF__DEFRAG_MOVES_MAX)
      continue;
    if ((found && gf__preempt_pick_cmp(&w->cur, &w->best) >= 0) ||
        !name_victims(s, w))
      continue;
    w->best = w->cur;
    found = true;
    snprintf(out->node, sizeof(out->node), "%s", s->nodes[ni].name);
    out->ngpus = 0;
    out->n = w->cur.n;
    memcpy(out->moves, w->named, w->cur.n * sizeof(out->moves[0]));
  }
  return found;
}

int gf__preempt_plan_one(gf_sched *s, int64_t settle_ms, gf__defrag_plan *out) {
  pthread_mutex_lock(&s->mu);
  int rc = s->pdb && s->pend.n && s->doffer ? gf__ensure_model(s) : 0;
  int64_t *head = NULL, *nxt = NULL;
  pscratch *w = NULL;
  if (rc || !s->pdb || !s->pend.n || !s->doffer)
    goto done;
  w = gf__malloc(sizeof(*w));
  if (!w || (rc = pod_chains(s, &head, &nxt))) {
    rc = rc ? rc : GF_ENOMEM;
    goto done;
  }
  int64_t now = mono_ms();
  for (const pend *e = s->pend.oldest; e && !rc; e = e->newer) {
    const struct gf__doffer *o = offer_find(s, e->uid);
    if (!o || e->nominated[0] || e->never_preempts || e->req.gpu_count == 0 ||
        now - o->first_ms < settle_ms || held(s, e->uid))
      continue;
    gf_request r = e->req;
    gf__effective(s, &r);
    bool named;
    r.model_mask = gf__models_mask(s->c, e->models, &named);
    if ((named && !r.model_mask) || fits_somewhere(s, &r, o) ||
        !preempt_for(s, e, &r, o, head, nxt, w, out))
      continue;
    snprintf(out->ns, sizeof(out->ns), "%.*s", (int)e->ns_len, e->nskey);
    snprintf(out->name, sizeof(out->name), "%s", e->nskey + e->ns_len + 1);
    snprintf(out->uid, sizeof(out->uid), "%s", e->uid);
    rc = 1;
  }
done:
  pthread_mutex_unlock(&s->mu);
  gf__free(head);
  gf__free(nxt);
  gf__free(w);
  return rc;
}

uint32_t gf__preempt_ready(gf_sched *s, gf__podref *out, uint32_t max) {
  pthread_mutex_lock(&s->mu);
  uint32_t n = 0;
  for (uint32_t i = 0; i < s->ndhold && n < max; i++) {
    struct gf__dhold *d = &s->dhold[i];
    if (!d->preempt || d->told)
      continue;
    bool gone = true;
    for (uint32_t k = 0; k < d->nmoved && gone; k++)
      gone = gf__find_pod(s, d->moved[k]) == NULL;
    const pend *e = gone ? gf__pending_find(s, d->uid, "", "") : NULL;
    if (!e)
      continue;
    d->told = true;
    snprintf(out[n].uid, sizeof(out[n].uid), "%s", e->uid);
    snprintf(out[n].ns, sizeof(out[n].ns), "%.*s", (int)e->ns_len, e->nskey);
    snprintf(out[n].name, sizeof(out[n].name), "%s", e->nskey + e->ns_len + 1);
    n++;
  }
  pthread_mutex_unlock(&s->mu);
  return n;
}
