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
 *     (all of a size are compared before a larger one is tried, at most
 *     GF__PREEMPT_TRIES per node; past that, the cheapest victims one by
 *     one); whole GPUs: the GPUs whose pods are all victims, cheapest
 *     first;
 *   - the best set: fewest PodDisruptionBudget violations, then fewest
 *     victims, then the lowest highest priority, then the lowest sum of
 *     priorities, then the least capacity left over on the GPU the
 *     preemptor would take (a tight fit leaves no sliver).
 * A node where the preemptor already fits the model is one where
 * kube-scheduler needs victims for its own reasons (slots, CPU, memory):
 * its own proposal is answered unchanged.
 *
 * Not done yet: PodDisruptionBudgets are not watched, so every victim
 * counts as allowed (NumPDBViolations 0); the ordering is ready for them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "buf.h"
#include "gpufrac/error.h"
#include "sched_state.h"

/* A pod the guard holds (loading its weights) is a victim only of a pod
 * whose priority is at least this much higher: a PriorityClass a million
 * above (user classes go up to 1e9; system ones are 2e9 and above). */
#define GF__PREEMPT_GUARD_GAP 1000000LL
/* Subsets tried per node before the greedy fallback. */
#define GF__PREEMPT_TRIES 20000u
/* Victims considered on one node (the rest are never chosen). */
#define GF__PREEMPT_MAX_VICTIMS 256u

typedef struct victim {
  const prec *p;
  bool pdb; /* evicting it violates a PodDisruptionBudget (not known yet) */
} victim;

/* A victim set and its ordering key. */
typedef struct vset {
  uint32_t n;
  uint16_t at[GF__PREEMPT_MAX_VICTIMS]; /* indices into the victims */
  uint32_t pdb;
  int64_t max_prio, sum_prio;
  double left; /* capacity left on the preemptor's GPU(s), 0..2 per GPU */
  bool ok;
} vset;

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

