/*
 * The churn-and-autoscaler replay (gpufrac/churn.h has the model).
 *
 * State: the cluster (live nodes plus parked slots), the engine, a binary
 * heap of events, the pods in flight (a slab with a free list), a FIFO of
 * pending pods, and the nodes being provisioned ("vnodes", each with its
 * own small tally of what has been packed into it).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpufrac/churn.h"
#include "gpufrac/error.h"
#include "gpufrac/rng.h"

#define NONE UINT32_MAX
#define DRAIN_MAX 512 /* a node with more pods is not drained */

enum ev_kind {
  EV_ARRIVE,
  EV_DEPART, /* a = pod, b = its generation */
  EV_READY,  /* a = vnode id */
  EV_EMPTY,  /* a = slot, b = its empty generation */
  EV_CONSOLIDATE,
  EV_SAMPLE,
};

typedef struct ev {
  double t;
  uint64_t seq;
  uint32_t kind, a;
  uint64_t b;
} ev;

enum pod_state { P_FREE, P_PENDING, P_RUNNING };

typedef struct cpod {
  uint32_t src;    /* index into the pod list */
  uint8_t state;   /* enum pod_state */
  bool waited;     /* its first placement is recorded */
  double arrive;   /* arrival time */
  double left;     /* useful run time still needed */
  double start;    /* start of the current run */
  double reload;   /* reload paid at the start of the current run */
  uint64_t gen;    /* bumped when a scheduled departure goes stale */
  gf_placement pl; /* where it runs */
  uint32_t cover;  /* vnode id it is packed into, or NONE */
  uint8_t cover_gpus[GF_MAX_GPUS_PER_NODE];
  uint8_t cover_n;
  uint32_t qprev, qnext; /* pending FIFO */
  uint32_t nprev, nnext; /* pods on its node */
  bool high;             /* high priority (cfg->high) */
  double owe;            /* reload owed at its next start (evicted) */
} cpod;

typedef struct slot {
  uint32_t type;
  bool live;
  uint32_t npods, head;
  double since; /* billed since */
  uint64_t empty_gen;
} slot;

typedef struct vnode {
  uint32_t id, type;
  double ordered;
  int64_t cpu_free, mem_free;
  int32_t gpu_free[GF_MAX_GPUS_PER_NODE]; /* milli free per GPU */
  uint16_t gpu_pods[GF_MAX_GPUS_PER_NODE];
} vnode;

typedef struct churn {
  gf_cluster *c;
  gf_engine *e;
  const gf_node_types *types;
  const gf_pod_list *pods;
  const gf_lifetimes *life;
  const gf_churn_config *cfg;
  gf_churn_result *r;
  gf_diag *d;
  gf_rng rng;
  double now, rate, cap;
  int model[GF_NODE_TYPES_MAX]; /* model id per type, -1: no GPUs */
  /* events */
  ev *heap;
  size_t nheap, capheap;
  uint64_t seq;
  /* pods */
  cpod *p;
  uint32_t np, capp, freep;
  uint32_t qhead, qtail, uncovered;
  /* nodes */
  slot *s;
  uint32_t ns, caps, nlive;
  double asked; /* GPUs the running pods ask for */
  vnode *v;
  uint32_t nv, capv, next_vid;
  /* waits */
  double *wait;
  size_t nwait, capwait;
  double *waitc[2]; /* per class (cfg->high > 0): low, high */
  size_t nwaitc[2], capwaitc[2];
  size_t next_script;
  size_t arrivals_cap; /* of r->arrivals (cfg.keep_arrivals) */
  uint64_t ndrawn;     /* Poisson arrivals drawn: the priority hash's index */
} churn;

/* ---- helpers ------------------------------------------------------------ */

static int grow(void **p, uint32_t *cap, uint32_t need, size_t size) {
  if (need <= *cap)
    return 0;
  uint32_t n = *cap ? *cap : 64;
  while (n < need)
    n *= 2;
  void *q = realloc(*p, (size_t)n * size);
  if (!q)
    return GF_ENOMEM;
  *p = q;
  *cap = n;
  return 0;
}

static double demand(const gf_request *r) {
  return (double)r->gpu_count * r->gpu_milli / GF_GPU_MILLI;
}

static double type_price(const gf_node_type *t) {
  return t->gpus * t->gpu_hour_price;
}

/* ---- the event heap ----------------------------------------------------- */

static bool before(const ev *a, const ev *b) {
  return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int push(churn *k, double t, uint32_t kind, uint32_t a, uint64_t b) {
  if (k->nheap == k->capheap) {
    size_t cap = k->capheap ? k->capheap * 2 : 1024;
    ev *h = realloc(k->heap, cap * sizeof(*h));
    if (!h)
      return GF_ENOMEM;
    k->heap = h;
    k->capheap = cap;
  }
  ev x = {t, k->seq++, kind, a, b};
  size_t i = k->nheap++;
  while (i > 0) {
    size_t up = (i - 1) / 2;
    if (!before(&x, &k->heap[up]))
      break;
    k->heap[i] = k->heap[up];
    i = up;
  }
  k->heap[i] = x;
  return 0;
}

static ev pop(churn *k) {
  ev top = k->heap[0], x = k->heap[--k->nheap];
  size_t i = 0, n = k->nheap;
  for (;;) {
    size_t l = 2 * i + 1, m = i;
    const ev *best = &x;
    if (l < n && before(&k->heap[l], best))
      best = &k->heap[m = l];
    if (l + 1 < n && before(&k->heap[l + 1], best))
      m = l + 1;
    if (m == i)
      break;
    k->heap[i] = k->heap[m];
    i = m;
  }
  if (n)
    k->heap[i] = x;
  return top;
}

/* ---- pods, the pending FIFO, the per-node lists ---------------------------
 */

static const gf_request *req_of(const churn *k, uint32_t i) {
  return &k->pods->pods[k->p[i].src].req;
}

static int pod_new(churn *k, uint32_t *out) {
  if (k->freep != NONE) {
    *out = k->freep;
    k->freep = k->p[*out].qnext;
    return 0;
  }
  if (grow((void **)&k->p, &k->capp, k->np + 1, sizeof(*k->p)))
    return GF_ENOMEM;
  *out = k->np++;
  return 0;
}

static void pod_free(churn *k, uint32_t i) {
  k->p[i].state = P_FREE;
  k->p[i].qnext = k->freep;
  k->freep = i;
}

static void q_append(churn *k, uint32_t i) {
  cpod *p = &k->p[i];
  p->state = P_PENDING;
  p->qprev = k->qtail;
  p->qnext = NONE;
  if (k->qtail != NONE)
    k->p[k->qtail].qnext = i;
  else
    k->qhead = i;
  k->qtail = i;
  if (p->cover == NONE)
    k->uncovered++;
}

static void q_remove(churn *k, uint32_t i) {
  cpod *p = &k->p[i];
  if (p->qprev != NONE)
    k->p[p->qprev].qnext = p->qnext;
  else
    k->qhead = p->qnext;
  if (p->qnext != NONE)
    k->p[p->qnext].qprev = p->qprev;
  else
    k->qtail = p->qprev;
  if (p->cover == NONE)
    k->uncovered--;
}

static void on_node(churn *k, uint32_t i) {
  cpod *p = &k->p[i];
  slot *s = &k->s[p->pl.node];
  p->nprev = NONE;
  p->nnext = s->head;
  if (s->head != NONE)
    k->p[s->head].nprev = i;
  s->head = i;
  s->npods++;
}

static void off_node(churn *k, uint32_t i) {
  cpod *p = &k->p[i];
  slot *s = &k->s[p->pl.node];
  if (p->nprev != NONE)
    k->p[p->nprev].nnext = p->nnext;
  else
    s->head = p->nnext;
  if (p->nnext != NONE)
    k->p[p->nnext].nprev = p->nprev;
  s->npods--;
}

static int push_wait(double **v, size_t *n, size_t *cap, double w) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 4096;
    double *x = realloc(*v, nc * sizeof(*x));
    if (!x)
      return GF_ENOMEM;
    *v = x;
    *cap = nc;
  }
  (*v)[(*n)++] = w;
  return 0;
}

