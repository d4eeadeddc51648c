/*
 * The extender's model and its three verbs (gpufrac/sched.h).
 *
 * State, all under s->mu:
 *   nodes[]   every Node seen; nodes[i] is node i of the cluster model c.
 *   pods[]    every pod that holds (or is being given) resources: bound
 *             pods from the watch and binds in flight.  Each keeps its
 *             booked request and its GPUs by nvidia index, so the model can
 *             be rebuilt from nodes[] and pods[] alone (gf__rebuild()).
 *   pending   pods seen unbound (by /filter, /prioritize or the watch):
 *             /bind gets only names, so it finds the pod's request here.
 *             At most pending_max of them, indexed by uid and by
 *             namespace/name; when full, the one seen least recently is
 *             forgotten (see "pending pods" below).
 *   engine    a placement engine over the model and the typical-pod set
 *             its policy scores against, rebuilt from the requests the
 *             model knows when they have changed enough (gf__policy_refresh());
 *             it adopts the placements already in the model.
 *
 * Scoring and GPU choice are the engine's, one node at a time
 * (gf_engine_score), so the extender places exactly as the simulator
 * measures.
 *
 * This file: the life cycle, the three verbs and the dispatch.  The state
 * is defined in sched_state.h; the model, the pending table, the reply
 * writer and the metrics are its seams (sched_model.c, sched_pending.c,
 * sched_reply.c, sched_metrics.c).
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

void gf__effective(const gf_sched *s, gf_request *r) {
  if (s->whole && r->gpu_count > 0)
    r->gpu_milli = GF_GPU_MILLI;
}

bool gf__compute_only(const gf_request *r) {
  return r->gpu_count == 1 && r->gpu_milli > 0 && r->gpu_milli < GF_GPU_MILLI &&
         r->gpu_mem_bytes == 0;
}

void gf__part_of_memory(const gf_node *n, gf_request *r) {
  if (!gf__compute_only(r))
    return;
  int64_t least = 0;
  for (uint32_t g = 0; g < n->ngpus; g++) {
    const gf_gpu *x = &n->gpus[g];
    if (x->whole_only || x->mem_bytes <= 0 ||
        (r->model_mask && !(r->model_mask & (1ull << x->model))))
      continue;
    if (!least || x->mem_bytes < least)
      least = x->mem_bytes;
  }
  if (!least)
    return;
  /* floor(least * milli / 1000) without overflow; at least a byte, since
   * 0 would mean no limit again */
  int64_t m = least / GF_GPU_MILLI * r->gpu_milli +
              least % GF_GPU_MILLI * r->gpu_milli / GF_GPU_MILLI;
  r->gpu_mem_bytes = m > 0 ? m : 1;
}

int gf_sched_new(const gf_sched_config *cfg, gf_sched **out, gf_diag *d) {
  const char *policy = cfg && cfg->policy ? cfg->policy : GF_DEFAULT_POLICY;
  if (gf_policy_find(policy) < 0)
    return gf_diag_set(d, GF_ENOTFOUND, "unknown policy '%s'", policy);
  if (strlen(policy) >= sizeof(((gf_sched *)0)->policy))
    return gf_diag_set(d, GF_EINVAL, "policy string too long");
  if (cfg && cfg->filter_top > GF_SCHED_FILTER_TOP_MAX) {
    return gf_diag_set(d, GF_EINVAL, "filter top %u: at most %u nodes",
                       cfg->filter_top, GF_SCHED_FILTER_TOP_MAX);
  }
  gf_sched *s = gf__calloc(1, sizeof(*s));
  if (!s)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  snprintf(s->policy, sizeof(s->policy), "%s", policy);
  if (cfg && cfg->binder) {
    s->binder = *cfg->binder;
    s->has_binder = cfg->binder->bind != NULL;
  }
  s->max_body = cfg && cfg->max_body ? cfg->max_body : GF_SCHED_MAX_BODY;
  s->filter_top = cfg ? cfg->filter_top : 0;
  s->accept = cfg ? cfg->accept : 0;
  if (cfg) {
    s->dra_score = cfg->dra_score;
    s->dra_user = cfg->dra_user;
  }
  s->pend.max = cfg && cfg->pending_max ? cfg->pending_max : 4096;
  s->leader = true;
  s->c = gf_cluster_new();
  int rc = 0;
  if (!s->c) {
    rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
    goto fail;
  }
  /* Validate the policy and its parameters now, against a one-shape set,
   * and learn whether it rounds shares up to whole GPUs. */
  {
    gf_typical_pod tp = {.cpu_milli = 1000,
                         .gpu_milli = 500,
                         .gpu_count = 1,
                         .count = 1,
                         .p = 1.0};
    gf_typical_set t = {&tp, 1};
    gf_engine_config ec = {.policy = s->policy, .typical = &t, .shapes = &t};
    gf_engine *e = NULL;
    gf_diag pd = {""};
    if ((rc = gf_engine_new(s->c, &ec, &e, &pd))) {
      rc = gf_diag_set(d, rc, "%s", pd.msg);
      goto fail;
    }
    gf_request probe = {.gpu_count = 1, .gpu_milli = 500}, eff;
    gf_engine_effective(e, &probe, &eff);
    s->whole = eff.gpu_milli == GF_GPU_MILLI;
    gf_engine_free(e);
  }
  if (pthread_mutex_init(&s->mu, NULL)) {
    rc = gf_diag_set(d, GF_ENOMEM, "cannot create a mutex");
    goto fail;
  }
  *out = s;
  return 0;
fail:
  gf_cluster_free(s->c);
  gf__free(s);
  return rc;
}

void gf__policy_drop(gf_sched *s) {
  gf_engine_free(s->engine);
  s->engine = NULL;
  gf_typical_release(&s->typ);
  memset(&s->typ, 0, sizeof(s->typ));
}

void gf__prec_free(prec *p) {
  gf__free(p->uid);
  gf__free(p->node);
  gf__free(p->models);
  gf__free(p->tols);
}

void gf_sched_free(gf_sched *s) {
  if (!s)
    return;
  gf__policy_drop(s);
  for (uint32_t i = 0; i < s->nnodes; i++) {
    gf__free(s->nodes[i].name);
    gf__free(s->nodes[i].inv_error);
    gf__free(s->nodes[i].inv.models);
    gf__free(s->nodes[i].taints);
  }
  for (uint32_t i = 0; i < s->npods; i++)
    gf__prec_free(&s->pods[i]);
  gf__free(s->nodes);
  gf__free(s->pods);
  gf__pending_release(&s->pend);
  gf__defrag_release(s);
  gf__smap_release(&s->nmap);
  gf__smap_release(&s->pmap);
  gf_cluster_free(s->c);
  pthread_mutex_destroy(&s->mu);
  gf__free(s);
}

size_t gf__sched_max_body(const gf_sched *s) { return s->max_body; }

bool gf__sched_whole(const gf_sched *s) { return s->whole; }

