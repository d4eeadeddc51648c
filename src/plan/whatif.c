/*
 * The what-if: the GPU pods that hold GPUs today, placed by the engine on an
 * empty copy of the same GPU nodes, under whole (every pod whole GPUs), fgd
 * and gpufrac (recommended requests).  Deterministic: largest GPU demand
 * first, ties by namespace and name, seeded ties in the engine.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/engine.h"
#include "gpufrac/error.h"
#include "gpufrac/frag.h"
#include "internal.h"

#define WHATIF_SEED 42
#define UNKNOWN_CAPACITY ((int64_t)1 << 50) /* milli-CPU or bytes */

typedef struct item {
  const gf__ppod *pod;
  gf_request whole, share;
  int64_t need_mem; /* bytes per GPU a whole request needs on another
                       fleet's GPUs: peak + headroom, at most (and when
                       unmeasured) the memory of the GPU it runs on */
} item;

static int64_t demand(const gf_request *r) {
  return (int64_t)r->gpu_count * r->gpu_milli;
}

static int cmp_item(const void *a, const void *b) {
  const item *x = a, *y = b;
  int64_t dx = demand(&x->share), dy = demand(&y->share);
  if (dx != dy)
    return dx > dy ? -1 : 1;
  if (x->share.gpu_mem_bytes != y->share.gpu_mem_bytes)
    return x->share.gpu_mem_bytes > y->share.gpu_mem_bytes ? -1 : 1;
  int c = strcmp(x->pod->ns, y->pod->ns);
  return c ? c : strcmp(x->pod->name, y->pod->name);
}

/* The engine's configuration for the requests reqs[0..n) under `policy`:
 * builds their typical pods (95th percentile) and shapes (all) into typ and
 * shapes, which the caller releases.  `what` starts the message on error. */
static int engine_config(const gf_request *reqs, size_t n, const char *policy,
                         const char *what, gf_typical_set *typ,
                         gf_typical_set *shapes, gf_engine_config *cfg,
                         gf_diag *d) {
  int rc;
  if ((rc = gf_typical_build(reqs, NULL, n, 95.0, false, typ)) ||
      (rc = gf_typical_build(reqs, NULL, n, 100.0, false, shapes)))
    return gf_diag_set(d, rc, "%s: %s", what, gf_strerror(rc));
  *cfg = (gf_engine_config){.policy = policy,
                            .seed = WHATIF_SEED,
                            .typical = typ,
                            .shapes = shapes,
                            .ties = GF_TIE_ORDER};
  return 0;
}

/* Places every item (whole or share requests) under `policy` on a copy of
 * c; fills w. */
static int replay(const gf_cluster *c, const double *price, const item *items,
                  size_t n, bool use_share, const char *policy,
                  gf_plan_whatif *w, const gf__ppod **first_unplaced,
                  gf_diag *d) {
  int rc = GF_ENOMEM;
  gf_cluster *cc = gf_cluster_clone(c);
  gf_request *reqs = gf__malloc((n ? n : 1) * sizeof(*reqs));
  gf_typical_set typ = {0}, shapes = {0};
  gf_engine *e = NULL;
  if (!cc || !reqs)
    goto out;
  for (size_t i = 0; i < n; i++)
    reqs[i] = use_share ? items[i].share : items[i].whole;
  gf_engine_config cfg;
  if ((rc = engine_config(reqs, n, policy, "what-if: building the typical pods",
                          &typ, &shapes, &cfg, d)))
    goto out;
  if ((rc = gf_engine_new(cc, &cfg, &e, d)))
    goto out;
  memset(w, 0, sizeof(*w));
  w->policy = policy; /* a literal: outlives the engine */
  for (size_t i = 0; i < n; i++) {
    gf_placement pl;
    rc = gf_engine_place(e, &reqs[i], &pl);
    if (rc == GF_ENOFIT) {
      if (!w->pods_unplaced++)
        *first_unplaced = items[i].pod;
      continue;
    }
    if (rc) {
      gf_diag_set(d, rc, "what-if %s: Pod %s/%s: %s", policy, items[i].pod->ns,
                  items[i].pod->name, gf_strerror(rc));
      goto out;
    }
    w->pods_placed++;
  }
  double money = 0;
  for (uint32_t i = 0; i < gf_cluster_nnodes(cc); i++) {
    const gf_node *node = gf_cluster_node(cc, i);
    uint32_t used = 0;
    for (uint32_t g = 0; g < node->ngpus; g++)
      if (node->gpus[g].npods)
        used++;
    w->gpus_needed += used;
    w->nodes_needed += used ? 1 : 0;
    money += used * price[i] * GF_PLAN_HOURS_PER_MONTH;
  }
  w->saved_per_month = money; /* made relative by the caller */
  rc = 0;
out:
  gf_engine_free(e);
  gf_typical_release(&typ);
  gf_typical_release(&shapes);
  gf__free(reqs);
  gf_cluster_free(cc);
  return rc;
}