/* Pod i waited w before its first placement. */
static int record_wait(churn *k, uint32_t i, double w) {
  int c = k->p[i].high;
  if (k->cfg->high > 0 &&
      push_wait(&k->waitc[c], &k->nwaitc[c], &k->capwaitc[c], w))
    return GF_ENOMEM;
  if (k->nwait == k->capwait) {
    size_t cap = k->capwait ? k->capwait * 2 : 4096;
    double *x = realloc(k->wait, cap * sizeof(*x));
    if (!x)
      return GF_ENOMEM;
    k->wait = x;
    k->capwait = cap;
  }
  k->wait[k->nwait++] = w;
  return 0;
}

/* Closes pod i's current run at time t: what it asked for and what it held
 * (the policy's effective request) over the run. */
static void close_run(churn *k, uint32_t i, double t) {
  cpod *p = &k->p[i];
  const gf_request *r = req_of(k, i);
  gf_request eff;
  gf_engine_effective(k->e, r, &eff);
  double ran = t - p->start, useful = ran - p->reload;
  if (useful < 0)
    useful = 0;
  k->r->gpu_hours_asked += demand(r) * useful / 3600;
  k->asked -= demand(r);
  k->r->gpu_hours_held += demand(&eff) * ran / 3600;
  p->left -= useful;
  if (p->left < 0)
    p->left = 0;
}

/* ---- vnodes: nodes being provisioned ----------------------------------- */

static vnode *vnode_by_id(churn *k, uint32_t id) {
  for (uint32_t i = 0; i < k->nv; i++)
    if (k->v[i].id == id)
      return &k->v[i];
  return NULL;
}

/* Whether r fits vnode v; the GPUs it would take in gpus[]. */
static bool vnode_fits(const churn *k, const vnode *v, const gf_request *r,
                       uint8_t *gpus, uint8_t *ngpus) {
  const gf_node_type *t = &k->types->t[v->type];
  *ngpus = 0;
  if (r->cpu_milli > v->cpu_free || r->mem_bytes > v->mem_free)
    return false;
  if (r->gpu_count == 0)
    return true;
  if (r->gpu_count > t->gpus || r->gpu_mem_bytes > 0)
    return false;
  if (r->model_mask &&
      (k->model[v->type] < 0 || !(r->model_mask & (1ull << k->model[v->type]))))
    return false;
  /* Types are checked to have at most GF_MAX_GPUS_PER_NODE GPUs. */
  const uint32_t ng =
      t->gpus < GF_MAX_GPUS_PER_NODE ? t->gpus : GF_MAX_GPUS_PER_NODE;
  if (r->gpu_milli < GF_GPU_MILLI && r->mode == GF_MODE_SHARED) {
    int best = -1;
    for (uint32_t g = 0; g < ng; g++)
      if (v->gpu_free[g] >= r->gpu_milli &&
          (best < 0 || v->gpu_free[g] < v->gpu_free[best]))
        best = (int)g;
    if (best < 0)
      return false;
    gpus[(*ngpus)++] = (uint8_t)best;
    return true;
  }
  for (uint32_t g = 0; g < ng && *ngpus < r->gpu_count; g++)
    if (v->gpu_pods[g] == 0)
      gpus[(*ngpus)++] = (uint8_t)g;
  return *ngpus == r->gpu_count;
}

static void vnode_take(vnode *v, const gf_request *r, const uint8_t *gpus,
                       uint8_t n, int sign) {
  v->cpu_free -= sign * r->cpu_milli;
  v->mem_free -= sign * r->mem_bytes;
  int32_t milli = r->gpu_count > 1 || r->mode == GF_MODE_EXCLUSIVE
                      ? GF_GPU_MILLI
                      : r->gpu_milli;
  for (uint8_t j = 0; j < n; j++) {
    v->gpu_free[gpus[j]] -= sign * milli;
    v->gpu_pods[gpus[j]] = (uint16_t)(v->gpu_pods[gpus[j]] + sign);
  }
}

/* Pod i no longer needs the vnode it was packed into. */
static void uncover(churn *k, uint32_t i, bool release) {
  cpod *p = &k->p[i];
  if (p->cover == NONE)
    return;
  vnode *v = release ? vnode_by_id(k, p->cover) : NULL;
  if (v) {
    gf_request eff;
    gf_engine_effective(k->e, req_of(k, i), &eff);
    vnode_take(v, &eff, p->cover_gpus, p->cover_n, -1);
  }
  p->cover = NONE;
  if (p->state == P_PENDING)
    k->uncovered++;
}

/* The cheapest type that could take r when empty, or -1. */
static int cheapest_type(const churn *k, const gf_request *r) {
  int best = -1;
  for (size_t i = 0; i < k->types->n; i++) {
    const gf_node_type *t = &k->types->t[i];
    vnode v;
    memset(&v, 0, sizeof(v));
    v.type = (uint32_t)i;
    v.cpu_free = t->cpu_milli;
    v.mem_free = t->mem_bytes;
    for (uint32_t g = 0; g < t->gpus; g++)
      v.gpu_free[g] = GF_GPU_MILLI;
    uint8_t gpus[GF_MAX_GPUS_PER_NODE], n;
    if (!vnode_fits(k, &v, r, gpus, &n))
      continue;
    if (best < 0)
      best = (int)i;
    else {
      const gf_node_type *b = &k->types->t[best];
      if (type_price(t) < type_price(b) ||
          (type_price(t) == type_price(b) && t->gpus < b->gpus))
        best = (int)i;
    }
  }
  return best;
}

/* Packs the uncovered pending pods into vnodes, ordering new ones. */
static int scale_up(churn *k) {
  for (uint32_t i = k->qhead; i != NONE && k->uncovered; i = k->p[i].qnext) {
    cpod *p = &k->p[i];
    if (p->cover != NONE)
      continue;
    gf_request eff;
    gf_engine_effective(k->e, req_of(k, i), &eff);
    vnode *v = NULL;
    for (uint32_t j = 0; j < k->nv && !v; j++)
      if (vnode_fits(k, &k->v[j], &eff, p->cover_gpus, &p->cover_n))
        v = &k->v[j];
    if (!v) {
      int t = cheapest_type(k, &eff);
      if (t < 0)
        continue; /* not reached: such pods are dropped on arrival */
      if (grow((void **)&k->v, &k->capv, k->nv + 1, sizeof(*k->v)))
        return GF_ENOMEM;
      v = &k->v[k->nv++];
      memset(v, 0, sizeof(*v));
      const gf_node_type *nt = &k->types->t[t];
      v->id = k->next_vid++;
      v->type = (uint32_t)t;
      v->ordered = k->now;
      v->cpu_free = nt->cpu_milli;
      v->mem_free = nt->mem_bytes;
      for (uint32_t g = 0; g < nt->gpus; g++)
        v->gpu_free[g] = GF_GPU_MILLI;
      int rc = push(k, k->now + k->cfg->provision_s, EV_READY, v->id, 0);
      if (rc)
        return rc;
      if (!vnode_fits(k, v, &eff, p->cover_gpus, &p->cover_n))
        continue; /* not reached: the type was chosen to fit */
    }
    vnode_take(v, &eff, p->cover_gpus, p->cover_n, +1);
    p->cover = v->id;
    k->uncovered--;
  }
  return 0;
}

/* ---- nodes -------------------------------------------------------------- */