void gf_sched_set_synced(gf_sched *s, bool synced) {
  pthread_mutex_lock(&s->mu);
  s->synced = synced;
  pthread_mutex_unlock(&s->mu);
}

void gf_sched_set_leader(gf_sched *s, bool leader) {
  pthread_mutex_lock(&s->mu);
  s->leader = leader;
  pthread_mutex_unlock(&s->mu);
}

bool gf_sched_is_leader(gf_sched *s) {
  pthread_mutex_lock(&s->mu);
  bool l = s->leader;
  pthread_mutex_unlock(&s->mu);
  return l;
}

void gf_sched_set_watched(gf_sched *s, bool watched) {
  pthread_mutex_lock(&s->mu);
  s->watched = watched;
  pthread_mutex_unlock(&s->mu);
}

/* ---- filter --------------------------------------------------------------*/

/* When node nr's device-plugin slots (allocatable gpufrac.io/gpu) cannot
 * take `slots` more: never, if it has fewer at all; not now, if they are
 * held while its GPUs (n) have room for r (the slots bind first).  GF__FIT
 * otherwise: the GPUs' own reason follows. */
static gf__fit slots_why(const nrec *nr, const gf_node *n, const gf_request *r,
                         uint32_t slots, char *why, size_t cap) {
  if ((int64_t)slots > nr->dp_slots) {
    snprintf(why, cap,
             "%s: the pod asks for %u and node %s has %" PRId64
             " (the node agent's device-plugin slots): raise slots in its "
             "node config (docs/node.md)",
             GF_RES_GPU, slots, nr->name, nr->dp_slots);
    return GF__FIT_NEVER;
  }
  if (!gf_node_fits(n, r))
    return GF__FIT;
  snprintf(why, cap,
           "%s: %" PRId64 " of the %" PRId64
           " device-plugin slots of node %s are held, while its GPUs have "
           "room for this pod: the slots bind before memory and compute; "
           "raise slots in the node agent's config, or set it to auto "
           "(docs/node.md)",
           GF_RES_GPU, nr->dp_used, nr->dp_slots, nr->name);
  return GF__FIT_NOT_NOW;
}

/* The reason a compute-only share (r with its part of the memory) does not
 * fit node nr whose largest free compute and memory are max_milli and
 * max_mem, into why[cap]. */
static void compute_only_why(const nrec *nr, const gf_request *r,
                             int32_t max_milli, int64_t max_mem, char *why,
                             size_t cap) {
  char a[32], b[32];
  if (max_milli >= r->gpu_milli && max_mem < r->gpu_mem_bytes) {
    gf__fmt_bytes(r->gpu_mem_bytes, a, sizeof(a));
    gf__fmt_bytes(max_mem, b, sizeof(b));
    snprintf(why, cap,
             "gpu-compute %d percent takes the same part of the GPU's memory "
             "(%s; docs/scheduler.md, compute-only shares): largest free "
             "memory on %s is %s",
             r->gpu_milli / 10, a, nr->name, b);
  } else {
    snprintf(why, cap,
             "gpu-compute %d percent: largest free share on %s is %d percent",
             r->gpu_milli / 10, nr->name, max_milli / 10);
  }
}

/* The GPU models of node n, ", "-separated, into have[cap] (", ..." when
 * they do not all fit). */
static void models_text(const gf_sched *s, const gf_node *n, char *have,
                        size_t cap) {
  size_t used = 0;
  for (int m = 0; m < GF_MAX_MODELS; m++)
    if (n->model_mask & (1ull << m)) {
      int w = snprintf(have + used, cap - used, "%s%s", used ? ", " : "",
                       gf_cluster_model_name(s->c, m));
      if (w < 0 || (size_t)w >= cap - used) {
        /* no room for this name: end the list cleanly */
        snprintf(have + used, cap - used, "%s", used ? ", ..." : "");
        break;
      }
      used += (size_t)w;
    }
}

/* Why node n (model record nr) cannot take r, into why[cap]: GF__FIT when
 * it can, GF__FIT_NOT_NOW when it cannot now, GF__FIT_NEVER when it never
 * can (unresolvable). */
