/*
 * The FGD fragment measure and its typical-pod set.  See gpufrac/frag.h for
 * the definition; the arithmetic (double accumulation per bucket, in typical
 * pod order) follows the reference simulator so that truncated scores agree.
 */
#include "gpufrac/frag.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"

/* ---- typical pods ----------------------------------------------------- */

/* Orders shapes ascending by (cpu, share, count, tag). */
static int shape_cmp(const gf_typical_pod *a, const gf_typical_pod *b) {
  if (a->cpu_milli != b->cpu_milli)
    return a->cpu_milli < b->cpu_milli ? -1 : 1;
  if (a->gpu_milli != b->gpu_milli)
    return a->gpu_milli < b->gpu_milli ? -1 : 1;
  if (a->gpu_count != b->gpu_count)
    return a->gpu_count < b->gpu_count ? -1 : 1;
  if (a->tag != b->tag)
    return a->tag < b->tag ? -1 : 1;
  return 0;
}

static int shape_qsort(const void *a, const void *b) { return shape_cmp(a, b); }

/* Descending count; ties by descending shape. */
static int popularity_qsort(const void *pa, const void *pb) {
  const gf_typical_pod *a = pa, *b = pb;
  if (a->count != b->count)
    return a->count > b->count ? -1 : 1;
  return -shape_cmp(a, b);
}

int gf_typical_build(const gf_request *reqs, const uint32_t *tags, size_t n,
                     double threshold_pct, bool include_cpu,
                     gf_typical_set *out) {
  if (n == 0)
    return GF_EINVAL;
  gf_typical_pod *all = gf__calloc(n, sizeof(*all));
  if (!all)
    return GF_ENOMEM;
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    const gf_request *r = &reqs[i];
    if (r->gpu_count == 0 && !include_cpu)
      continue;
    gf_typical_pod *t = &all[m++];
    t->cpu_milli = r->cpu_milli;
    t->gpu_milli = r->gpu_count ? r->gpu_milli : 0;
    t->gpu_count = r->gpu_count;
    t->model_mask = r->gpu_count ? r->model_mask : 0;
    t->tag = (tags && r->gpu_count) ? tags[i] : 0;
    if (!tags && r->gpu_count)
      t->tag = (uint32_t)(r->model_mask ^ (r->model_mask >> 32));
    t->count = 1;
  }
  if (m == 0) {
    gf__free(all);
    return GF_EINVAL;
  }
  /* Group equal shapes. */
  qsort(all, m, sizeof(*all), shape_qsort);
  size_t k = 0;
  for (size_t i = 0; i < m; i++) {
    if (k > 0 && shape_cmp(&all[k - 1], &all[i]) == 0)
      all[k - 1].count++;
    else
      all[k++] = all[i];
  }
  qsort(all, k, sizeof(*all), popularity_qsort);

  const double total = (double)m;
  const double expected = threshold_pct * total / 100.0;
  double cum = 0;
  size_t taken = 0;
  while (cum < expected && taken < k) {
    cum += all[taken].count;
    all[taken].p = all[taken].count / total;
    taken++;
  }
  if (taken < k) {
    double share = cum / total;
    for (size_t i = 0; i < taken; i++)
      all[i].p = all[i].p / share;
  }
  out->pods = all;
  out->n = taken;
  return 0;
}

void gf_typical_release(gf_typical_set *t) {
  gf__free(t->pods);
  t->pods = NULL;
  t->n = 0;
}

/* ---- the measure -------------------------------------------------------- */