static void blocker(const churn *k, uint32_t i, gf_request *r,
                    gf_placement *pl) {
  const gf_node *n = gf_cluster_node(k->c, i);
  memset(r, 0, sizeof(*r));
  memset(pl, 0, sizeof(*pl));
  r->cpu_milli = n->cpu_milli;
  r->mem_bytes = n->mem_bytes;
  r->gpu_count = n->ngpus;
  r->gpu_milli = n->ngpus ? GF_GPU_MILLI : 0;
  pl->node = i;
  pl->ngpus = n->ngpus;
  for (uint32_t g = 0; g < n->ngpus; g++)
    pl->gpus[g] = (uint8_t)g;
}

static int park(churn *k, uint32_t i) {
  gf_request r;
  gf_placement pl;
  blocker(k, i, &r, &pl);
  return gf_cluster_place(k->c, &r, &pl);
}

static int unpark(churn *k, uint32_t i) {
  gf_request r;
  gf_placement pl;
  blocker(k, i, &r, &pl);
  return gf_cluster_release(k->c, &r, &pl);
}

static int add_slot(churn *k, uint32_t type) {
  const gf_node_type *t = &k->types->t[type];
  gf_gpu_spec g[GF_MAX_GPUS_PER_NODE];
  memset(g, 0, sizeof(g));
  for (uint32_t j = 0; j < t->gpus; j++) {
    g[j].model = t->model;
    g[j].numa_node = -1;
  }
  char name[GF_NODE_TYPE_NAME_MAX + 16];
  snprintf(name, sizeof(name), "%s-%u", t->name, k->ns);
  if (grow((void **)&k->s, &k->caps, k->ns + 1, sizeof(*k->s)))
    return GF_ENOMEM;
  int idx = gf_cluster_add_node(k->c, name, t->cpu_milli, t->mem_bytes, g,
                                t->gpus, k->d);
  if (idx < 0)
    return idx;
  slot *s = &k->s[k->ns++];
  memset(s, 0, sizeof(*s));
  s->type = type;
  s->head = NONE;
  int rc = park(k, (uint32_t)idx);
  return rc ? rc : idx;
}

static void bill(churn *k, uint32_t i, double until) {
  const gf_node_type *t = &k->types->t[k->s[i].type];
  double h = t->gpus * (until - k->s[i].since) / 3600;
  k->r->gpu_hours_bought += h;
  k->r->cost += h * t->gpu_hour_price;
}

static int watch_empty(churn *k, uint32_t i) {
  slot *s = &k->s[i];
  s->empty_gen++;
  return push(k, k->now + k->cfg->empty_s, EV_EMPTY, i, s->empty_gen);
}

static void note_peak(churn *k) {
  size_t n = k->nlive + k->nv;
  if (n > k->r->peak_nodes)
    k->r->peak_nodes = n;
}

/* Makes a parked slot of `type` (or a new one) live, billed since `since`. */
static int bring_up(churn *k, uint32_t type, double since, uint32_t *out) {
  uint32_t i = NONE;
  for (uint32_t j = 0; j < k->ns && i == NONE; j++)
    if (!k->s[j].live && k->s[j].type == type)
      i = j;
  if (i == NONE) {
    int rc = add_slot(k, type);
    if (rc < 0)
      return rc;
    i = (uint32_t)rc;
  }
  int rc = unpark(k, i);
  if (rc)
    return gf_diag_set(k->d, rc, "churn: unparking node %u: %s", i,
                       gf_strerror(rc));
  k->s[i].live = true;
  k->s[i].since = since;
  k->nlive++;
  k->r->nodes_added++;
  *out = i;
  return 0;
}

static int take_down(churn *k, uint32_t i) {
  bill(k, i, k->now);
  k->s[i].live = false;
  k->nlive--;
  k->r->nodes_removed++;
  return park(k, i);
}

/* ---- placing ------------------------------------------------------------ */

static int schedule_departure(churn *k, uint32_t i) {
  cpod *p = &k->p[i];
  return push(k, p->start + p->reload + p->left, EV_DEPART, i, p->gen);
}

/* Pod i has been placed at p->pl (already applied to the cluster). */
static int started(churn *k, uint32_t i, double reload) {
  cpod *p = &k->p[i];
  p->state = P_RUNNING;
  p->start = k->now;
  k->asked += demand(req_of(k, i));
  p->reload = reload + p->owe;
  p->owe = 0;
  p->gen++;
  on_node(k, i);
  if (!p->waited) {
    p->waited = true;
    k->r->placed++;
    double w = k->now - p->arrive;
    if (w > 0)
      k->r->waited++;
    int rc = record_wait(k, i, w);
    if (rc)
      return rc;
  }
  return schedule_departure(k, i);
}

/* Tries the pending pods, in FIFO order, on node `node` (which gained
 * room); nothing else changed since they last failed.  With priorities,
 * the high pods first (pass 1), then the low (pass 0). */
static int retry_on(churn *k, uint32_t node) {
  const gf_node *n = gf_cluster_node(k->c, node);
  int pass = k->cfg->high > 0 ? 1 : -1;
  for (uint32_t i = k->qhead; i != NONE || pass > 0;) {
    if (i == NONE) {
      i = k->qhead;
      pass = 0;
      continue;
    }
    uint32_t next = k->p[i].qnext;
    if (pass >= 0 && k->p[i].high != (pass == 1)) {
      i = next;
      continue;
    }
    gf_request eff;
    gf_engine_effective(k->e, req_of(k, i), &eff);
    if (gf_node_fits(n, &eff)) {
      int rc = gf_engine_place(k->e, req_of(k, i), &k->p[i].pl);
      if (rc == 0) {
        uncover(k, i, true); /* while pending: counts it uncovered */
        q_remove(k, i);      /* and no longer */
        if ((rc = started(k, i, 0)))
          return rc;
      } else if (rc != GF_ENOFIT) {
        return gf_diag_set(k->d, rc, "churn: placing a pending pod: %s",
                           gf_strerror(rc));
      }
    }
    i = next;
  }
  return 0;
}

/* ---- priorities, preemption, defragmentation (issue 32) ----------------
 * Off unless cfg->high > 0 (gpufrac/churn.h). */

#define VICTIMS_MAX 64 /* low pods considered on one node */
#define SUBSET_MAX 8   /* victims on one GPU tried as every subset */

/* Whether arrival number `n` is marked high: a hash of the seed and n, so
 * every mode and policy marks the same arrivals. */
static bool draw_high(const churn *k, uint64_t n) {
  if (!(k->cfg->high > 0))
    return false;
  uint64_t x = (k->cfg->seed ^ 0x7072696f72697479ull) /* "priority" */ +
               n * 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return (double)(x >> 11) * 0x1.0p-53 < k->cfg->high;
}

/* Not loading (or the guard is off): may be evicted or moved. */
static bool movable(const churn *k, uint32_t i) {
  const cpod *p = &k->p[i];
  return !k->cfg->guard ||
         k->now >= p->start + p->reload + k->cfg->guard_settle_s;
}

static bool holds_gpu(const cpod *p, uint32_t g) {
  for (uint32_t j = 0; j < p->pl.ngpus; j++)
    if (p->pl.gpus[j] == g)
      return true;
  return false;
}

/* Takes pod i's booking off the copy n (as gf_cluster_release would). */
static void unbook(const churn *k, gf_node *n, uint32_t i) {
  gf_request r;
  gf_engine_effective(k->e, req_of(k, i), &r);
  n->cpu_used -= r.cpu_milli;
  n->mem_used -= r.mem_bytes;
  for (uint32_t j = 0; j < k->p[i].pl.ngpus; j++) {
    gf_gpu *g = &n->gpus[k->p[i].pl.gpus[j]];
    g->milli_used -= r.gpu_milli;
    g->mem_used -= r.gpu_milli >= GF_GPU_MILLI ? g->mem_bytes : r.gpu_mem_bytes;
    g->npods = (uint16_t)(g->npods ? g->npods - 1 : 0);
    g->exclusive = false;
  }
  n->free_gpus = 0;
  n->max_free_milli = 0;
  for (uint32_t j = 0; j < n->ngpus; j++) {
    const gf_gpu *g = &n->gpus[j];
    n->free_gpus += g->npods == 0;
    int32_t fm = g->exclusive ? 0 : GF_GPU_MILLI - g->milli_used;
    if (fm > n->max_free_milli)
      n->max_free_milli = fm;
  }
}