static gf__fit why_not(const gf_sched *s, const nrec *nr, const gf_node *n,
                       const gf_request *r, uint32_t slots, char *why,
                       size_t cap) {
  char a[32], b[32];
  if (r->gpu_count == 0)
    return GF__FIT;   /* kube-scheduler's to judge: CPU and memory */
  gf_request rn = *r; /* a compute-only share's memory on this node */
  bool compute_only = gf__compute_only(r);
  gf__part_of_memory(n, &rn), r = &rn;
  /* A node on its way out takes no new GPU pods, even one whose
   * tolerations would let kube-scheduler place it there: the pod would be
   * evicted again as soon as its weights are loaded.  It may come back
   * (uncordoned, the disruption cancelled), so not unresolvable. */
  if (nr->disrupted) {
    snprintf(why, cap,
             "node is being disrupted by Karpenter (taint %s:NoSchedule)",
             GF__TAINT_DISRUPTED);
    return GF__FIT_NOT_NOW;
  }
  if (nr->cordoned) {
    snprintf(why, cap, "node is cordoned (spec.unschedulable)");
    return GF__FIT_NOT_NOW;
  }
  /* The common case first: gf_node_fits is exactly "every check below
   * passes" (and is cheap: the node's free-share index rules most nodes in
   * or out without looking at each GPU); the reasons are only worked out
   * for nodes that fail.  Slots: one per gpufrac.io/gpu (slots_why). */
  bool slots_ok = !slots || nr->dp_slots < 0 ||
                  nr->dp_used + (int64_t)slots <= nr->dp_slots;
  if (nr->has_inv && slots_ok && gf_node_fits(n, r))
    return GF__FIT;
  if (nr->inv_error) {
    snprintf(why, cap,
             "no gpufrac GPUs: the node's %s annotation was refused: %s",
             GF_INVENTORY_ANNOTATION, nr->inv_error);
    return GF__FIT_NEVER;
  }
  if (!nr->has_inv || n->ngpus == 0) {
    snprintf(why, cap,
             "no gpufrac GPUs: node has no %s annotation (is the gpufrac "
             "node agent running there?)",
             GF_INVENTORY_ANNOTATION);
    return GF__FIT_NEVER;
  }
  if (r->gpu_count > n->ngpus) {
    snprintf(why, cap, "needs %u GPUs, node has %u", r->gpu_count, n->ngpus);
    return GF__FIT_NEVER;
  }
  gf__fit sk = slots_ok ? GF__FIT : slots_why(nr, n, r, slots, why, cap);
  if (sk)
    return sk;
  if (r->model_mask && !(r->model_mask & n->model_mask)) {
    char have[384] = "";
    models_text(s, n, have, sizeof(have));
    snprintf(why, cap, "gpu-model: node has %s, not an allowed model", have);
    return GF__FIT_NEVER;
  }
  /* What the node can never offer, however much is freed: more CPU or
   * memory than it has allocatable, a share larger than its largest GPU,
   * a share where every GPU is whole-only, more GPUs than it has that could
   * take one.  These are unresolvable (preemption cannot help). */
  if (r->cpu_milli > n->cpu_milli) {
    gf__fmt_cpu(r->cpu_milli, a, sizeof(a));
    gf__fmt_cpu(n->cpu_milli, b, sizeof(b));
    snprintf(why, cap, "CPU: %s cores requested, node has %s allocatable", a,
             b);
    return GF__FIT_NEVER;
  }
  if (r->mem_bytes > n->mem_bytes) {
    gf__fmt_bytes(r->mem_bytes, a, sizeof(a));
    gf__fmt_bytes(n->mem_bytes, b, sizeof(b));
    snprintf(why, cap, "memory: %s requested, node has %s allocatable", a, b);
    return GF__FIT_NEVER;
  }
  {
    bool share = r->gpu_milli < GF_GPU_MILLI;
    uint32_t able = 0, eligible = 0;
    int64_t biggest = 0;
    for (uint32_t g = 0; g < n->ngpus; g++) {
      const gf_gpu *gpu = &n->gpus[g];
      if (r->model_mask && !(r->model_mask & (1ull << gpu->model)))
        continue;
      eligible++;
      if (share && gpu->whole_only)
        continue;
      if (gpu->mem_bytes > biggest)
        biggest = gpu->mem_bytes;
      if (!r->gpu_mem_bytes || gpu->mem_bytes >= r->gpu_mem_bytes)
        able++;
    }
    if (able < r->gpu_count) {
      if (share && eligible > 0 && biggest == 0) {
        snprintf(why, cap,
                 "a GPU share: every GPU on %s is whole-only (exclusive mode "
                 "or MIG devices); ask for a whole GPU (%s without memory or "
                 "compute)",
                 nr->name, GF_RES_GPU);
      } else if (r->gpu_mem_bytes && biggest < r->gpu_mem_bytes) {
        gf__fmt_bytes(r->gpu_mem_bytes, a, sizeof(a));
        gf__fmt_bytes(biggest, b, sizeof(b));
        snprintf(why, cap, "gpu-memory %s: the largest GPU on %s has %s", a,
                 nr->name, b);
      } else {
        snprintf(why, cap, "needs %u GPUs, node has %u that could take it",
                 r->gpu_count, able);
      }
      return GF__FIT_NEVER;
    }
  }
  if (n->cpu_used + r->cpu_milli > n->cpu_milli) {
    gf__fmt_cpu(r->cpu_milli, a, sizeof(a));
    gf__fmt_cpu(n->cpu_milli - n->cpu_used, b, sizeof(b));
    snprintf(why, cap, "CPU: %s cores requested, %s free", a, b);
    return GF__FIT_NOT_NOW;
  }
  if (n->mem_used + r->mem_bytes > n->mem_bytes) {
    gf__fmt_bytes(r->mem_bytes, a, sizeof(a));
    gf__fmt_bytes(n->mem_bytes - n->mem_used, b, sizeof(b));
    snprintf(why, cap, "memory: %s requested, %s free", a, b);
    return GF__FIT_NOT_NOW;
  }
  uint32_t fit = 0, whole_free = 0;
  int64_t max_mem = 0;
  int32_t max_milli = 0;
  for (uint32_t g = 0; g < n->ngpus; g++) {
    const gf_gpu *gpu = &n->gpus[g];
    fit += gf_gpu_fits(gpu, r);
    if (r->model_mask && !(r->model_mask & (1ull << gpu->model)))
      continue;
    if (gpu->whole_only && !gpu->exclusive && gpu->npods == 0)
      whole_free++;
    if (gpu->exclusive || gpu->whole_only)
      continue;
    if (gpu->mem_bytes - gpu->mem_used > max_mem)
      max_mem = gpu->mem_bytes - gpu->mem_used;
    if (GF_GPU_MILLI - gpu->milli_used > max_milli)
      max_milli = GF_GPU_MILLI - gpu->milli_used;
  }
  if (fit >= r->gpu_count && gf_node_fits(n, r))
    return GF__FIT;
  bool share_blocked = (r->gpu_mem_bytes && max_mem < r->gpu_mem_bytes) ||
                       (r->gpu_milli && max_milli < r->gpu_milli);
  if (r->gpu_milli < GF_GPU_MILLI && whole_free > 0 && share_blocked) {
    snprintf(why, cap,
             "a GPU share: the free GPUs on %s are whole-only (exclusive mode "
             "or MIG devices); ask for a whole GPU (%s without memory or "
             "compute)",
             nr->name, GF_RES_GPU);
    return GF__FIT_NOT_NOW;
  }
  if (r->gpu_count > 1 || r->gpu_milli == GF_GPU_MILLI) {
    snprintf(why, cap, "needs %u whole GPU%s, node has %u free", r->gpu_count,
             r->gpu_count > 1 ? "s" : "", fit);
    return GF__FIT_NOT_NOW;
  }
  if (compute_only) {
    compute_only_why(nr, r, max_milli, max_mem, why, cap);
  } else if (r->gpu_mem_bytes && max_mem < r->gpu_mem_bytes) {
    gf__fmt_bytes(r->gpu_mem_bytes, a, sizeof(a));
    gf__fmt_bytes(max_mem, b, sizeof(b));
    snprintf(why, cap, "gpu-memory %s: largest free share on %s is %s", a,
             nr->name, b);
  } else if (r->gpu_milli && max_milli < r->gpu_milli) {
    /* No '%' in a reason: kube-scheduler passes the extender's text to its
     * event recorder as a format string ("15%!:(MISSING)"). */
    snprintf(why, cap,
             "gpu-compute %d percent: largest free share on %s is %d percent",
             r->gpu_milli / 10, nr->name, max_milli / 10);
  } else {
    gf__fmt_bytes(r->gpu_mem_bytes, a, sizeof(a));
    snprintf(why, cap,
             "gpu-memory %s with gpu-compute %d percent: no single GPU on %s "
             "has "
             "both free",
             a, r->gpu_milli / 10, nr->name);
  }
  return GF__FIT_NOT_NOW;
}

/* Failed-everywhere reason for a pod whose request itself cannot be met. */

/* The pod's request resolved against the model (under the mutex). */
static void resolve(gf_sched *s, const gf__pod *p, gf_request *r, verdict *v) {
  *r = p->req;
  gf__effective(s, r);
  bool named;
  r->model_mask = gf__models_mask(s->c, p->models, &named);
  r->weights = gf__pod_weights(s->c, p); /* the cache term's, kubefeed.c */
  r->weights_own = gf__pod_weights_own(s->c, p);
  v->kind = GF__FIT;
  if (named && r->model_mask == 0 && r->gpu_count) {
    v->kind = GF__FIT_NEVER;
    char hb[256];
    if (strncmp(p->models, GF__HAMI_MODELS, strlen(GF__HAMI_MODELS)) == 0)
      snprintf(v->why, sizeof(v->why),
               "%s: no GPU model in the cluster is allowed",
               gf__hami_models_text(p->models, hb, sizeof(hb)));
    else
      snprintf(v->why, sizeof(v->why),
               "gpu-model '%.200s': no node in the cluster has this model",
               p->models);
    gf__utf8_fix(v->why); /* the precision may cut a character */
  }
}