/* Type t of the fleet can hold r alone on an empty node. */
static bool type_fits(const gf__ntype *t, const gf_request *r) {
  return r->gpu_count <= t->gpus &&
         r->gpu_mem_bytes <= (t->gpu_mem_mib << 20) &&
         r->cpu_milli <= t->cpu_milli && r->mem_bytes <= t->mem_bytes;
}

/* The cheapest-fleet what-if (gpufrac/plan.h): items placed in order on a
 * fleet that starts empty; a pod that fits nowhere opens a node of the
 * type with the lowest price per GPU that can hold it (ties: file order).
 * One engine serves the growing fleet. */
static int fleet(gf_plan *p, const item *items, size_t n, bool use_share,
                 const char *policy, gf_plan_whatif *w, gf_plan_fleet_type *ft,
                 gf_diag *d) {
  int rc = GF_ENOMEM;
  gf_cluster *c = gf_cluster_new();
  gf_request *reqs = gf__malloc((n ? n : 1) * sizeof(*reqs));
  gf_placement *pl = gf__malloc((n ? n : 1) * sizeof(*pl));
  bool *ok = gf__calloc(n ? n : 1, sizeof(*ok));
  gf_typical_set typ = {0}, shapes = {0};
  gf_engine *e = NULL;
  if (!c || !reqs || !pl || !ok)
    goto out;
  for (size_t i = 0; i < n; i++) {
    bool shared = use_share && items[i].share.gpu_milli < GF_GPU_MILLI;
    reqs[i] = shared ? items[i].share : items[i].whole;
    reqs[i].model_mask = 0; /* any model of the fleet */
    if (!shared)
      reqs[i].gpu_mem_bytes = items[i].need_mem;
  }
  gf_engine_config cfg;
  if ((rc = engine_config(reqs, n, policy, "fleet what-if: the typical pods",
                          &typ, &shapes, &cfg, d)))
    goto out;
  for (size_t t = 0; t < p->nftypes; t++) {
    ft[t].name = p->ftypes[t].name;
    ft[t].nodes = 0;
  }
  uint32_t serial = 0;
  for (size_t i = 0; i < n; i++) {
    if (e && gf_engine_place(e, &reqs[i], &pl[i]) == 0) {
      ok[i] = true;
      continue;
    }
    int best = -1;
    for (size_t t = 0; t < p->nftypes; t++) {
      const gf__ntype *ty = &p->ftypes[t];
      if (!type_fits(ty, &reqs[i]))
        continue;
      if (best < 0 || ty->price_hour / ty->gpus <
                          p->ftypes[best].price_hour / p->ftypes[best].gpus)
        best = (int)t;
    }
    if (best < 0) {
      if (!w->fleet_unplaced++)
        gf__plan_warn(p,
                      "fleet what-if (%s): Pod %s/%s fits no node type (%u "
                      "GPUs of %" PRId64 " MiB, %" PRId64 "m CPU, %" PRId64
                      " MiB memory); the count of such pods is in "
                      "fleet.pods_unplaced",
                      policy, items[i].pod->ns, items[i].pod->name,
                      reqs[i].gpu_count, reqs[i].gpu_mem_bytes >> 20,
                      reqs[i].cpu_milli, reqs[i].mem_bytes >> 20);
      continue;
    }
    const gf__ntype *ty = &p->ftypes[best];
    gf_gpu_spec specs[GF_MAX_GPUS_PER_NODE];
    memset(specs, 0, sizeof(specs));
    for (uint32_t g = 0; g < ty->gpus; g++) {
      specs[g].model = ty->model;
      specs[g].mem_bytes = ty->gpu_mem_mib << 20;
      specs[g].numa_node = -1;
    }
    char name[300];
    snprintf(name, sizeof(name), "fleet-%u-%s", serial++, ty->name);
    gf_diag nd = {""};
    int ni = gf_cluster_add_node(c, name, ty->cpu_milli, ty->mem_bytes, specs,
                                 ty->gpus, &nd);
    if (ni < 0) {
      rc = gf_diag_set(d, ni, "fleet what-if: node type %s: %s", ty->name,
                       nd.msg);
      goto out;
    }
    ft[best].nodes++;
    /* One engine for the whole fleet, made at its first node: the engine
     * and the policies grow their per-node state as the cluster grows (the
     * churn replay relies on the same), and nothing a policy derives when
     * it is made depends on the fleet's nodes here (the requests name no
     * model, so gpufrac's model prices are 0; its packing plan is the
     * workload's).  The tie order is drawn again over the grown fleet, as
     * a new engine's would be. */
    if (!e && (rc = gf_engine_new(c, &cfg, &e, d)))
      goto out;
    gf_engine_nodes_added(e);
    if (gf_engine_place(e, &reqs[i], &pl[i]) == 0)
      ok[i] = true;
    else
      w->fleet_unplaced++;
  }
  w->has_fleet = true;
  w->fleet = ft;
  w->nfleet = p->nftypes;
  for (size_t t = 0; t < p->nftypes; t++) {
    w->fleet_nodes += ft[t].nodes;
    w->fleet_gpus += ft[t].nodes * p->ftypes[t].gpus;
    w->fleet_per_month +=
        ft[t].nodes * p->ftypes[t].price_hour * GF_PLAN_HOURS_PER_MONTH;
  }
  rc = 0;
out:
  gf_engine_free(e);
  gf_typical_release(&typ);
  gf_typical_release(&shapes);
  gf__free(ok);
  gf__free(pl);
  gf__free(reqs);
  gf_cluster_free(c);
  return rc;
}