/* A choice of victims on one node, and its key. */
typedef struct vchoice {
  uint32_t node, n;
  uint32_t at[VICTIMS_MAX];
  gf_placement pl; /* where the preemptor goes (GPU-aware) */
  double left;     /* capacity left on its GPU(s) */
  bool ok;
} vchoice;

static bool vchoice_better(const vchoice *a, const vchoice *b) {
  if (!b->ok)
    return a->ok;
  if (!a->ok)
    return false;
  return a->n < b->n || (a->n == b->n && a->left < b->left);
}

/* Lets eviction of the victims vs[0..nv) of node x (mask bits) free GPU g
 * for r (a share)?  Fills c when it fits. */
static bool try_share(const churn *k, uint32_t x, const gf_request *r,
                      uint32_t g, const uint32_t *vs, uint32_t nv,
                      uint32_t mask, vchoice *c) {
  gf_node n = *gf_cluster_node(k->c, x);
  c->n = 0;
  for (uint32_t j = 0; j < nv; j++)
    if (mask & (1u << j)) {
      unbook(k, &n, vs[j]);
      c->at[c->n++] = vs[j];
    }
  if (!gf_gpu_fits(&n.gpus[g], r) || !gf_node_fits(&n, r))
    return false;
  c->node = x;
  c->pl = (gf_placement){.node = x, .ngpus = 1};
  c->pl.gpus[0] = (uint8_t)g;
  c->left = (double)(GF_GPU_MILLI - n.gpus[g].milli_used - r->gpu_milli);
  c->ok = true;
  return true;
}

/* The extender's choice on node x (GPU-aware) for r into *best. */
static void gpu_choice(const churn *k, uint32_t x, const gf_request *r,
                       const uint32_t *low, uint32_t nlow, vchoice *best) {
  const gf_node *n = gf_cluster_node(k->c, x);
  vchoice c;
  if (r->gpu_count == 1 && r->gpu_milli < GF_GPU_MILLI) {
    for (uint32_t g = 0; g < n->ngpus; g++) {
      uint32_t vs[SUBSET_MAX], nv = 0;
      for (uint32_t j = 0; j < nlow && nv < SUBSET_MAX; j++)
        if (holds_gpu(&k->p[low[j]], g))
          vs[nv++] = low[j];
      /* all of them first: when that does not free it, nothing does */
      if (!nv || !try_share(k, x, r, g, vs, nv, (1u << nv) - 1, &c))
        continue;
      for (uint32_t m = 1; m < (1u << nv); m++)
        if (try_share(k, x, r, g, vs, nv, m, &c) && vchoice_better(&c, best))
          *best = c;
    }
    return;
  }
  /* Whole GPUs: those all of whose pods are victims, fewest pods first. */
  uint32_t cnt[GF_MAX_GPUS_PER_NODE];
  bool use[GF_MAX_GPUS_PER_NODE];
  for (uint32_t g = 0; g < n->ngpus; g++) {
    cnt[g] = 0;
    for (uint32_t j = 0; j < nlow; j++)
      cnt[g] += holds_gpu(&k->p[low[j]], g);
    use[g] = (!r->model_mask || (r->model_mask & (1ull << n->gpus[g].model))) &&
             cnt[g] == n->gpus[g].npods;
  }
  c = (vchoice){.node = x, .pl = {.node = x}};
  for (uint32_t t = 0; t < r->gpu_count; t++) {
    int pk = -1;
    for (uint32_t g = 0; g < n->ngpus; g++)
      if (use[g] && (pk < 0 || cnt[g] < cnt[pk]))
        pk = (int)g;
    if (pk < 0)
      return;
    use[pk] = false;
    c.pl.gpus[c.pl.ngpus++] = (uint8_t)pk;
  }
  gf_node cp = *n;
  for (uint32_t j = 0; j < nlow; j++) {
    bool in = false;
    for (uint32_t t = 0; t < c.pl.ngpus && !in; t++)
      in = holds_gpu(&k->p[low[j]], c.pl.gpus[t]);
    if (in) {
      unbook(k, &cp, low[j]);
      c.at[c.n++] = low[j];
    }
  }
  for (uint32_t t = 0; t < c.pl.ngpus; t++)
    if (!gf_gpu_fits(&cp.gpus[c.pl.gpus[t]], r))
      return;
  if (cp.cpu_used + r->cpu_milli > cp.cpu_milli ||
      cp.mem_used + r->mem_bytes > cp.mem_bytes)
    return;
  c.left = 0;
  c.ok = true;
  if (vchoice_better(&c, best))
    *best = c;
}

/* kube-scheduler's choice on node x: the node's GPUs as one pool (its view
 * counts, it does not see GPUs), every low pod removed, then reprieved
 * oldest first while the pool still takes r. */
static void kube_choice(const churn *k, uint32_t x, const gf_request *r,
                        uint32_t *low, uint32_t nlow, vchoice *best) {
  const gf_node *n = gf_cluster_node(k->c, x);
  int64_t cpu = n->cpu_milli - n->cpu_used, mem = n->mem_bytes - n->mem_used;
  int64_t pool = 0, need = (int64_t)r->gpu_count * r->gpu_milli;
  for (uint32_t g = 0; g < n->ngpus; g++)
    pool += GF_GPU_MILLI - n->gpus[g].milli_used;
  gf_request v[VICTIMS_MAX];
  for (uint32_t j = 0; j < nlow; j++) {
    gf_engine_effective(k->e, req_of(k, low[j]), &v[j]);
    cpu += v[j].cpu_milli;
    mem += v[j].mem_bytes;
    pool += (int64_t)v[j].gpu_count * v[j].gpu_milli;
  }
  if (cpu < r->cpu_milli || mem < r->mem_bytes || pool < need ||
      r->gpu_count > n->ngpus)
    return;
  vchoice c = {.node = x};
  /* oldest (earliest start) first: the most important of equal priority */
  for (uint32_t j = 1; j < nlow; j++)
    for (uint32_t t = j; t > 0 && k->p[low[t]].start < k->p[low[t - 1]].start;
         t--) {
      uint32_t s = low[t];
      low[t] = low[t - 1];
      low[t - 1] = s;
      gf_request q = v[t];
      v[t] = v[t - 1];
      v[t - 1] = q;
    }
  for (uint32_t j = 0; j < nlow; j++) {
    int64_t g = (int64_t)v[j].gpu_count * v[j].gpu_milli;
    if (cpu - v[j].cpu_milli >= r->cpu_milli &&
        mem - v[j].mem_bytes >= r->mem_bytes && pool - g >= need) {
      cpu -= v[j].cpu_milli; /* reprieved */
      mem -= v[j].mem_bytes;
      pool -= g;
    } else {
      c.at[c.n++] = low[j];
    }
  }
  if (c.n == 0)
    return; /* it fits the pool already: not a preemption */
  c.ok = true;
  c.left = (double)(pool - need);
  if (vchoice_better(&c, best))
    *best = c;
}

/* Running pods list[0..n) are evicted and start again at to[0..n) (already
 * applied to the cluster), each owing a reload: a defragmentation's moves
 * and a drained node's pods. */