static const char *node_name_of(const json_t *item) {
  const json_t *meta = gf__json_get(item, "metadata");
  const json_t *name = gf__json_get(meta, "name");
  return json_is_string(name) ? json_string_value(name) : NULL;
}

/* A resourceVersion as a number: true when rv is a decimal uint64. */
static bool rv_number(const char *rv, uint64_t *out) {
  uint64_t v = 0;
  if (!*rv)
    return false;
  for (const char *p = rv; *p; p++) {
    if (*p < '0' || *p > '9' || v > (UINT64_MAX - 9) / 10)
      return false;
    v = v * 10 + (uint64_t)(*p - '0');
  }
  *out = v;
  return true;
}

/* Whether a Node at resourceVersion `fresh` may replace the copy the model
 * holds at `held`.  The API server's resourceVersions are opaque, but its
 * own are increasing decimal numbers: when the held one is such a number,
 * only a larger number replaces it (an older or equal copy, or one whose
 * version cannot be compared, never does).  A copy held without a number
 * is replaced by any other version. */
static bool rv_replaces(const char *held, const char *fresh) {
  uint64_t h, f;
  if (rv_number(held, &h))
    return rv_number(fresh, &f) && f > h;
  return !*held || strcmp(held, fresh) != 0;
}

/* Node objects sent in a request (nodeCacheCapable false).  When an
 * informer feeds the model (s->watched) they only name the candidates and
 * never change it: the API server's copy is the truth, and anyone who can
 * reach the extender could otherwise send a Node with more GPU memory, or
 * a stale copy without GPUs.  Without an informer (--no-kube) they are the
 * only source: a node is learned or refreshed from them, but a copy older
 * than the one held (resourceVersion) is ignored.  Under the mutex. */
static void learn_nodes(gf_sched *s, const gf__args *a, gf__node *pn) {
  if (!a->node_items || s->watched)
    return;
  size_t i;
  const json_t *it;
  json_array_foreach(a->node_items, i, it) {
    gf_diag nd = {""};
    int rc = gf__node_parse(it, pn, &nd);
    if (rc) {
      /* Logged: the first 20, then one in 1000 (a client may send many). */
      uint64_t n = ++s->m.nodes_refused;
      if (n <= 20 || n % 1000 == 0)
        fprintf(
            stderr,
            "gpufrac scheduler: a Node in a request refused: %s (%s; %" PRIu64
            " refused so far)\n",
            nd.msg, gf_err_name(rc), n);
      if (!pn->inv_error[0])
        continue; /* no usable name or allocatable */
    }
    int64_t ni = gf__smap_get(&s->nmap, pn->name);
    if (ni >= 0 && (rc || !rv_replaces(s->nodes[ni].rv, pn->rv)))
      continue; /* a known node stays as it was */
    gf__node_update_locked(s, pn);
  }
}

/* The policy's score of candidate node i and the GPUs it would take
 * (gf_engine_score; pick->ngpus is 0 if the node cannot take r). */
static int64_t score_node(gf_sched *s, uint32_t i, const gf_request *r,
                          gf_placement *pick) {
  int64_t sc = 0;
  pick->ngpus = 0;
  gf_request rn = *r; /* a compute-only share's memory on this node */
  gf__part_of_memory(gf_cluster_node(s->c, i), &rn);
  if (!s->engine || gf_engine_score(s->engine, &rn, i, &sc, pick) != 0)
    pick->ngpus = 0;
  return sc;
}

/* filter_top's choice: the best `cap` fitting nodes seen so far, best
 * first (an equal score keeps the one seen first, so the choice is
 * stable). */
typedef struct top_set {
  int64_t score[GF_SCHED_FILTER_TOP_MAX];
  size_t at[GF_SCHED_FILTER_TOP_MAX]; /* the node's index in the request */
  uint32_t n, cap;
} top_set;

static void top_offer(top_set *t, int64_t score, size_t at) {
  uint32_t k = t->n;
  if (k == t->cap) {
    if (score <= t->score[k - 1])
      return;
    k--; /* the worst gives way */
  } else {
    t->n++;
  }
  while (k > 0 && t->score[k - 1] < score) {
    t->score[k] = t->score[k - 1];
    t->at[k] = t->at[k - 1];
    k--;
  }
  t->score[k] = score;
  t->at[k] = at;
}

/* NodeNames may name at most the nodes the model knows and
 * GF__NAMES_SLACK more (nodes the API server has and the feed has not
 * delivered yet).  Each name costs its reply a reason or a score: without
 * the bound a request of 100,000 made-up names (under 1 MB) drew an 8 MB
 * answer, held in memory while the client did not read it.  Returns 0 or
 * writes why into msg. */
#define GF__NAMES_SLACK 256
static int names_over(gf_sched *s, const gf__args *a, char *msg, size_t cap) {
  if (a->node_items)
    return 0; /* Nodes in full: the answer is at most the request's size */
  pthread_mutex_lock(&s->mu);
  size_t known = s->nmap.live;
  pthread_mutex_unlock(&s->mu);
  if (a->nnames <= known + GF__NAMES_SLACK)
    return 0;
  snprintf(msg, cap,
           "gpufrac extender: the request names %zu nodes and the extender "
           "knows %zu; it answers for at most %zu (the nodes it knows and "
           "%d more not seen yet): refused",
           a->nnames, known, known + GF__NAMES_SLACK, GF__NAMES_SLACK);
  return 1;
}

/* Whether a container's resources (limits or requests) name res. */
static bool asks_res(const json_t *c, const char *res) {
  const json_t *r = json_object_get(c, "resources");
  return json_object_get(json_object_get(r, "limits"), res) ||
         json_object_get(json_object_get(r, "requests"), res);
}

/* A GPU pod whose GPU container does not ask for gpufrac.io/gpu (a share
 * in gpufrac's, HAMi's or KAI's words alone): kubelet calls the agent's
 * device plugin only for gpufrac.io/gpu, so the container would run with a
 * grant and no GPU, interposer or limit.  Refused, with the fix, into
 * why[cap]; false when the pod has its slot (docs/scheduler.md). */
