/*
 * Trace replay.  See gpufrac/sim.h for the methodology; the comments here
 * only note where the code follows a quirk of the reference on purpose.
 */
#include "gpufrac/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpufrac/engine.h"
#include "gpufrac/error.h"
#include "gpufrac/rng.h"
#include "weights.h"

/* ---- workload ----------------------------------------------------------- */

static int by_name(const void *a, const void *b) {
  const gf_trace_pod *x = *(const gf_trace_pod *const *)a;
  const gf_trace_pod *y = *(const gf_trace_pod *const *)b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x < y ? -1 : x > y); /* stable on file order */
}

/* Indices of pods sorted by name, the order the reference samples from. */
static size_t *name_order(const gf_pod_list *pods) {
  const gf_trace_pod **ptr = malloc(pods->n * sizeof(*ptr));
  size_t *idx = malloc(pods->n * sizeof(*idx));
  if (!ptr || !idx) {
    free(ptr);
    free(idx);
    return NULL;
  }
  for (size_t i = 0; i < pods->n; i++)
    ptr[i] = &pods->pods[i];
  qsort(ptr, pods->n, sizeof(*ptr), by_name);
  for (size_t i = 0; i < pods->n; i++)
    idx[i] = (size_t)(ptr[i] - pods->pods);
  free(ptr);
  return idx;
}

int gf_sim_workload(const gf_pod_list *pods, uint64_t seed, double inflate,
                    int64_t capacity_milli, size_t **order, size_t *n) {
  if (pods->n == 0)
    return GF_EINVAL;
  size_t *sorted = name_order(pods);
  if (!sorted)
    return GF_ENOMEM;
  size_t cap = pods->n * 2, len = pods->n;
  size_t *out = malloc(cap * sizeof(*out));
  if (!out) {
    free(sorted);
    return GF_ENOMEM;
  }
  memcpy(out, sorted, len * sizeof(*out));
  gf_rng rng;
  gf_rng_seed(&rng, seed);
  for (size_t i = len - 1; i > 0; i--) {
    size_t j = (size_t)gf_rng_below(&rng, i + 1);
    size_t t = out[i];
    out[i] = out[j];
    out[j] = t;
  }
  int64_t total = 0;
  for (size_t i = 0; i < len; i++)
    total += gf_request_gpu_demand(&pods->pods[i].req);
  const double target = inflate * (double)capacity_milli;
  /* Up-sampling only; a trace above the target is replayed as it is.  The
   * stop test adds the drawn pod's per-GPU share while the total adds its
   * full demand: the reference's rule, kept for comparable workloads. */
  while ((double)total <= target) {
    size_t pick = sorted[gf_rng_below(&rng, pods->n)];
    const gf_request *r = &pods->pods[pick].req;
    if ((double)(total + (r->gpu_count ? r->gpu_milli : 0)) > target)
      break;
    if (len == cap) {
      cap *= 2;
      size_t *o = realloc(out, cap * sizeof(*o));
      if (!o) {
        free(out);
        free(sorted);
        return GF_ENOMEM;
      }
      out = o;
    }
    out[len++] = pick;
    total += gf_request_gpu_demand(r);
  }
  free(sorted);
  *order = out;
  *n = len;
  return 0;
}

/* ---- typical pods --------------------------------------------------------*/