static int restart_at(churn *k, const uint32_t *list, const gf_placement *to,
                      uint32_t n) {
  for (uint32_t j = 0; j < n; j++) {
    uint32_t i = list[j];
    close_run(k, i, k->now);
    off_node(k, i);
    k->p[i].pl = to[j];
    k->r->evictions++;
    k->r->reload_minutes += k->cfg->reload_s / 60;
    int rc = started(k, i, k->cfg->reload_s);
    if (rc)
      return rc;
  }
  return 0;
}

/* Evicts running pod i: it is pending again and owes a reload. */
static int evict(churn *k, uint32_t i) {
  cpod *p = &k->p[i];
  close_run(k, i, k->now);
  int rc = gf_engine_release(k->e, req_of(k, i), &p->pl);
  if (rc)
    return gf_diag_set(k->d, rc, "churn: evicting a pod: %s", gf_strerror(rc));
  uint32_t node = p->pl.node;
  off_node(k, i);
  p->owe = k->cfg->reload_s;
  k->r->evictions++;
  k->r->reload_minutes += k->cfg->reload_s / 60;
  q_append(k, i);
  return k->s[node].npods == 0 ? watch_empty(k, node) : 0;
}

/* Pod i (high, arrived, fits nowhere): preempts under cfg->preempt.  *done
 * when it was placed, or queued after its victims were evicted. */
static int try_preempt(churn *k, uint32_t i, bool *done) {
  gf_request r;
  gf_engine_effective(k->e, req_of(k, i), &r);
  vchoice best = {.ok = false}, *b = &best;
  for (uint32_t x = 0; x < k->ns; x++) {
    if (!k->s[x].live)
      continue;
    uint32_t low[VICTIMS_MAX], nlow = 0;
    for (uint32_t j = k->s[x].head; j != NONE && nlow < VICTIMS_MAX;
         j = k->p[j].nnext)
      if (!k->p[j].high && movable(k, j))
        low[nlow++] = j;
    if (k->cfg->preempt == GF_CHURN_PREEMPT_GPU)
      gpu_choice(k, x, &r, low, nlow, b);
    else
      kube_choice(k, x, &r, low, nlow, b);
  }
  if (!b->ok)
    return 0;
  int rc;
  k->r->preemptions++;
  k->r->preempt_victims += b->n;
  for (uint32_t j = 0; j < b->n; j++)
    if ((rc = evict(k, b->at[j])))
      return rc;
  *done = true;
  if (k->cfg->preempt == GF_CHURN_PREEMPT_GPU)
    rc = gf_engine_apply(k->e, req_of(k, i), &b->pl);
  else
    rc = gf_engine_place(k->e, req_of(k, i), &b->pl);
  if (rc == 0) {
    k->p[i].pl = b->pl;
    if ((rc = started(k, i, 0)))
      return rc;
  } else if (rc == GF_ENOFIT) {
    k->r->preempt_wasted++;
    q_append(k, i);
  } else {
    return gf_diag_set(k->d, rc, "churn: placing a preemptor: %s",
                       gf_strerror(rc));
  }
  if ((rc = retry_on(k, b->node)))
    return rc;
  return k->uncovered ? scale_up(k) : 0;
}

/* ---- defragmentation ---------------------------------------------------*/

#define DEFRAG_CANDIDATES 64
#define DEFRAG_TRIES 8

typedef struct dcand {
  gf_placement pl; /* the GPUs freed for the pending pod */
  uint32_t moves;
} dcand;

/* The GPUs of node x a whole-GPU request r could take by moving share
 * pods (fewest first), into *c; false when x has none within the limit. */
static bool defrag_candidate(const churn *k, uint32_t x, const gf_request *r,
                             dcand *c) {
  const gf_node *n = gf_cluster_node(k->c, x);
  uint32_t cnt[GF_MAX_GPUS_PER_NODE];
  bool use[GF_MAX_GPUS_PER_NODE];
  if (r->gpu_count > n->ngpus)
    return false;
  for (uint32_t g = 0; g < n->ngpus; g++) {
    use[g] = !r->model_mask || (r->model_mask & (1ull << n->gpus[g].model));
    cnt[g] = 0;
  }
  int64_t cpu = n->cpu_used, mem = n->mem_used;
  for (uint32_t j = k->s[x].head; j != NONE; j = k->p[j].nnext) {
    gf_request q;
    gf_engine_effective(k->e, req_of(k, j), &q);
    bool share = q.gpu_count == 1 && q.gpu_milli < GF_GPU_MILLI &&
                 q.mode == GF_MODE_SHARED && movable(k, j);
    for (uint32_t t = 0; t < k->p[j].pl.ngpus; t++) {
      uint32_t g = k->p[j].pl.gpus[t];
      cnt[g]++;
      if (!share)
        use[g] = false;
    }
  }
  *c = (dcand){.pl = {.node = x}};
  for (uint32_t t = 0; t < r->gpu_count; t++) {
    int pk = -1;
    for (uint32_t g = 0; g < n->ngpus; g++)
      if (use[g] && (pk < 0 || cnt[g] < cnt[pk]))
        pk = (int)g;
    if (pk < 0)
      return false;
    use[pk] = false;
    c->pl.gpus[c->pl.ngpus++] = (uint8_t)pk;
    c->moves += cnt[pk];
  }
  for (uint32_t j = k->s[x].head; j != NONE; j = k->p[j].nnext) {
    bool in = false;
    for (uint32_t t = 0; t < c->pl.ngpus && !in; t++)
      in = holds_gpu(&k->p[j], c->pl.gpus[t]);
    if (in) {
      gf_request q;
      gf_engine_effective(k->e, req_of(k, j), &q);
      cpu -= q.cpu_milli;
      mem -= q.mem_bytes;
    }
  }
  return c->moves > 0 && c->moves <= k->cfg->defrag_max &&
         cpu + r->cpu_milli <= n->cpu_milli &&
         mem + r->mem_bytes <= n->mem_bytes;
}

/* Moves the pods on c's GPUs elsewhere and places pod i there; undone
 * exactly when one of them fits nowhere.  *moved: whether it was done. */
static int defrag_try(churn *k, uint32_t i, const dcand *c, bool *moved) {
  uint32_t list[DRAIN_MAX], n = 0;
  for (uint32_t j = k->s[c->pl.node].head; j != NONE && n < DRAIN_MAX;
       j = k->p[j].nnext) {
    bool in = false;
    for (uint32_t t = 0; t < c->pl.ngpus && !in; t++)
      in = holds_gpu(&k->p[j], c->pl.gpus[t]);
    if (in)
      list[n++] = j;
  }
  *moved = false;
  if (n != c->moves)
    return 0;
  int rc;
  for (uint32_t j = 0; j < n; j++)
    if ((rc = gf_engine_release(k->e, req_of(k, list[j]), &k->p[list[j]].pl)))
      return gf_diag_set(k->d, rc, "churn: defrag: %s", gf_strerror(rc));
  gf_placement to[DRAIN_MAX];
  uint32_t ok = 0;
  rc = gf_engine_apply(k->e, req_of(k, i), &c->pl);
  bool in = rc == 0;
  for (; rc == 0 && ok < n; ok++)
    if ((rc = gf_engine_place(k->e, req_of(k, list[ok]), &to[ok])))
      break;
  if (rc && rc != GF_ENOFIT)
    return gf_diag_set(k->d, rc, "churn: defrag: %s", gf_strerror(rc));
  if (rc == GF_ENOFIT) { /* undo, in reverse */
    for (uint32_t j = ok; j-- > 0;)
      if ((rc = gf_engine_release(k->e, req_of(k, list[j]), &to[j])))
        return gf_diag_set(k->d, rc, "churn: defrag undo: %s", gf_strerror(rc));
    if (in && (rc = gf_engine_release(k->e, req_of(k, i), &c->pl)))
      return gf_diag_set(k->d, rc, "churn: defrag undo: %s", gf_strerror(rc));
    for (uint32_t j = 0; j < n; j++)
      if ((rc = gf_engine_apply(k->e, req_of(k, list[j]), &k->p[list[j]].pl)))
        return gf_diag_set(k->d, rc, "churn: defrag undo: %s", gf_strerror(rc));
    return 0;
  }
  /* Moved: each pod is evicted and restarts elsewhere, reloading. */
  if ((rc = restart_at(k, list, to, n)))
    return rc;
  k->r->defrag_moves += n;
  k->p[i].pl = c->pl;
  k->r->defrags++;
  *moved = true;
  return started(k, i, 0);
}