static bool lacks_slot(const json_t *pod, const gf__pod *p, char *why,
                       size_t cap) {
  if (p->req.gpu_count == 0 || !p->container[0])
    return false;
  const json_t *cs =
      json_object_get(json_object_get(pod, "spec"), "containers");
  size_t i;
  const json_t *c;
  json_array_foreach(cs, i, c) {
    const char *name = json_string_value(json_object_get(c, "name"));
    if (!name || strcmp(name, p->container) != 0)
      continue;
    if (asks_res(c, GF_RES_GPU))
      return false;
    snprintf(why, cap,
             "container '%s' asks for a GPU share without %s: kubelet gives "
             "a container its GPU only through %s (gpufrac's device plugin), "
             "so it would run with no GPU and no limit; add %s: 1 to its "
             "limits (the gpufrac chart's admission policy adds it, "
             "docs/install.md)",
             name, GF_RES_GPU, GF_RES_GPU, GF_RES_GPU);
    return true;
  }
  return false;
}

/* /filter's verdict on node `name` for pod p (asking r), the holds
 * applied (a refusal they cause says so); the node noted as offered for
 * defragmentation (offer, or NULL).  Under the mutex. */
static gf__fit node_verdict(gf_sched *s, const char *name, const gf_request *r,
                            const gf__pod *p, const gf__holds *hold,
                            gf_node *hcopy, struct gf__doffer *offer, char *why,
                            size_t cap) {
  int64_t ni = gf__smap_get(&s->nmap, name);
  if (ni < 0) {
    snprintf(why, cap,
             "gpufrac has not seen this node yet (no Node object from "
             "the API server)");
    return r->gpu_count ? GF__FIT_NOT_NOW : GF__FIT;
  }
  const gf_node *gn = gf_cluster_node(s->c, (uint32_t)ni);
  if (hold->n && gf__holds_apply(s, hold, (uint32_t)ni, name, hcopy))
    gn = hcopy;
  gf__fit kind = why_not(s, &s->nodes[ni], gn, r, p->dp_slots, why, cap);
  if (kind == GF__FIT_NOT_NOW && gn == hcopy)
    gf__holds_why(s, hold, (uint32_t)ni, name, r, p, why, cap);
  if (offer)
    gf__defrag_offer_add(offer, name);
  return kind;
}

static void do_filter(gf_sched *s, const char *body, size_t len,
                      reply_buf *out) {
  gf_diag d = {""};
  gf__args a;
  if (gf__args_parse(body, len, &a, &d)) {
    out->status = 200; /* kube-scheduler shows Error; it drops a 400's body */
    out->refused = true;
    out->json = gf__error_obj(d.msg);
    return;
  }
  if (names_over(s, &a, d.msg, sizeof(d.msg))) {
    gf__args_release(&a);
    out->status = 200;
    out->refused = true;
    out->json = gf__error_obj(d.msg);
    return;
  }
  top_set *top = NULL; /* --filter-top's choice */
  gf__holds *hold = gf__calloc(1, sizeof(*hold));
  gf_node *hcopy = gf__malloc(sizeof(*hcopy));
  gf__pod *p = gf__malloc(sizeof(*p));
  gf__node *pn = gf__malloc(sizeof(*pn));
  json_t *failed = json_object(), *unres = json_object();
  json_t *passed = json_array();
  gf__buf tp, tf, tu;
  gf__buf_init(&tp, GF__BUF_SCHED_REPLY_MAX);
  gf__buf_init(&tf, GF__BUF_SCHED_REPLY_MAX);
  gf__buf_init(&tu, GF__BUF_SCHED_REPLY_MAX);
  if (!gf__buf_reserve(&tp, 64 + a.nnames * 24))
    gf__buf_append(&tp, "[", 1);
  if (!gf__buf_reserve(&tf, 256))
    gf__buf_append(&tf, "{", 1);
  if (!gf__buf_reserve(&tu, 256))
    gf__buf_append(&tu, "{", 1);
  if (!p || !pn || !hold || !hcopy || !failed || !unres || !passed ||
      gf__buf_error(&tp) || gf__buf_error(&tf) || gf__buf_error(&tu)) {
    out->status = 500;
    goto done;
  }
  verdict v = {0, ""};
  gf_request r;
  memset(&r, 0, sizeof(r));
  if (gf__pod_parse_ex(a.pod, s->accept, p, &d)) {
    v.kind = GF__FIT_NEVER;
    snprintf(v.why, sizeof(v.why), "%s", d.msg);
    gf__utf8_fix(v.why);
  } else if (lacks_slot(a.pod, p, v.why, sizeof(v.why))) {
    v.kind = 2; /* no node can help: the pod must change */
    gf__utf8_fix(v.why);
  }
  pthread_mutex_lock(&s->mu);
  int rc = gf__ensure_model(s);
  if (rc) {
    pthread_mutex_unlock(&s->mu);
    out->status = 500;
    out->json = gf__error_obj("extender out of memory rebuilding its model");
    goto done;
  }
  learn_nodes(s, &a, pn);
  if (v.kind == GF__FIT) {
    if (!p->node[0])
      gf__request_pending_put(s, p);
    resolve(s, p, &r, &v);
  }
  /* Capacity freed by a preemption is held for the pod kube-scheduler
   * nominated there, against pods of no higher priority
   * (sched_preempt.c). */
  if (v.kind == 0 && r.gpu_count > 0 && hcopy)
    gf__holds_collect(s, p->priority, p->uid, hold);
  /* --filter-top: fitting nodes are scored here and only the best kept.
   * A policy that cannot be built (out of memory) cuts nothing, nor is a
   * pod with resource claims cut while the DRA feed scores those (its
   * prioritize scores are the DRA feed's, not this engine's). */
  const json_t *claims =
      json_object_get(json_object_get(a.pod, "spec"), "resourceClaims");
  bool dra_scored = s->dra_score && json_array_size(claims) > 0;
  if (v.kind == GF__FIT && r.gpu_count > 0 && s->filter_top > 0 &&
      !dra_scored && gf__policy_refresh(s) == 0 &&
      (top = gf__malloc(sizeof(*top)))) {
    top->n = 0;
    top->cap = s->filter_top;
  }
  uint64_t fitting = 0;
  size_t nlist = a.node_items ? json_array_size(a.node_items) : a.nnames;
  /* defragmentation plans only on the nodes kube-scheduler offers */
  struct gf__doffer *offer = v.kind == 0 && r.gpu_count > 0 && !p->node[0]
                                 ? gf__defrag_offer_begin(s, p, nlist)
                                 : NULL;
  bool took = false;
  for (size_t i = 0; i < nlist; i++) {
    const json_t *it = a.node_items ? json_array_get(a.node_items, i) : NULL;
    const char *name = a.node_items ? node_name_of(it) : a.names[i];
    char why[GF_DIAG_MAX];
    gf__fit kind;
    if (!name) {
      continue; /* a Node without a name: nothing to answer about */
    } else if (v.kind) {
      kind = v.kind;
      snprintf(why, sizeof(why), "%s", v.why);
    } else {
      kind = node_verdict(s, name, &r, p, hold, hcopy, offer, why, sizeof(why));
    }
    took = took || kind == GF__FIT;
    if (kind)
      gf__utf8_fix(why); /* reasons quote model and node names */
    int jr = 0;
    if (kind == GF__FIT && top) {
      /* why_not passed it, so the model knows it (ni >= 0) */
      gf_placement pick;
      int64_t ni = gf__smap_get(&s->nmap, name);
      int64_t sc = ni < 0 ? INT64_MIN : score_node(s, (uint32_t)ni, &r, &pick);
      top_offer(top, ni < 0 || pick.ngpus == 0 ? INT64_MIN : sc, i);
      fitting++;
      continue;
    }
    if (!a.node_items) {
      /* Names only: write the reply's parts directly (see prioritize). */
      gf__buf *tb = kind == GF__FIT ? &tp : kind == GF__FIT_NEVER ? &tu : &tf;
      if (tb->len > 1)
        gf__buf_append(tb, ",", 1);
      gf__tb_json_str(tb, name);
      if (kind) {
        gf__buf_append(tb, ":", 1);
        gf__tb_json_str(tb, why);
      }
    } else if (kind == GF__FIT) {
      jr = json_array_append_new(passed, json_incref((json_t *)it));
    } else {
      jr = json_object_set_new(kind == GF__FIT_NEVER ? unres : failed, name,
                               json_string(why));
    }
    if (jr) {
      out->status = 500;
      break;
    }
    if (kind)
      s->m.filter_failed_nodes++;
  }
  if (top)
    s->m.filter_cut_nodes += fitting - top->n;
  if (offer)
    gf__defrag_offer_end(offer, !took);
  pthread_mutex_unlock(&s->mu);
  if (out->status == 500)
    goto done;
  for (uint32_t k = 0; top && k < top->n; k++) {
    size_t i = top->at[k];
    if (!a.node_items) {
      if (tp.len > 1)
        gf__buf_append(&tp, ",", 1);
      gf__tb_json_str(&tp, a.names[i]);
    } else if (json_array_append_new(
                   passed, json_incref(json_array_get(a.node_items, i)))) {
      out->status = 500;
      goto done;
    }
  }
  if (!a.node_items) {
    gf__buf_append(&tp, "]", 1);
    gf__buf_append(&tf, "}", 1);
    gf__buf_append(&tu, "}", 1);
    gf__buf t;
    gf__buf_init(&t, GF__BUF_SCHED_REPLY_MAX);
    if (!gf__buf_error(&tp) && !gf__buf_error(&tf) && !gf__buf_error(&tu) &&
        !gf__buf_reserve(&t, tp.len + tf.len + tu.len + 160))
      gf__buf_appendf(&t,
                      "{\"Nodes\":null,\"NodeNames\":%s,\"FailedNodes\":%s,"
                      "\"FailedAndUnresolvableNodes\":%s,\"Error\":\"\"}",
                      tp.p, tf.p, tu.p);
    if (gf__buf_error(&t) || !t.len) {
      gf__buf_release(&t);
      out->status = 500;
      goto done;
    }
    out->text = gf__buf_take(&t);
    out->text_json = true;
    out->status = 200;
    goto done;
  }
  /* Here the request sent Node objects (names only were answered above). */
  json_t *nodes = json_pack("{s:{},s:O}", "metadata", "items", passed);
  json_t *names = json_null();
  out->json = json_pack("{s:o,s:o,s:O,s:O,s:s}", "Nodes", nodes, "NodeNames",
                        names, "FailedNodes", failed,
                        "FailedAndUnresolvableNodes", unres, "Error", "");
  out->status = out->json ? 200 : 500;
done:
  gf__free(top);
  gf__free(hold);
  gf__free(hcopy);
  gf__buf_release(&tp);
  gf__buf_release(&tf);
  gf__buf_release(&tu);
  json_decref(failed);
  json_decref(unres);
  json_decref(passed);
  gf__free(p);
  gf__free(pn);
  gf__args_release(&a);
}