static void reindex(gf_node *n) {
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
  reindex(n);
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

/* Tries the victims set v->at[0..v->n) on a copy of base: fills v's key,
 * v->ok when r then fits (for a share: on GPU `gpu` when gpu >= 0). */
static void try_set(const gf_node *base, const victim *vs, vset *v,
                    const gf_request *r, int gpu) {
  gf_node n = *base;
  v->pdb = 0;
  v->max_prio = INT64_MIN;
  v->sum_prio = 0;
  for (uint32_t k = 0; k < v->n; k++) {
    const victim *x = &vs[v->at[k]];
    unbook_copy(&n, x->p);
    v->pdb += x->pdb;
    if (x->p->priority > v->max_prio)
      v->max_prio = x->p->priority;
    v->sum_prio += x->p->priority;
  }
  reindex(&n);
  v->ok = false;
  if (gpu >= 0) {
    if (gf_gpu_fits(&n.gpus[gpu], r) && gf_node_fits(&n, r)) {
      v->ok = true;
      v->left = left_on(&n.gpus[gpu], r);
    }
    return;
  }
  if (!gf_node_fits(&n, r))
    return;
  /* whole GPUs: the tightest leftover is none; count what stays free */
  v->ok = true;
  v->left = (double)n.free_gpus - (double)r->gpu_count;
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
  if (x->pdb != y->pdb)
    return x->pdb ? 1 : -1;
  if (x->p->priority != y->p->priority)
    return x->p->priority < y->p->priority ? -1 : 1;
  /* the larger first: fewer of them free as much */
  int64_t mx = x->p->req.gpu_mem_bytes + x->p->req.gpu_milli;
  int64_t my = y->p->req.gpu_mem_bytes + y->p->req.gpu_milli;
  return mx > my ? -1 : mx < my ? 1 : 0;
}

/* The best victim set on node base for r among vs[0..nv) (sorted
 * cheapest first) into *best (best->ok false when none frees a GPU).
 * GF_ENOMEM, or 0. */
static int choose(const gf_node *base, victim *vs, uint32_t nv,
                  const gf_request *r, vset *best) {
  memset(best, 0, sizeof(*best));
  vset *cur = gf__calloc(1, sizeof(*cur));
  if (!cur)
    return GF_ENOMEM;
  uint32_t tries = 0;
  if (r->gpu_milli >= GF_GPU_MILLI) {
    /* Whole GPUs: a GPU frees only with every pod on it gone.  Per GPU
     * the pods that must go (none may be a non-victim), cheapest GPUs
     * first, as many as asked. */
    uint32_t cost[GF_MAX_GPUS_PER_NODE];
    bool usable[GF_MAX_GPUS_PER_NODE];
    for (uint32_t g = 0; g < base->ngpus; g++) {
      const gf_gpu *gp = &base->gpus[g];
      usable[g] = (!r->model_mask || (r->model_mask & (1ull << gp->model)));
      cost[g] = 0;
      for (uint32_t i = 0; i < nv && usable[g]; i++)
        cost[g] += on_gpu(vs[i].p, g);
      if (usable[g] && cost[g] != gp->npods)
        usable[g] = false; /* a pod there is not a victim */
    }
    bool take[GF_MAX_GPUS_PER_NODE] = {false};
    for (uint32_t k = 0; k < r->gpu_count; k++) {
      int pick = -1;
      for (uint32_t g = 0; g < base->ngpus; g++)
        if (usable[g] && !take[g] && (pick < 0 || cost[g] < cost[pick]))
          pick = (int)g;
      if (pick < 0) {
        gf__free(cur);
        return 0;
      }
      take[pick] = true;
    }
    cur->n = 0;
    for (uint32_t i = 0; i < nv; i++) {
      bool in = false;
      for (uint32_t g = 0; g < base->ngpus && !in; g++)
        in = take[g] && on_gpu(vs[i].p, g);
      if (in)
        cur->at[cur->n++] = (uint16_t)i;
    }
    try_set(base, vs, cur, r, -1);
    /* CPU or memory short: the cheapest other victims, one by one */
    for (uint32_t i = 0; !cur->ok && i < nv; i++) {
      bool in = false;
      for (uint32_t k = 0; k < cur->n && !in; k++)
        in = cur->at[k] == i;
      if (in)
        continue;
      cur->at[cur->n++] = (uint16_t)i;
      try_set(base, vs, cur, r, -1);
    }
    if (cur->ok && cur->n > 0)
      *best = *cur;
    gf__free(cur);
    return 0;
  }
  /* A share: on one GPU. */
  uint32_t on[GF__PREEMPT_MAX_VICTIMS];
  for (uint32_t g = 0; g < base->ngpus; g++) {
    const gf_gpu *gp = &base->gpus[g];
    if (gp->whole_only ||
        (r->model_mask && !(r->model_mask & (1ull << gp->model))))
      continue;
    uint32_t non = 0;
    for (uint32_t i = 0; i < nv; i++)
      if (on_gpu(vs[i].p, g))
        on[non++] = i;
    /* the victims on this GPU first, then (CPU or memory short) others */
    bool found = false;
    for (uint32_t k = 1; k <= non && !found; k++) {
      uint32_t c[GF__PREEMPT_MAX_VICTIMS];
      for (uint32_t j = 0; j < k; j++)
        c[j] = j;
      do {
        if (++tries > GF__PREEMPT_TRIES)
          break;
        cur->n = k;
        for (uint32_t j = 0; j < k; j++)
          cur->at[j] = (uint16_t)on[c[j]];
        try_set(base, vs, cur, r, (int)g);
        if (cur->ok) {
          found = true;
          if (vset_cmp(cur, best) < 0)
            *best = *cur;
        }
      } while (comb_next(c, k, non));
      if (tries > GF__PREEMPT_TRIES)
        break;
    }
    if (found)
      continue;
    /* Past the budget, or the GPU alone is not enough (CPU or memory):
     * the cheapest victims, this GPU's first, one by one. */
    *cur = (vset){0}; /* nothing tried on this GPU yet (it may hold none) */
    for (uint32_t j = 0; j < non; j++) {
      cur->at[cur->n++] = (uint16_t)on[j];
      try_set(base, vs, cur, r, (int)g);
      if (cur->ok)
        break;
    }
    for (uint32_t i = 0; !cur->ok && i < nv; i++) {
      if (on_gpu(vs[i].p, g))
        continue;
      cur->at[cur->n++] = (uint16_t)i;
      try_set(base, vs, cur, r, (int)g);
    }
    if (cur->ok && cur->n > 0 && vset_cmp(cur, best) < 0)
      *best = *cur;
  }
  gf__free(cur);
  return 0;
}

/* ---- the hold for nominated pods ---------------------------------------*/

uint32_t gf__holds_collect(gf_sched *s, int32_t priority, const char *uid,
                           gf__holds *h) {
  h->n = 0;
  if (s->pend.nominated == 0)
    return 0; /* the common case: no preemption waiting */
  for (const pend *e = s->pend.newest; e && h->n < GF__HOLDS_MAX; e = e->older)
    if (e->nominated[0] && e->priority >= priority &&
        !(uid && uid[0] && strcmp(e->uid, uid) == 0))
      h->e[h->n++] = e;
  return h->n;
}

bool gf__holds_apply(gf_sched *s, const gf__holds *h, uint32_t ni,
                     const char *node, gf_node *copy) {
  bool any = false;
  for (uint32_t k = 0; k < h->n; k++) {
    const pend *e = h->e[k];
    if (strcmp(e->nominated, node) != 0 || e->req.gpu_count == 0)
      continue;
    if (!any) {
      *copy = *gf_cluster_node(s->c, ni);
      any = true;
    }
    gf_request r = e->req;
    if (s->whole && r.gpu_count > 0) /* as gf__effective does */
      r.gpu_milli = GF_GPU_MILLI;
    bool named;
    r.model_mask = gf__models_mask(s->c, e->models, &named);
    if (!gf_node_fits(copy, &r))
      continue; /* its victims are still there: they hold it meanwhile */
    /* The GPUs it would take: the tightest that fit. */
    uint8_t gpus[GF_MAX_GPUS_PER_NODE];
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
        break;
      used[pick] = true;
      gpus[got] = (uint8_t)pick;
    }
    if (got == r.gpu_count)
      book_copy(copy, &r, gpus);
  }
  return any;
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

static void bad(reply_buf *out, const char *what) {
  char msg[GF_DIAG_MAX + 32];
  snprintf(msg, sizeof(msg), "gpufrac extender: preempt: %s", what);
  gf__utf8_fix(msg);
  out->status = 400;
  out->refused = true;
  out->json = gf__error_obj(msg);
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
  /* The pods of each node asked about, in one pass over the pods. */
  slot = gf__malloc(((size_t)s->nnodes + 1) * sizeof(*slot));
  if (!slot) {
    pthread_mutex_unlock(&s->mu);
    out->status = 500;
    goto done;
  }
  for (uint32_t i = 0; i < s->nnodes; i++)
    slot[i] = -1;
  const char *name;
  const json_t *val;
  int32_t nasked = 0;
  json_object_foreach((json_t *)map, name, val) {
    int64_t ni = gf__smap_get(&s->nmap, name);
    if (ni >= 0 && slot[ni] < 0)
      slot[ni] = nasked++;
  }
  head = gf__malloc(((size_t)nasked + 1) * sizeof(*head));
  nxt = gf__malloc(((size_t)s->npods + 1) * sizeof(*nxt));
  if (!head || !nxt) {
    pthread_mutex_unlock(&s->mu);
    out->status = 500;
    goto done;
  }
  for (int32_t i = 0; i < nasked; i++)
    head[i] = -1;
  for (uint32_t k = s->npods; k-- > 0;) {
    const prec *q = &s->pods[k];
    if (q->placed && slot[q->pl.node] >= 0) {
      nxt[k] = head[slot[q->pl.node]];
      head[slot[q->pl.node]] = (int64_t)k;
    }
  }
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
    uint32_t nv = 0;
    for (int64_t k = head[slot[ni]]; k >= 0 && nv < GF__PREEMPT_MAX_VICTIMS;
         k = nxt[k]) {
      const prec *q = &s->pods[k];
      if (eligible(q, p->priority))
        vs[nv++] = (victim){q, false};
    }
    qsort(vs, nv, sizeof(*vs), cheaper);
    json_t *list = json_array();
    if (!list || json_object_set_new(res, name, list)) {
      pthread_mutex_unlock(&s->mu);
      out->status = 500;
      goto done;
    }
    int64_t npdb = 0;
    if (gf_node_fits(base, &r)) {
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
        if (json_array_append_new(list, json_pack("{s:s}", "UID", uid))) {
          pthread_mutex_unlock(&s->mu);
          out->status = 500;
          goto done;
        }
      }
      if (!keep) {
        json_object_del(res, name);
        continue;
      }
    } else {
      if (choose(base, vs, nv, &r, best)) {
        pthread_mutex_unlock(&s->mu);
        out->status = 500;
        out->json = gf__error_obj("gpufrac extender: preempt: out of memory");
        goto done;
      }
      if (!best->ok) {
        json_object_del(res, name); /* no set frees a GPU here */
        continue;
      }
      for (uint32_t k = 0; k < best->n; k++)
        if (json_array_append_new(
                list, json_pack("{s:s}", "UID", vs[best->at[k]].p->uid))) {
          pthread_mutex_unlock(&s->mu);
          out->status = 500;
          goto done;
        }
      npdb = best->pdb;
    }
    json_t *mv = json_pack("{s:O,s:I}", "Pods", list, "NumPDBViolations",
                           (json_int_t)npdb);
    if (!mv || json_object_set_new(res, name, mv)) {
      pthread_mutex_unlock(&s->mu);
      out->status = 500;
      goto done;
    }
  }
  pthread_mutex_unlock(&s->mu);
  out->json = json_pack("{s:O}", "NodeNameToMetaVictims", res);
  out->status = out->json ? 200 : 500;
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