/* Pod i (arrived, fits nowhere, asks whole GPUs): the candidates with the
 * fewest moves first, at most DEFRAG_TRIES tried. */
static int try_defrag(churn *k, uint32_t i, bool *done) {
  gf_request r;
  gf_engine_effective(k->e, req_of(k, i), &r);
  if (r.gpu_count == 0 || r.gpu_milli < GF_GPU_MILLI)
    return 0;
  dcand cs[DEFRAG_CANDIDATES], c;
  uint32_t nc = 0;
  for (uint32_t x = 0; x < k->ns; x++) {
    if (!k->s[x].live || !defrag_candidate(k, x, &r, &c))
      continue;
    if (nc == DEFRAG_CANDIDATES && c.moves >= cs[nc - 1].moves)
      continue;
    uint32_t at = nc < DEFRAG_CANDIDATES ? nc++ : nc - 1;
    for (; at > 0 && cs[at - 1].moves > c.moves; at--)
      cs[at] = cs[at - 1];
    cs[at] = c;
  }
  for (uint32_t t = 0; t < nc && t < DEFRAG_TRIES && !*done; t++) {
    int rc = defrag_try(k, i, &cs[t], done);
    if (rc)
      return rc;
  }
  return 0;
}

/* ---- events ------------------------------------------------------------- */

static int draw_arrival(churn *k, double *t, size_t *pod, double *life,
                        bool *high) {
  const gf_churn_config *cfg = k->cfg;
  if (cfg->script) {
    if (k->next_script >= cfg->nscript)
      return 1;
    *high =
        cfg->high > 0 && cfg->script_high && cfg->script_high[k->next_script];
    const gf_churn_arrival *a = &cfg->script[k->next_script++];
    *t = a->t;
    *pod = a->pod;
    *life = a->lifetime_s;
    return 0;
  }
  *high = draw_high(k, k->ndrawn++);
  double u = gf_rng_double(&k->rng);
  *t = k->now - log1p(-u) / k->rate;
  *pod = (size_t)gf_rng_below(&k->rng, k->pods->n);
  *life = k->life->s[gf_rng_below(&k->rng, k->life->n)];
  if (*life > k->cap)
    *life = k->cap;
  return 0;
}

static int next_arrival(churn *k) {
  double t, life;
  size_t pod;
  bool high;
  if (draw_arrival(k, &t, &pod, &life, &high))
    return 0;
  uint32_t i;
  if (pod_new(k, &i))
    return GF_ENOMEM;
  cpod *p = &k->p[i];
  memset(p, 0, sizeof(*p));
  p->src = (uint32_t)pod;
  p->state = P_FREE; /* not yet arrived */
  p->arrive = t;
  p->left = life;
  p->cover = NONE;
  p->high = high;
  return push(k, t, EV_ARRIVE, i, 0);
}

/* cfg.keep_arrivals: pod i's arrival appended to the result's list. */
static int keep_arrival(churn *k, uint32_t i) {
  gf_churn_result *r = k->r;
  if (!k->cfg->keep_arrivals)
    return 0;
  if (r->narrivals == k->arrivals_cap) {
    size_t cap = k->arrivals_cap ? k->arrivals_cap * 2 : 64;
    gf_churn_arrival *a = realloc(r->arrivals, cap * sizeof(*a));
    if (!a)
      return GF_ENOMEM;
    r->arrivals = a;
    k->arrivals_cap = cap;
  }
  r->arrivals[r->narrivals++] = (gf_churn_arrival){
      .t = k->p[i].arrive, .pod = k->p[i].src, .lifetime_s = k->p[i].left};
  return 0;
}

static int on_arrive(churn *k, uint32_t i) {
  k->r->arrived_high += k->p[i].high;
  k->r->arrived++;
  if (keep_arrival(k, i))
    return GF_ENOMEM;
  const gf_request *r = req_of(k, i);
  gf_request eff;
  gf_engine_effective(k->e, r, &eff);
  int rc = next_arrival(k);
  if (rc)
    return rc;
  /* Every node, live or parked, is of one of the types: a pod no type could
   * take empty fits nowhere, now or later. */
  if (cheapest_type(k, &eff) < 0) {
    k->r->unschedulable++;
    pod_free(k, i);
    return 0;
  }
  rc = gf_engine_place(k->e, r, &k->p[i].pl);
  if (rc == 0)
    return started(k, i, 0);
  if (rc != GF_ENOFIT)
    return gf_diag_set(k->d, rc, "churn: placing a pod: %s", gf_strerror(rc));
  bool done = false;
  if (k->p[i].high && k->cfg->preempt && (rc = try_preempt(k, i, &done)))
    return rc;
  if (!done && k->cfg->defrag && (rc = try_defrag(k, i, &done)))
    return rc;
  if (done)
    return 0;
  q_append(k, i);
  return scale_up(k);
}

static int on_depart(churn *k, uint32_t i, uint64_t gen) {
  cpod *p = &k->p[i];
  if (p->state != P_RUNNING || p->gen != gen)
    return 0; /* stale: the pod was evicted and runs elsewhere */
  close_run(k, i, k->now);
  uint32_t node = p->pl.node;
  int rc = gf_engine_release(k->e, req_of(k, i), &p->pl);
  if (rc)
    return gf_diag_set(k->d, rc, "churn: releasing a pod: %s", gf_strerror(rc));
  off_node(k, i);
  pod_free(k, i);
  if (k->s[node].npods == 0 && (rc = watch_empty(k, node)))
    return rc;
  if ((rc = retry_on(k, node)))
    return rc;
  return k->uncovered ? scale_up(k) : 0;
}

static int on_ready(churn *k, uint32_t id) {
  vnode *v = vnode_by_id(k, id);
  if (!v)
    return 0;
  uint32_t type = v->type, node;
  double ordered = v->ordered;
  *v = k->v[--k->nv]; /* drop it; pods packed into it are retried below */
  for (uint32_t i = k->qhead; i != NONE; i = k->p[i].qnext)
    if (k->p[i].cover == id)
      uncover(k, i, false);
  int rc = bring_up(k, type, ordered, &node);
  if (rc)
    return rc;
  note_peak(k);
  if ((rc = retry_on(k, node)))
    return rc;
  if (k->s[node].npods == 0 && (rc = watch_empty(k, node)))
    return rc;
  return k->uncovered ? scale_up(k) : 0;
}

static int on_empty(churn *k, uint32_t i, uint64_t gen) {
  slot *s = &k->s[i];
  if (!s->live || s->npods || s->empty_gen != gen)
    return 0;
  return take_down(k, i);
}

/* Tries to drain node x: its pods placed elsewhere by the engine.  On any
 * failure everything is put back as it was.  *drained tells which. */