/* Adds each snapshot Node with GPUs and a GPU memory figure to the
 * what-if cluster c: cidx[i] is Node i's index there (-1 when left out),
 * price[that index] its price. */
static int add_nodes(gf_plan *p, gf_cluster *c, int *cidx, double *price,
                     gf_diag *d) {
  for (size_t i = 0; i < p->nnodes; i++) {
    const gf__pnode *n = &p->nodes[i];
    cidx[i] = -1;
    if (!n->ngpus)
      continue;
    if (n->gpu_mem_mib <= 0) {
      gf__plan_warn(p,
                    "Node %s: GPU memory unknown (no nvidia.com/gpu.memory "
                    "label): left out of the what-if with its pods",
                    n->name);
      continue;
    }
    gf_gpu_spec specs[GF_MAX_GPUS_PER_NODE];
    memset(specs, 0, sizeof(specs));
    for (uint32_t g = 0; g < n->ngpus; g++) {
      specs[g].model = n->model[0] ? n->model : "unknown";
      specs[g].mem_bytes = n->gpu_mem_mib << 20;
      specs[g].numa_node = -1;
    }
    /* A node that lists no cpu or memory (a hand-written snapshot): not
     * a constraint, rather than a node nothing fits on. */
    int64_t cpu = n->cpu_milli, mem = n->mem_bytes;
    if (!cpu || !mem)
      gf__plan_warn(p,
                    "Node %s: no cpu or memory in status.allocatable: not a "
                    "constraint in the what-if",
                    n->name);
    if (!cpu)
      cpu = UNKNOWN_CAPACITY;
    if (!mem)
      mem = UNKNOWN_CAPACITY;
    gf_diag nd = {""};
    int ni = gf_cluster_add_node(c, n->name, cpu, mem, specs, n->ngpus, &nd);
    if (ni < 0)
      return gf_diag_set(d, ni, "what-if: Node %s: %s", n->name, nd.msg);
    cidx[i] = ni;
    price[ni] = n->price;
  }
  return 0;
}

/* The what-if's item for one pod on its node today: it->whole asks as a
 * cluster without sharing would (whole GPUs), it->share as the plan would
 * (its recommended share, or today's share when it is kept). */
static void fill_item(const gf_plan *p, gf_cluster *c, const gf__ppod *pod,
                      const gf__pnode *node, const gf_plan_workload *w,
                      item *it) {
  it->pod = pod;
  gf_request *r = &it->whole;
  memset(r, 0, sizeof(*r));
  r->cpu_milli = pod->cpu_milli;
  r->mem_bytes = pod->mem_bytes;
  int mid =
      gf_cluster_model_id(c, node->model[0] ? node->model : "unknown", false);
  r->model_mask = mid >= 0 ? 1ull << mid : 0;
  r->mode = GF_MODE_SHARED;
  uint32_t g = pod->ngpus;
  if (pod->kind == GF_PLAN_REQ_MIG)
    g = (uint32_t)ceil(pod->held - 1e-9);
  r->gpu_count = g ? g : 1;
  if (r->gpu_count > node->ngpus)
    r->gpu_count = node->ngpus;
  r->gpu_milli = GF_GPU_MILLI;
  r->compute_pct = 100;
  it->share = *r;
  it->need_mem = node->gpu_mem_mib << 20;
  if (w->mem_peak_mib >= 0) {
    double h = 1.0 + p->opt.headroom_pct / 100.0;
    int64_t mib = (int64_t)(ceil(w->mem_peak_mib * h / 256.0) * 256.0);
    if (mib < 256)
      mib = 256;
    if (mib < node->gpu_mem_mib) /* never more than it runs on today */
      it->need_mem = mib << 20;
  }
  if (w->action == GF_PLAN_SHARE) {
    it->share.gpu_count = 1;
    it->share.gpu_milli = w->rec_compute * 10;
    it->share.compute_pct = w->rec_compute;
    it->share.gpu_mem_bytes = w->rec_mem_mib << 20;
  } else if (pod->ngpus == 1 && pod->held < 1 - 1e-9 &&
             (pod->frac > 0 || pod->mem_mib > 0)) {
    /* kept, and sharing a GPU today (no usage to recommend from, say):
     * it keeps today's share, not a whole GPU */
    it->share.gpu_count = 1;
    it->share.gpu_milli = (int32_t)lround(pod->frac * GF_GPU_MILLI);
    it->share.compute_pct = (it->share.gpu_milli + 9) / 10;
    it->share.gpu_mem_bytes = (int64_t)ceil(pod->mem_mib) << 20;
  }
}