/* ---- prioritize ----------------------------------------------------------*/

static void do_prioritize(gf_sched *s, const char *body, size_t len,
                          reply_buf *out) {
  gf_diag d = {""};
  gf__args a;
  if (gf__args_parse(body, len, &a, &d)) {
    out->status = 400;
    out->json = gf__error_obj(d.msg);
    return;
  }
  if (names_over(s, &a, d.msg, sizeof(d.msg))) {
    gf__args_release(&a);
    out->status = 400;
    out->json = gf__error_obj(d.msg);
    return;
  }
  size_t n = a.node_items ? json_array_size(a.node_items) : a.nnames;
  gf__pod *p = gf__malloc(sizeof(*p));
  gf__node *pn = gf__malloc(sizeof(*pn));
  int64_t *raw = gf__calloc(n + 1, sizeof(*raw));
  bool *fits = gf__calloc(n + 1, sizeof(*fits));
  if (!p || !pn || !raw || !fits) {
    out->status = 500;
    goto done;
  }
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  const json_t *claims =
      json_object_get(json_object_get(a.pod, "spec"), "resourceClaims");
  if (s->dra_score && json_array_size(claims) > 0) {
    /* A pod with resource claims (the DRA path): scored from the DRA
     * feed's model, without the extender's own (sched_dra.h, mode 1). */
    for (size_t i = 0; i < n; i++) {
      const char *name = a.node_items
                             ? node_name_of(json_array_get(a.node_items, i))
                             : a.names[i];
      if (!name || s->dra_score(s->dra_user, a.pod, name, &raw[i]) != 0)
        continue;
      fits[i] = true;
      lo = raw[i] < lo ? raw[i] : lo;
      hi = raw[i] > hi ? raw[i] : hi;
    }
    goto reply;
  }
  bool ok = gf__pod_parse_ex(a.pod, s->accept, p, &d) == 0;
  pthread_mutex_lock(&s->mu);
  int mrc = gf__ensure_model(s); /* the model (or engine) could not be made */
  if (mrc == 0)
    learn_nodes(s, &a, pn); /* Nodes sent in full, as filter does */
  verdict v = {0, ""};
  gf_request r;
  memset(&r, 0, sizeof(r));
  if (ok && mrc == 0 && (mrc = gf__ensure_model(s)) == 0) {
    if (!p->node[0])
      gf__request_pending_put(s, p);
    resolve(s, p, &r, &v);
    ok = v.kind == GF__FIT && (mrc = gf__policy_refresh(s)) == 0;
  } else {
    ok = false;
  }
  if (mrc) {
    pthread_mutex_unlock(&s->mu);
    out->status = 500;
    out->json = gf__error_obj(mrc == GF_ENOMEM
                                  ? "extender out of memory building its model"
                                  : gf_strerror(mrc));
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    const char *name = a.node_items
                           ? node_name_of(json_array_get(a.node_items, i))
                           : a.names[i];
    int64_t ni = name && ok ? gf__smap_get(&s->nmap, name) : -1;
    if (ni < 0 || !gf_node_fits(gf_cluster_node(s->c, (uint32_t)ni), &r))
      continue;
    gf_placement pick;
    fits[i] = true;
    raw[i] = score_node(s, (uint32_t)ni, &r, &pick);
    lo = raw[i] < lo ? raw[i] : lo;
    hi = raw[i] > hi ? raw[i] : hi;
  }
  pthread_mutex_unlock(&s->mu);
reply:;
  /* Written directly: a reply names every node, and building it as JSON
   * values first costs more than scoring them. */
  gf__buf t;
  gf__buf_init(&t, GF__BUF_SCHED_REPLY_MAX);
  if (gf__buf_reserve(&t, 64 + n * 48)) {
    out->status = 500;
    goto done;
  }
  gf__buf_append(&t, "[", 1);
  bool first = true;
  for (size_t i = 0; i < n; i++) {
    const char *name = a.node_items
                           ? node_name_of(json_array_get(a.node_items, i))
                           : a.names[i];
    if (!name)
      continue;
    int score = 0;
    if (fits[i])
      score = hi == lo ? 10
                       : (int)lround(10.0 * ((double)raw[i] - (double)lo) /
                                     ((double)hi - (double)lo));
    /* Hot loop: no printf (scores are 0..10). */
    static const char head[] = ",{\"Host\":"; /* 9 bytes */
    gf__buf_append(&t, head + (first ? 1 : 0), first ? 8 : 9);
    gf__tb_json_str(&t, name);
    char tail[16] = ",\"Score\":10}"; /* 12 bytes */
    size_t tl = 12;
    if (score < 10) {
      tail[9] = (char)('0' + (score < 0 ? 0 : score));
      tail[10] = '}';
      tl = 11;
    }
    gf__buf_append(&t, tail, tl);
    first = false;
  }
  gf__buf_append(&t, "]", 1);
  if (gf__buf_error(&t)) {
    gf__buf_release(&t);
    out->status = 500;
    goto done;
  }
  out->text = gf__buf_take(&t);
  out->text_json = true;
  out->status = 200;
done:
  gf__free(p);
  gf__free(pn);
  gf__free(raw);
  gf__free(fits);
  gf__args_release(&a);
}