static int try_drain(churn *k, uint32_t x, bool *drained) {
  *drained = false;
  uint32_t list[DRAIN_MAX];
  uint32_t n = 0;
  for (uint32_t i = k->s[x].head; i != NONE; i = k->p[i].nnext) {
    if (n == sizeof(list) / sizeof(list[0]))
      return 0; /* too many pods to try: leave it */
    list[n++] = i;
  }
  /* The disruption guard (src/sched/guard.c) marks a pod do-not-disrupt
   * from its start until it has been Ready for the settle time; a
   * consolidating autoscaler leaves such a node alone.  Ready here is the
   * end of the pod's (re)load. */
  if (k->cfg->guard)
    for (uint32_t j = 0; j < n; j++) {
      const cpod *p = &k->p[list[j]];
      if (k->now < p->start + p->reload + k->cfg->guard_settle_s) {
        k->r->guarded++;
        return 0;
      }
    }
  int rc;
  for (uint32_t j = 0; j < n; j++)
    if ((rc = gf_engine_release(k->e, req_of(k, list[j]), &k->p[list[j]].pl)))
      return gf_diag_set(k->d, rc, "churn: drain: %s", gf_strerror(rc));
  if ((rc = park(k, x)))
    return gf_diag_set(k->d, rc, "churn: drain: %s", gf_strerror(rc));
  gf_placement moved[DRAIN_MAX];
  uint32_t ok = 0;
  for (; ok < n; ok++) {
    rc = gf_engine_place(k->e, req_of(k, list[ok]), &moved[ok]);
    if (rc == GF_ENOFIT)
      break;
    if (rc)
      return gf_diag_set(k->d, rc, "churn: drain: %s", gf_strerror(rc));
  }
  if (ok < n) { /* undo, in reverse */
    for (uint32_t j = ok; j-- > 0;)
      if ((rc = gf_engine_release(k->e, req_of(k, list[j]), &moved[j])))
        return gf_diag_set(k->d, rc, "churn: undo: %s", gf_strerror(rc));
    if ((rc = unpark(k, x)))
      return gf_diag_set(k->d, rc, "churn: undo: %s", gf_strerror(rc));
    for (uint32_t j = 0; j < n; j++)
      if ((rc = gf_engine_apply(k->e, req_of(k, list[j]), &k->p[list[j]].pl)))
        return gf_diag_set(k->d, rc, "churn: undo: %s", gf_strerror(rc));
    return 0;
  }
  /* Drained: every pod is evicted and restarts elsewhere, reloading. */
  if ((rc = restart_at(k, list, moved, n)))
    return rc;
  /* x is parked already: bill it and mark it gone. */
  bill(k, x, k->now);
  k->s[x].live = false;
  k->nlive--;
  k->r->nodes_removed++;
  k->r->drains++;
  *drained = true;
  return 0;
}

static int on_consolidate(churn *k) {
  for (uint32_t x = 0; x < k->ns; x++) {
    const slot *s = &k->s[x];
    if (!s->live || s->npods == 0)
      continue;
    const gf_node *n = gf_cluster_node(k->c, x);
    int64_t used = 0;
    for (uint32_t g = 0; g < n->ngpus; g++)
      used += n->gpus[g].milli_used;
    if (n->ngpus &&
        (double)used >= k->cfg->consolidate_util * n->ngpus * GF_GPU_MILLI)
      continue;
    bool drained;
    int rc = try_drain(k, x, &drained);
    if (rc)
      return rc;
  }
  return push(k, k->now + k->cfg->consolidate_s, EV_CONSOLIDATE, 0, 0);
}

/* ---- the run ------------------------------------------------------------ */

static int check_config(const churn *k) {
  const gf_churn_config *c = k->cfg;
  if (!(c->duration_s > 0 && c->duration_s <= 3650.0 * 86400) ||
      !(c->provision_s >= 0) || !(c->empty_s >= 0) || !(c->reload_s >= 0) ||
      !(c->sample_s > 0) || !(c->consolidate_s > 0) ||
      !(c->guard_settle_s >= 0) ||
      !(c->consolidate_util >= 0 && c->consolidate_util <= 1))
    return gf_diag_set(k->d, GF_EINVAL,
                       "churn: durations must be >= 0 (duration, sample "
                       "interval and consolidation interval > 0)");
  if (!(c->high >= 0 && c->high <= 1) || c->preempt < GF_CHURN_PREEMPT_NONE ||
      c->preempt > GF_CHURN_PREEMPT_GPU)
    return gf_diag_set(k->d, GF_EINVAL,
                       "churn: high %g not in [0, 1], or an unknown "
                       "preemption mode %d",
                       c->high, c->preempt);
  if (c->preempt && !(c->high > 0))
    return gf_diag_set(k->d, GF_EINVAL,
                       "churn: preemption needs high-priority pods (high > 0)");
  if (!c->script && !(c->load > 0 && c->load <= 2))
    return gf_diag_set(k->d, GF_EINVAL, "churn: load %g not in (0, 2]",
                       c->load);
  if (!c->script && (!k->life || !k->life->n))
    return gf_diag_set(k->d, GF_EINVAL, "churn: no lifetimes");
  if (!k->pods->n)
    return gf_diag_set(k->d, GF_EINVAL, "churn: no pods");
  for (size_t i = 0; i < k->pods->n; i++) {
    const gf_request *r = &k->pods->pods[i].req;
    if (r->cpu_milli <= 0 && r->mem_bytes <= 0 && r->gpu_count == 0)
      return gf_diag_set(k->d, GF_EINVAL, "churn: pod %s asks for nothing",
                         k->pods->pods[i].name);
  }
  double prev = 0;
  for (size_t i = 0; c->script && i < c->nscript; i++) {
    const gf_churn_arrival *a = &c->script[i];
    if (!(a->t >= prev) || a->pod >= k->pods->n || !(a->lifetime_s > 0))
      return gf_diag_set(k->d, GF_EINVAL,
                         "churn: scripted arrival %zu: out of order, an "
                         "unknown pod or a lifetime <= 0",
                         i);
    prev = a->t;
  }
  return 0;
}

static int setup(churn *k, const gf_cluster *proto) {
  const gf_churn_config *cfg = k->cfg;
  if (gf_cluster_nnodes(proto))
    return gf_diag_set(k->d, GF_EINVAL, "churn: the model cluster has nodes");
  int rc = check_config(k);
  if (rc)
    return rc;
  if (!(k->c = gf_cluster_clone(proto)))
    return gf_diag_set(k->d, GF_ENOMEM, "out of memory");
  double ref = 0;
  for (size_t t = 0; t < k->types->n; t++) {
    const gf_node_type *nt = &k->types->t[t];
    k->model[t] = nt->gpus ? gf_cluster_model_id(k->c, nt->model, true) : -1;
    if (nt->gpus && k->model[t] < 0)
      return gf_diag_set(k->d, k->model[t],
                         "churn: node type %s: model '%s' "
                         "not accepted",
                         nt->name, nt->model);
    ref += (double)nt->gpus * nt->count;
  }
  k->r->reference_gpus = ref;
  /* The reference cluster, parked. */
  for (size_t t = 0; t < k->types->n; t++)
    for (uint32_t j = 0; j < k->types->t[t].count; j++)
      if ((rc = add_slot(k, (uint32_t)t)) < 0)
        return rc;
  gf_engine_config ec = {.policy = cfg->policy,
                         .seed = cfg->seed,
                         .typical = cfg->typical,
                         .shapes = cfg->shapes,
                         .ties = cfg->ties};
  if ((rc = gf_engine_new(k->c, &ec, &k->e, k->d)))
    return rc;
  gf_rng_seed(&k->rng, cfg->seed ^ 0x636875726e2d6172ull); /* "churn-ar" */
  k->cap = cfg->duration_s;
  if (!cfg->script) {
    if (ref <= 0)
      return gf_diag_set(k->d, GF_EINVAL,
                         "churn: the node types' reference cluster has no "
                         "GPUs (every count is 0)");
    double dm = 0, lm = 0;
    for (size_t i = 0; i < k->pods->n; i++)
      dm += demand(&k->pods->pods[i].req);
    dm /= (double)k->pods->n;
    for (size_t i = 0; i < k->life->n; i++)
      lm += k->life->s[i] < k->cap ? k->life->s[i] : k->cap;
    lm /= (double)k->life->n;
    if (dm <= 0)
      return gf_diag_set(k->d, GF_EINVAL, "churn: the pods ask for no GPU");
    k->rate = cfg->load * ref / (dm * lm); /* per second */
    k->r->rate_per_h = k->rate * 3600;
    k->r->mean_lifetime_s = lm;
  }
  k->r->nsamples = (uint32_t)floor(cfg->duration_s / cfg->sample_s) + 1;
  if (!(k->r->nodes = calloc(k->r->nsamples, sizeof(*k->r->nodes))) ||
      !(k->r->gpus = calloc(k->r->nsamples, sizeof(*k->r->gpus))) ||
      !(k->r->asked = calloc(k->r->nsamples, sizeof(*k->r->asked))))
    return gf_diag_set(k->d, GF_ENOMEM, "out of memory");
  for (uint32_t j = 0; j < cfg->initial; j++) {
    if (j >= k->ns) {
      return gf_diag_set(k->d, GF_EINVAL,
                         "churn: --initial %u: the reference cluster has %u "
                         "nodes",
                         cfg->initial, k->ns);
    }
    uint32_t node;
    if ((rc = bring_up(k, k->s[j].type, 0, &node)))
      return rc;
    k->r->nodes_added--; /* there from the start, not added */
    if ((rc = watch_empty(k, node)))
      return rc;
  }
  note_peak(k);
  if ((rc = next_arrival(k)) || (rc = push(k, 0, EV_SAMPLE, 0, 0)))
    return rc;
  if (cfg->consolidate &&
      (rc = push(k, cfg->consolidate_s, EV_CONSOLIDATE, 0, 0)))
    return rc;
  return 0;
}