int gf__plan_whatif(gf_plan *p, gf_diag *d) {
  int rc = GF_ENOMEM;
  gf_cluster *c = gf_cluster_new();
  int *cidx = gf__malloc((p->nnodes ? p->nnodes : 1) * sizeof(*cidx));
  double *price = gf__malloc((p->nnodes ? p->nnodes : 1) * sizeof(*price));
  item *items = gf__calloc(p->npods ? p->npods : 1, sizeof(*items));
  const gf_plan_workload **wl_of =
      gf__calloc(p->npods ? p->npods : 1, sizeof(*wl_of));
  if (!c || !cidx || !price || !items || !wl_of)
    goto out;
  if ((rc = add_nodes(p, c, cidx, price, d)))
    goto out;
  for (size_t w = 0; w < p->nwls; w++)
    for (size_t k = 0; k < p->wls[w].npods; k++)
      wl_of[p->wls[w].pods[k]] = &p->wls[w].pub;
  size_t n = 0;
  uint32_t skipped = 0;
  for (size_t i = 0; i < p->npods; i++) {
    const gf__ppod *pod = &p->pods[i];
    const gf_plan_workload *w = wl_of[i];
    if (!w)
      continue;
    if (pod->node_idx < 0 || cidx[pod->node_idx] < 0) {
      skipped++;
      continue;
    }
    const gf__pnode *node = &p->nodes[pod->node_idx];
    fill_item(p, c, pod, node, w, &items[n]);
    n++;
  }
  if (skipped)
    gf__plan_warn(p,
                  "what-if: %u GPU pods left out (their node is not in the "
                  "snapshot or has no GPU memory figure)",
                  skipped);
  p->nwhatif = 0;
  if (!n) {
    gf__plan_warn(p, "what-if: no GPU pod to place");
    rc = 0;
    goto out;
  }
  qsort(items, n, sizeof(*items), cmp_item);
  static const char *const policies[3] = {"whole", "fgd", "gpufrac"};
  for (int k = 0; k < 3; k++) {
    const gf__ppod *first = NULL;
    if ((rc = replay(c, price, items, n, k > 0, policies[k], &p->whatif[k],
                     &first, d)))
      goto out;
    p->nwhatif++;
    uint32_t un = p->whatif[k].pods_unplaced;
    if (un)
      gf__plan_warn(
          p, "what-if %s: %u pod%s not placed (the first: Pod %s/%s): %s",
          policies[k], un, un == 1 ? "" : "s", first->ns, first->name,
          k == 0 ? "asked as whole GPUs, as a cluster without sharing would "
                   "ask, they need more GPUs of their model than the nodes "
                   "have (today they share)"
                 : "its request fits no GPU of its model next to the pods "
                   "placed before it");
  }
  for (int k = 0; k < 3 && p->nftypes; k++) {
    if (!(p->fleet[k] = gf__calloc(p->nftypes, sizeof(*p->fleet[k])))) {
      rc = gf_diag_set(d, GF_ENOMEM, "fleet what-if: out of memory");
      goto out;
    }
    if ((rc = fleet(p, items, n, k > 0, policies[k], &p->whatif[k], p->fleet[k],
                    d)))
      goto out;
  }
  double base_money = p->whatif[0].saved_per_month;
  for (int k = 0; k < 3; k++) {
    gf_plan_whatif *w = &p->whatif[k];
    w->gpus_freed = (int32_t)p->whatif[0].gpus_needed - (int32_t)w->gpus_needed;
    w->saved_per_month = base_money - w->saved_per_month;
  }
  rc = 0;
out:
  gf__free(wl_of);
  gf__free(items);
  gf__free(price);
  gf__free(cidx);
  gf_cluster_free(c);
  return rc;
}