/* ---- bind ----------------------------------------------------------------*/

static int build_grant(const gf_sched *s, const nrec *nr, const pend *pp,
                       const gf_request *r, const gf_placement *pick,
                       char **json, gf_diag *d) {
  (void)s;
  gf_grant *g = gf__calloc(1, sizeof(*g));
  if (!g)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  snprintf(g->node, sizeof(g->node), "%s", nr->name);
  g->ncontainers = 1;
  gf_grant_container *c = &g->containers[0];
  snprintf(c->name, sizeof(c->name), "%s", pp->container);
  c->ngpus = pick->ngpus;
  for (uint32_t k = 0; k < pick->ngpus; k++) {
    const gf_inventory_gpu *ig = &nr->inv.gpus[pick->gpus[k]];
    c->gpus[k].index = ig->index;
    snprintf(c->gpus[k].uuid, sizeof(c->gpus[k].uuid), "%s", ig->uuid);
    c->gpus[k].mem_bytes = r->gpu_mem_bytes;
    c->gpus[k].compute_pct = r->compute_pct;
  }
  int rc = gf_grant_format(g, json, d);
  gf__free(g);
  return rc;
}

/* Assumes the bind in the model.  On success *seq identifies the record
 * and *grant (may stay NULL for a pod without GPUs) is the grant text. */
static int bind_assume(gf_sched *s, const gf__bind_args *b, const char *key,
                       uint64_t *seq, char **grant, bool *done, gf_diag *d) {
  if (!s->leader)
    return gf_diag_set(d, GF_ESTATE,
                       "this gpufrac extender replica is not the leader; "
                       "the leader binds");
  int rc = gf__ensure_model(s);
  if (rc)
    return gf_diag_set(d, rc, "extender model unavailable: %s",
                       gf_strerror(rc));
  prec *old = gf__find_pod(s, key);
  if (old) {
    if (strcmp(old->node, b->node) != 0)
      return gf_diag_set(d, GF_EEXIST, "pod %s/%s is already bound to %s",
                         b->pod_ns, b->pod_name, old->node);
    if (old->state == P_BINDING)
      return gf_diag_set(d, GF_ESTATE,
                         "pod %s/%s: a bind to %s is already in progress",
                         b->pod_ns, b->pod_name, b->node);
    *done = true; /* a retry of a bind that succeeded */
    return 0;
  }
  pend *pp = gf__pending_find(s, b->pod_uid, b->pod_ns, b->pod_name);
  if (!pp)
    return gf_diag_set(d, GF_ENOTFOUND,
                       "pod %s/%s is unknown to the gpufrac extender (no "
                       "filter call or watch event seen for it); it will be "
                       "retried",
                       b->pod_ns, b->pod_name);
  int64_t ni = gf__smap_get(&s->nmap, b->node);
  if (ni < 0)
    return gf_diag_set(d, GF_ENOTFOUND, "node %s is unknown to gpufrac",
                       b->node);
  gf__pod pod;
  memset(&pod, 0, sizeof(pod));
  pod.req = pp->req;
  snprintf(pod.models, sizeof(pod.models), "%s", pp->models);
  gf_request r;
  verdict v;
  resolve(s, &pod, &r, &v);
  const nrec *nr = &s->nodes[ni];
  const gf_node *n = gf_cluster_node(s->c, (uint32_t)ni);
  /* what the grant gives and the model books (docs/scheduler.md) */
  gf__part_of_memory(n, &r);
  char why[GF_DIAG_MAX];
  if (v.kind)
    return gf_diag_set(d, GF_ENOFIT, "pod %s/%s: %s", b->pod_ns, b->pod_name,
                       v.why);
  /* slots 0: kube-scheduler checked them before it chose the node, and its
   * count is the one kubelet keeps (the extender's is for the reasons) */
  if (r.gpu_count && why_not(s, nr, n, &r, 0, why, sizeof(why)))
    return gf_diag_set(d, GF_ENOFIT, "pod %s/%s on %s: %s", b->pod_ns,
                       b->pod_name, b->node, why);
  gf_placement pick = {0, 0, {0}};
  if (r.gpu_count) {
    if ((rc = gf__policy_refresh(s)))
      return gf_diag_set(d, rc, "placement policy: %s", gf_strerror(rc));
    score_node(s, (uint32_t)ni, &r, &pick);
    gf__holds_steer(s, pp, (uint32_t)ni, b->node, &r, &pick); /* the hold */
    if (pick.ngpus != r.gpu_count)
      return gf_diag_set(d, GF_ENOFIT, "pod %s/%s: no GPUs to pick on %s",
                         b->pod_ns, b->pod_name, b->node);
    if ((rc = build_grant(s, nr, pp, &r, &pick, grant, d)))
      return rc;
  }
  prec *p = gf__add_pod(s, key, b->node, pp->models);
  if (!p) {
    gf__free(*grant);
    *grant = NULL;
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  }
  p->req = r;
  p->req.model_mask = 0;
  p->ngpus = (uint8_t)pick.ngpus;
  for (uint32_t k = 0; k < pick.ngpus; k++)
    p->gpu_index[k] = (uint8_t)nr->inv.gpus[pick.gpus[k]].index;
  p->state = P_BINDING;
  p->dp_slots = (uint8_t)pp->dp_slots;
  p->bind_seq = *seq = ++s->bind_seq;
  p->priority = pp->priority;
  if ((rc = gf__book(s, p))) {
    gf__remove_pod(s, p);
    gf__free(*grant);
    *grant = NULL;
    return gf_diag_set(d, rc, "pod %s/%s on %s: %s", b->pod_ns, b->pod_name,
                       b->node, gf_strerror(rc));
  }
  return 0;
}