static int by_spec(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int gf_sim_typical(const gf_pod_list *pods, double threshold_pct,
                   gf_typical_set *out) {
  /* Tag each model constraint by the rank of its text, so shapes tie-break
   * in the order the reference's string comparison gives. */
  const char **specs = malloc((pods->n ? pods->n : 1) * sizeof(*specs));
  uint32_t *tags = malloc((pods->n ? pods->n : 1) * sizeof(*tags));
  gf_request *reqs = malloc((pods->n ? pods->n : 1) * sizeof(*reqs));
  int rc = GF_ENOMEM;
  if (!specs || !tags || !reqs)
    goto out;
  for (size_t i = 0; i < pods->n; i++)
    specs[i] = pods->pods[i].gpu_spec;
  qsort(specs, pods->n, sizeof(*specs), by_spec);
  size_t nd = 0;
  for (size_t i = 0; i < pods->n; i++)
    if (nd == 0 || strcmp(specs[nd - 1], specs[i]) != 0)
      specs[nd++] = specs[i];
  for (size_t i = 0; i < pods->n; i++) {
    const char *key = pods->pods[i].gpu_spec;
    const char **hit = bsearch(&key, specs, nd, sizeof(*specs), by_spec);
    tags[i] = (uint32_t)(hit - specs);
    reqs[i] = pods->pods[i].req;
  }
  rc = gf_typical_build(reqs, tags, pods->n, threshold_pct, true, out);
out:
  free(specs);
  free(tags);
  free(reqs);
  return rc;
}

/* ---- replay --------------------------------------------------------------*/

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Per-percentage accumulators for the discrete curve. */
typedef struct bucket {
  double alloc, held, frag, ratio;
  size_t n;
} bucket;

static void finish_curve(const bucket *b, int nb, int64_t cap,
                         gf_sim_result *out) {
  out->npoints = nb;
  for (int k = 0; k < nb; k++) {
    bucket s = b[k];
    if (s.n == 0) {
      memset(&s, 0, sizeof(s));
      for (int j = k - 1; j <= k + 1; j++) {
        if (j < 0 || j >= nb)
          continue;
        s.alloc += b[j].alloc;
        s.held += b[j].held;
        s.frag += b[j].frag;
        s.ratio += b[j].ratio;
        s.n += b[j].n;
      }
    }
    gf_sim_point *p = &out->curve[k];
    p->present = s.n > 0;
    if (!p->present)
      continue;
    double n = (double)s.n;
    p->alloc_pct = s.alloc / n;
    p->held_pct = s.held / n;
    p->frag_amount_pct = 100.0 * (s.frag / n) / (double)cap;
    p->frag_ratio_pct = s.ratio / n;
  }
}

int gf_sim_run(gf_cluster *c, const gf_pod_list *pods, const gf_sim_config *cfg,
               gf_sim_result *out, gf_diag *d) {
  memset(out, 0, sizeof(*out));
  gf_cluster_reset(c);
  const int64_t cap = gf_cluster_gpu_milli_total(c);
  if (cap <= 0)
    return gf_diag_set(d, GF_EINVAL, "the cluster has no GPUs");
  if (!cfg->typical)
    return gf_diag_set(d, GF_EINVAL, "no typical pods for the frag metrics");
  double t0 = now_us();

  size_t *order = NULL, n = 0;
  double *lat = NULL;
  gf_engine *e = NULL;
  gf_frag_tracker *frag = NULL;
  gf__simw *models = NULL;
  bucket *b = NULL;
  int nb = (int)floor(cfg->inflate * 100.0) + 3;
  if (nb > GF_SIM_MAX_PCT + 1)
    nb = GF_SIM_MAX_PCT + 1;
  int rc = gf_sim_workload(pods, cfg->seed, cfg->inflate, cap, &order, &n);
  if (rc) {
    gf_diag_set(d, rc, "building the workload: %s", gf_strerror(rc));
    goto out;
  }
  gf_engine_config ec = {.policy = cfg->policy,
                         .seed = cfg->seed,
                         .typical = cfg->typical,
                         .shapes = cfg->shapes,
                         .ties = cfg->ties,
                         .no_score_cache = cfg->no_score_cache};
  for (uint32_t i = 0; i < gf_cluster_nnodes(c); i++)
    gf_cluster_node_cache_clear(c, i); /* what an earlier run left */
  if (cfg->models && (rc = gf__simw_new(c, cfg->models, cfg->seed, &models, d)))
    goto out;
  if ((rc = gf_engine_new(c, &ec, &e, d)))
    goto out;
  lat = malloc(n * sizeof(*lat));
  b = calloc((size_t)nb, sizeof(*b));
  frag = gf_frag_tracker_new(cfg->typical);
  if (!lat || !b || !frag) {
    rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
    goto out;
  }

  int64_t arrived = 0, alloc = 0;
  out->first_drop_pct = NAN;
  for (size_t i = 0; i < n; i++) {
    gf_request rq = pods->pods[order[i]].req;
    const gf_request *r = &rq;
    if (models)
      rq.weights = gf__simw_draw(models, r);
    const int64_t demand = gf_request_gpu_demand(r);
    const bool share = r->gpu_count == 1 && r->gpu_milli < GF_GPU_MILLI;
    arrived += demand;
    gf_placement p;
    double t = now_us();
    rc = gf_engine_place(e, r, &p);
    lat[i] = now_us() - t;
    if (rc == 0) {
      out->placed++;
      alloc += demand;
      if (models)
        gf__simw_placed(models, c, p.node, rq.weights, out);
      if (r->gpu_count == 0)
        out->placed_cpu++;
      else if (share)
        out->placed_share++;
      else
        out->placed_whole++;
    } else if (rc == GF_ENOFIT) {
      if (out->failed++ == 0)
        out->first_drop_pct = 100.0 * (double)(arrived - demand) / (double)cap;
      if (r->gpu_count == 0)
        out->failed_cpu++;
      else if (share)
        out->failed_share++;
      else
        out->failed_whole++;
    } else {
      gf_diag_set(d, rc, "pod %s: %s", pods->pods[order[i]].name,
                  gf_strerror(rc));
      goto out;
    }
    gf_frag f;
    if ((rc = gf_frag_tracker_cluster(frag, c, &f))) {
      gf_diag_set(d, rc, "fragmentation: %s", gf_strerror(rc));
      goto out;
    }
    /* Reference: arrived % rounded half to even to an integer. */
    double apct = (double)arrived / (double)cap * 100.0;
    int k = (int)nearbyint(apct);
    if (k >= 0 && k < nb) {
      double idle = gf_frag_idle(&f), amount = gf_frag_amount(&f);
      b[k].alloc += 100.0 * (double)alloc / (double)cap;
      b[k].held += 100.0 * (double)gf_cluster_gpu_milli_used(c) / (double)cap;
      b[k].frag += amount;
      b[k].ratio += idle > 0 ? 100.0 * amount / idle : 0.0;
      b[k].n++;
    }
  }
  out->arrived = n;
  out->has_models = models != NULL;
  out->capacity_milli = cap;
  out->arrived_milli = arrived;
  out->alloc_milli = alloc;
  out->held_milli = gf_cluster_gpu_milli_used(c);
  finish_curve(b, nb, cap, out);
  qsort(lat, n, sizeof(*lat), cmp_double);
  out->decision_us_median =
      n % 2 ? lat[n / 2] : (lat[n / 2 - 1] + lat[n / 2]) / 2.0;
  out->decision_us_p99 = lat[(size_t)ceil(0.99 * (double)n) - 1];
  out->wall_s = (now_us() - t0) / 1e6;
  rc = 0;
out:
  free(order);
  free(lat);
  free(b);
  gf_frag_tracker_free(frag);
  gf_engine_free(e);
  gf__simw_free(models);
  return rc;
}

double gf_sim_unallocated_at(const gf_sim_result *r, int k) {
  if (k < 0 || k >= r->npoints || !r->curve[k].present)
    return NAN;
  return 100.0 - r->curve[k].alloc_pct;
}