static int finish(churn *k) {
  double end = k->cfg->duration_s;
  k->now = end;
  for (uint32_t i = 0; i < k->ns; i++)
    if (k->s[i].live)
      bill(k, i, end);
  for (uint32_t j = 0; j < k->nv; j++) {
    const gf_node_type *t = &k->types->t[k->v[j].type];
    double h = t->gpus * (end - k->v[j].ordered) / 3600;
    k->r->gpu_hours_bought += h;
    k->r->cost += h * t->gpu_hour_price;
  }
  for (uint32_t i = 0; i < k->np; i++) {
    cpod *p = &k->p[i];
    if (p->state == P_RUNNING)
      close_run(k, i, end);
  }
  for (uint32_t i = k->qhead; i != NONE; i = k->p[i].qnext) {
    k->r->still_pending++;
    if (k->p[i].waited)
      continue; /* evicted and pending again: its first wait is counted */
    k->r->waited++;
    if (record_wait(k, i, end - k->p[i].arrive))
      return GF_ENOMEM;
  }
  k->r->pending_low_p50_s = gf_churn_percentile(k->waitc[0], k->nwaitc[0], 50);
  k->r->pending_low_p99_s = gf_churn_percentile(k->waitc[0], k->nwaitc[0], 99);
  k->r->pending_high_p50_s = gf_churn_percentile(k->waitc[1], k->nwaitc[1], 50);
  k->r->pending_high_p99_s = gf_churn_percentile(k->waitc[1], k->nwaitc[1], 99);
  double sum = 0;
  for (size_t i = 0; i < k->nwait; i++)
    sum += k->wait[i];
  k->r->pending_mean_s = k->nwait ? sum / (double)k->nwait : 0;
  k->r->pending_p50_s = gf_churn_percentile(k->wait, k->nwait, 50);
  k->r->pending_p99_s = gf_churn_percentile(k->wait, k->nwait, 99);
  k->r->pending_max_s = gf_churn_percentile(k->wait, k->nwait, 100);
  return 0;
}

/* Sample j: nodes and GPUs bought (live and provisioning), GPUs asked. */
static void sample(churn *k, uint32_t j) {
  double g = 0;
  for (uint32_t i = 0; i < k->ns; i++)
    if (k->s[i].live)
      g += k->types->t[k->s[i].type].gpus;
  for (uint32_t i = 0; i < k->nv; i++)
    g += k->types->t[k->v[i].type].gpus;
  k->r->nodes[j] = k->nlive + k->nv;
  k->r->gpus[j] = g;
  k->r->asked[j] = k->asked > 1e-9 ? k->asked : 0;
}

static int step(churn *k, const ev *e) {
  switch (e->kind) {
  case EV_ARRIVE:
    return on_arrive(k, e->a);
  case EV_DEPART:
    return on_depart(k, e->a, e->b);
  case EV_READY:
    return on_ready(k, e->a);
  case EV_EMPTY:
    return on_empty(k, e->a, e->b);
  case EV_CONSOLIDATE:
    return on_consolidate(k);
  case EV_SAMPLE: {
    uint32_t j = (uint32_t)llround(k->now / k->cfg->sample_s);
    if (j < k->r->nsamples)
      sample(k, j);
    return push(k, k->now + k->cfg->sample_s, EV_SAMPLE, 0, 0);
  }
  default:
    return GF_ESTATE;
  }
}

void gf_churn_config_init(gf_churn_config *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->load = 0.6;
  cfg->duration_s = 7 * 86400.0;
  cfg->provision_s = 180;
  cfg->empty_s = 600;
  cfg->consolidate_s = 600;
  cfg->consolidate_util = 0.5;
  cfg->reload_s = 120;
  cfg->guard = false;
  cfg->guard_settle_s = 120;
  cfg->sample_s = 3600;
  cfg->defrag_max = 3;
}

int gf_churn_run(const gf_cluster *proto, const gf_node_types *types,
                 const gf_pod_list *pods, const gf_lifetimes *lifetimes,
                 const gf_churn_config *cfg, gf_churn_result *out, gf_diag *d) {
  gf_diag own = {""};
  if (!d)
    d = &own;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  churn k;
  memset(&k, 0, sizeof(k));
  memset(out, 0, sizeof(*out));
  k.types = types;
  k.pods = pods;
  k.life = lifetimes;
  k.cfg = cfg;
  k.r = out;
  k.d = d;
  k.freep = k.qhead = k.qtail = NONE;
  int rc = setup(&k, proto);
  while (rc == 0 && k.nheap && k.heap[0].t <= cfg->duration_s) {
    ev e = pop(&k);
    k.now = e.t;
    rc = step(&k, &e);
  }
  if (rc == 0)
    rc = finish(&k);
  if (rc == 0 && gf_cluster_check(k.c, d))
    rc = GF_ESTATE;
  if (rc == GF_ENOMEM && !d->msg[0])
    gf_diag_set(d, rc, "out of memory");
  gf_engine_free(k.e);
  gf_cluster_free(k.c);
  free(k.heap);
  free(k.p);
  free(k.s);
  free(k.v);
  free(k.wait);
  free(k.waitc[0]);
  free(k.waitc[1]);
  if (rc) {
    gf_churn_result_release(out);
    memset(out, 0, sizeof(*out));
    return rc;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  out->wall_s =
      (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  return 0;
}

void gf_churn_result_release(gf_churn_result *r) {
  free(r->nodes);
  free(r->gpus);
  free(r->asked);
  free(r->arrivals);
  r->nodes = NULL;
  r->gpus = r->asked = NULL;
  r->nsamples = 0;
  r->arrivals = NULL;
  r->narrivals = 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double gf_churn_percentile(double *v, size_t n, double pct) {
  if (n == 0)
    return 0;
  qsort(v, n, sizeof(*v), cmp_double);
  size_t rank = (size_t)ceil(pct / 100.0 * (double)n);
  if (rank < 1)
    rank = 1;
  if (rank > n)
    rank = n;
  return v[rank - 1];
}