static void do_bind(gf_sched *s, const char *body, size_t len, reply_buf *out) {
  gf_diag d = {""};
  gf__bind_args *b = gf__malloc(sizeof(*b));
  if (!b) {
    out->status = 500;
    return;
  }
  if (gf__bind_args_parse(body, len, b, &d)) {
    out->status = 200; /* as for filter */
    out->refused = true;
    out->json = gf__error_obj(d.msg);
    gf__free(b);
    return;
  }
  char kb[2 * GF_NAME_MAX];
  const char *key =
      gf__pod_key(b->pod_uid, b->pod_ns, b->pod_name, kb, sizeof(kb));
  gf_pod_ref ref = {b->pod_ns, b->pod_name, b->pod_uid};
  uint64_t seq = 0;
  char *grant = NULL;
  bool done = false;
  int rc;
  pthread_mutex_lock(&s->mu);
  if (!s->has_binder)
    rc = gf_diag_set(&d, GF_ESTATE,
                     "gpufrac extender has no Kubernetes API client "
                     "configured, so it cannot bind pod %s/%s; run it with "
                     "an API client or remove bindVerb from the scheduler "
                     "configuration",
                     b->pod_ns, b->pod_name);
  else
    rc = bind_assume(s, b, key, &seq, &grant, &done, &d);
  pthread_mutex_unlock(&s->mu);
  if (rc == 0 && !done) {
    gf_diag bd = {""};
    if ((rc = s->binder.bind(s->binder.ctx, &ref, b->node, grant, &bd)))
      gf_diag_set(&d, rc, "binding pod %s/%s to %s: %s", b->pod_ns, b->pod_name,
                  b->node, bd.msg[0] ? bd.msg : gf_strerror(rc));
    pthread_mutex_lock(&s->mu);
    prec *p = gf__find_pod(s, key);
    if (p && p->bind_seq == seq && p->state == P_BINDING) {
      if (rc) {
        gf__remove_pod(s, p); /* roll the assumption back */
      } else {
        p->state = P_ASSUMED;
        gf__pending_forget(s, key);
      }
    }
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_lock(&s->mu);
  if (rc)
    s->m.binds_failed++;
  else
    s->m.binds_ok++;
  pthread_mutex_unlock(&s->mu);
  gf__free(grant);
  out->status = 200;
  out->json = gf__error_obj(rc ? d.msg : "");
  gf__free(b);
}

/* ---- dispatch ------------------------------------------------------------*/

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void gf_sched_handle(gf_sched *s, const char *method, const char *path,
                     const char *body, size_t len, gf_sched_reply *out) {
  double t0 = now_s();
  memset(out, 0, sizeof(*out));
  int verb = gf__verb_of(path ? path : "");
  bool post = verb == V_FILTER || verb == V_PRIORITIZE || verb == V_BIND ||
              verb == V_PREEMPT;
  bool is_post = method && strcmp(method, "POST") == 0;
  bool is_get =
      method && (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0);
  reply_buf rb = {0, NULL, NULL, false, false};
  bool refused = false;
  if (verb == V_OTHER) {
    gf__set_text(out, 404,
                 "not found: the gpufrac extender serves /filter, /prioritize, "
                 "/bind, /preempt, /healthz, /readyz, /leaderz, /metrics\n");
  } else if (post ? !is_post : !is_get) {
    gf__set_text(out, 405,
                 post ? "method not allowed: use POST\n"
                      : "method not allowed: use GET\n");
  } else if (post && len > s->max_body) {
    char msg[128];
    snprintf(msg, sizeof(msg),
             "gpufrac extender: request body of %zu bytes exceeds the limit "
             "of %zu bytes",
             len, s->max_body);
    gf__unusable(out, verb, 413, msg);
    refused = true;
  } else if (post && (!body || len == 0)) {
    gf__unusable(out, verb, 400,
                 "gpufrac extender: empty request body: want a JSON object");
    refused = true;
  } else {
    switch (verb) {
    case V_FILTER:
      do_filter(s, body, len, &rb);
      break;
    case V_PRIORITIZE:
      do_prioritize(s, body, len, &rb);
      break;
    case V_BIND:
      do_bind(s, body, len, &rb);
      break;
    case V_PREEMPT:
      gf__do_preempt(s, body, len, &rb);
      break;
    case V_METRICS:
      gf__do_metrics(s, &rb);
      break;
    case V_HEALTHZ:
      rb.status = 200;
      rb.text = gf__strdup("ok\n");
      break;
    case V_LEADERZ: {
      /* Ready to bind: synced and holding the Lease (for monitoring;
       * /readyz is "synced, can filter"). */
      pthread_mutex_lock(&s->mu);
      bool ready = s->synced && s->leader && s->has_binder;
      const char *why = !s->has_binder ? "not ready to bind: no Kubernetes "
                                         "API client (--no-kube)\n"
                        : !s->synced   ? "not ready to bind: the model has "
                                         "not been synced from the API "
                                         "server\n"
                        : !s->leader   ? "not ready to bind: this replica "
                                         "is not the leader\n"
                                       : "ok\n";
      pthread_mutex_unlock(&s->mu);
      rb.status = ready ? 200 : 503;
      rb.text = gf__strdup(why);
      break;
    }
    case V_READYZ: {
      pthread_mutex_lock(&s->mu);
      bool ready = s->synced;
      pthread_mutex_unlock(&s->mu);
      rb.status = ready ? 200 : 503;
      rb.text = gf__strdup(ready ? "ok\n"
                                 : "not ready: the model has not been synced "
                                   "from the API server\n");
      break;
    }
    default:
      break;
    }
    if (rb.json) {
      out->body = json_dumps(rb.json, JSON_COMPACT | JSON_PRESERVE_ORDER);
      json_decref(rb.json);
      out->content_type = "application/json";
    } else if (rb.text) {
      out->body = rb.text;
      out->content_type = rb.text_json ? "application/json"
                          : verb == V_METRICS
                              ? "text/plain; version=0.0.4; charset=utf-8"
                              : "text/plain; charset=utf-8";
    }
    out->status = out->body ? rb.status : 500;
    out->len = out->body ? strlen(out->body) : 0;
    if (!out->body)
      out->content_type = "text/plain; charset=utf-8";
  }
  gf__record(s, verb, out->status, refused || rb.refused, now_s() - t0);
}