void gf_frag_state(const gf_typical_set *t, uint64_t models, int64_t cpu_left,
                   const int32_t *left, uint32_t ngpus, gf_frag *out) {
  memset(out, 0, sizeof(*out));
  int64_t idle = 0;
  for (uint32_t g = 0; g < ngpus; g++)
    idle += left[g];
  const double didle = (double)idle;
  for (size_t j = 0; j < t->n; j++) {
    const gf_typical_pod *r = &t->pods[j];
    const double p = r->p;
    if (p < 0 || p > 1)
      continue;
    int cls;
    if (r->gpu_milli == 0) {
      cls = cpu_left >= r->cpu_milli ? GF_FRAG_XL : GF_FRAG_XR;
    } else if (ngpus == 0 || (r->model_mask && !(r->model_mask & models))) {
      cls = GF_FRAG_NA;
    } else {
      uint32_t fit = 0;
      int64_t small = 0;
      for (uint32_t g = 0; g < ngpus; g++) {
        if (left[g] >= r->gpu_milli)
          fit++;
        else
          small += left[g];
      }
      bool gpu_ok = fit >= r->gpu_count;
      bool cpu_ok = cpu_left >= r->cpu_milli;
      if (gpu_ok && cpu_ok) {
        out->b[GF_FRAG_Q2] += p * (double)small;
        out->b[GF_FRAG_Q3] += p * (double)(idle - small);
        continue;
      }
      cls = gpu_ok ? GF_FRAG_Q4 : (cpu_ok ? GF_FRAG_Q2 : GF_FRAG_Q1);
    }
    out->b[cls] += p * didle;
  }
}

void gf_node_gpu_left(const gf_node *n, int32_t *left) {
  for (uint32_t g = 0; g < n->ngpus; g++)
    left[g] = n->gpus[g].exclusive ? 0 : GF_GPU_MILLI - n->gpus[g].milli_used;
}

void gf_frag_node(const gf_typical_set *t, const gf_node *n, gf_frag *out) {
  int32_t left[GF_MAX_GPUS_PER_NODE];
  gf_node_gpu_left(n, left);
  gf_frag_state(t, n->model_mask, n->cpu_milli - n->cpu_used, left, n->ngpus,
                out);
}

double gf_frag_amount(const gf_frag *f) {
  double s = 0;
  for (int b = 0; b < GF_FRAG_NBUCKETS; b++)
    if (b != GF_FRAG_Q3)
      s += f->b[b];
  return s;
}

double gf_frag_idle(const gf_frag *f) {
  double s = 0;
  for (int b = 0; b < GF_FRAG_NBUCKETS; b++)
    s += f->b[b];
  return s;
}

/* ---- per-node cache ----------------------------------------------------- */

struct gf_frag_tracker {
  const gf_typical_set *t;
  struct entry {
    uint64_t version; /* node version + 1; 0 = never computed */
    gf_frag f;
  } * e;
  uint32_t n;
};

gf_frag_tracker *gf_frag_tracker_new(const gf_typical_set *t) {
  gf_frag_tracker *k = gf__calloc(1, sizeof(*k));
  if (k)
    k->t = t;
  return k;
}

void gf_frag_tracker_free(gf_frag_tracker *k) {
  if (!k)
    return;
  gf__free(k->e);
  gf__free(k);
}

const gf_frag *gf_frag_tracker_node(gf_frag_tracker *k, const gf_cluster *c,
                                    uint32_t i) {
  uint32_t nn = gf_cluster_nnodes(c);
  if (i >= nn)
    return NULL;
  if (nn > k->n) {
    struct entry *e = gf__realloc(k->e, nn * sizeof(*e));
    if (!e)
      return NULL;
    memset(e + k->n, 0, (nn - k->n) * sizeof(*e));
    k->e = e;
    k->n = nn;
  }
  const gf_node *node = gf_cluster_node(c, i);
  struct entry *e = &k->e[i];
  if (e->version != node->version + 1) {
    gf_frag_node(k->t, node, &e->f);
    e->version = node->version + 1;
  }
  return &e->f;
}

int gf_frag_tracker_cluster(gf_frag_tracker *k, const gf_cluster *c,
                            gf_frag *out) {
  memset(out, 0, sizeof(*out));
  uint32_t nn = gf_cluster_nnodes(c);
  for (uint32_t i = 0; i < nn; i++) {
    const gf_frag *f = gf_frag_tracker_node(k, c, i);
    if (!f)
      return GF_ENOMEM;
    for (int b = 0; b < GF_FRAG_NBUCKETS; b++)
      out->b[b] += f->b[b];
  }
  return 0;
}
