/*
 * From nodes, pods and usage series to the plan's tables: what each pod
 * holds and uses, per workload / namespace / node type, prices, and the
 * recommendation per workload.  The formulas are docs/plan.md's.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "internal.h"

const char *gf_plan_req_name(gf_plan_req_kind k) {
  switch (k) {
  case GF_PLAN_REQ_NONE:
    return "none";
  case GF_PLAN_REQ_WHOLE:
    return "whole";
  case GF_PLAN_REQ_MIG:
    return "mig";
  case GF_PLAN_REQ_HAMI:
    return "hami";
  case GF_PLAN_REQ_KAI:
    return "kai";
  case GF_PLAN_REQ_GPUFRAC:
    return "gpufrac";
  case GF_PLAN_REQ_MIXED:
    return "mixed";
  }
  return "?";
}

/* Indexed by bit number: one name for every GF_PLAN_FLAG_* bit (the
 * report, the JSON and the patch print them). */
static const char *const flag_names[] = {
    "no-data",   "few-samples",    "spiky",       "no-util",
    "multi-gpu", "unknown-memory", "needs-whole", "mixed-models"};
_Static_assert(sizeof(flag_names) / sizeof(flag_names[0]) == GF_PLAN_NFLAGS,
               "a GF_PLAN_FLAG_* bit without a name");

const char *gf_plan_flag_name(unsigned i) {
  return i < GF_PLAN_NFLAGS ? flag_names[i] : NULL;
}

void gf_plan_options_init(gf_plan_options *o) {
  memset(o, 0, sizeof(*o));
  o->headroom_pct = GF_PLAN_DEFAULT_HEADROOM;
  o->min_samples = GF_PLAN_DEFAULT_MIN_SAMPLES;
}

/* ---- prices --------------------------------------------------------------*/

/* USD per GPU-hour, rough on-demand list prices; first match wins (more
 * specific names first: "A100" before "A10", "L40S" before "L4"). */
static const struct price_row {
  const char *contains;
  int64_t min_mem_mib;
  double price;
} price_table[] = {
    {"H200", 0, 4.50}, {"H100", 0, 3.50}, {"A100", 60000, 2.50},
    {"A100", 0, 1.80}, {"L40S", 0, 1.50}, {"L40", 0, 1.30},
    {"A10", 0, 1.00},  {"L4", 0, 0.70},   {"V100", 0, 1.20},
    {"T4", 0, 0.35},   {"P100", 0, 0.60},
};
#define DEFAULT_PRICE 1.00

static int parse_price(const char *s, size_t n, double *out, gf_diag *d) {
  char buf[64];
  if (n == 0 || n >= sizeof(buf))
    return gf_diag_set(d, GF_EINVAL, "--price: '%.*s' is not a price",
                       (int)(n < 60 ? n : 60), s);
  memcpy(buf, s, n);
  buf[n] = '\0';
  char *end;
  errno = 0;
  double x = strtod(buf, &end);
  if (end == buf || *end || errno || !isfinite(x) || x < 0 || x > 1e6)
    return gf_diag_set(d, GF_EINVAL,
                       "--price: '%s' is not a price per GPU-hour (a number "
                       ">= 0)",
                       buf);
  *out = x;
  return 0;
}

int gf_plan_price(const char *prices, const char *product, int64_t mem_mib,
                  double *out, gf_diag *d) {
  if (!product)
    product = "";
  if (prices && prices[0]) {
    if (!strchr(prices, '='))
      return parse_price(prices, strlen(prices), out, d);
    const char *s = prices;
    while (*s) {
      const char *comma = strchr(s, ',');
      size_t len = comma ? (size_t)(comma - s) : strlen(s);
      const char *eq = memchr(s, '=', len);
      if (!eq || eq == s)
        return gf_diag_set(d, GF_EINVAL,
                           "--price: '%.*s': want MODEL=PRICE (e.g. "
                           "A100=2.1,T4=0.4) or one price for all",
                           (int)len, s);
      double x = 0;
      int rc = parse_price(eq + 1, len - (size_t)(eq + 1 - s), &x, d);
      if (rc)
        return rc;
      char key[64];
      size_t kl = (size_t)(eq - s);
      if (kl >= sizeof(key))
        return gf_diag_set(d, GF_EINVAL, "--price: model name too long");
      memcpy(key, s, kl);
      key[kl] = '\0';
      if (gf__plan_icontains(product, key)) {
        *out = x;
        return 0;
      }
      s += len;
      if (*s == ',')
        s++;
    }
  }
  for (size_t i = 0; i < sizeof(price_table) / sizeof(price_table[0]); i++)
    if (gf__plan_icontains(product, price_table[i].contains) &&
        mem_mib >= price_table[i].min_mem_mib) {
      *out = price_table[i].price;
      return 0;
    }
  *out = DEFAULT_PRICE;
  return 0;
}

/* ---- statistics ----------------------------------------------------------*/

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Peak and nearest-rank p95 (sorts s). */
static void stats(gf__series *s, double *peak, double *p95) {
  if (!s->n) {
    *peak = *p95 = -1;
    return;
  }
  qsort(s->v, s->n, sizeof(*s->v), cmp_double);
  *peak = s->v[s->n - 1];
  size_t rank = (size_t)ceil(0.95 * (double)s->n);
  if (rank < 1)
    rank = 1;
  *p95 = s->v[rank - 1];
}

/* ---- matching ------------------------------------------------------------*/

/* Index arrays hold pointers, so the comparators need no context. */
static int cmp_pod_key(const void *a, const void *b) {
  const gf__ppod *x = *(const gf__ppod *const *)a;
  const gf__ppod *y = *(const gf__ppod *const *)b;
  int c = strcmp(x->ns, y->ns);
  return c ? c : strcmp(x->name, y->name);
}

static int cmp_pod_uid(const void *a, const void *b) {
  const gf__ppod *x = *(const gf__ppod *const *)a;
  const gf__ppod *y = *(const gf__ppod *const *)b;
  return strcmp(x->uid, y->uid);
}

static int cmp_node_name(const void *a, const void *b) {
  const gf__pnode *x = *(const gf__pnode *const *)a;
  const gf__pnode *y = *(const gf__pnode *const *)b;
  return strcmp(x->name, y->name);
}

static int cmp_workload_key(const void *a, const void *b) {
  const gf__ppod *x = *(const gf__ppod *const *)a;
  const gf__ppod *y = *(const gf__ppod *const *)b;
  int c = strcmp(x->wkind, y->wkind);
  if (!c)
    c = strcmp(x->ns, y->ns);
  if (!c)
    c = strcmp(x->wname, y->wname);
  return c ? c : strcmp(x->name, y->name);
}

static int match_nodes(gf_plan *p) {
  gf__pnode **idx = gf__malloc((p->nnodes ? p->nnodes : 1) * sizeof(*idx));
  if (!idx)
    return GF_ENOMEM;
  for (size_t i = 0; i < p->nnodes; i++)
    idx[i] = &p->nodes[i];
  qsort(idx, p->nnodes, sizeof(*idx), cmp_node_name);
  for (size_t i = 0; i < p->npods; i++) {
    gf__ppod *pod = &p->pods[i];
    pod->node_idx = -1;
    if (!pod->node[0])
      continue;
    size_t lo = 0, hi = p->nnodes;
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      int c = strcmp(idx[mid]->name, pod->node);
      if (c == 0) {
        pod->node_idx = (int)(idx[mid] - p->nodes);
        break;
      }
      if (c < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
  }
  gf__free(idx);
  return 0;
}

static int match_usage(gf_plan *p) {
  size_t np = p->npods ? p->npods : 1;
  gf__ppod **idx = gf__malloc(np * sizeof(*idx));
  gf__ppod **uidx = gf__malloc(np * sizeof(*uidx));
  if (!idx || !uidx) {
    gf__free(idx);
    gf__free(uidx);
    return GF_ENOMEM;
  }
  for (size_t i = 0; i < p->npods; i++)
    idx[i] = uidx[i] = &p->pods[i];
  qsort(idx, p->npods, sizeof(*idx), cmp_pod_key);
  qsort(uidx, p->npods, sizeof(*uidx), cmp_pod_uid);
  size_t orphans = 0;
  int rc = 0;
  for (size_t u = 0; u < p->nuseries; u++) {
    const gf__useries *s = &p->useries[u];
    size_t lo = 0, hi = p->npods;
    gf__ppod *hit = NULL;
    gf__ppod **in = s->ns ? idx : uidx;
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      const gf__ppod *m = in[mid];
      int c = s->ns ? strcmp(m->ns, s->ns) : strcmp(m->uid, s->pod);
      if (!c && s->ns)
        c = strcmp(m->name, s->pod);
      if (c == 0) {
        hit = in[mid];
        break;
      }
      if (c < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (!hit) {
      orphans++;
      continue;
    }
    gf__series *dst = s->metric == GF__M_FB_USED     ? &hit->mem
                      : s->metric == GF__M_GPU_UTIL  ? &hit->util
                      : s->metric == GF__M_GR_ACTIVE ? &hit->gr
                      : s->metric == GF__M_GF_MEM    ? &hit->gmem
                                                     : &hit->gutil;
    double scale = s->metric == GF__M_GR_ACTIVE || s->metric == GF__M_GF_UTIL
                       ? 100.0
                   : s->metric == GF__M_GF_MEM ? 1.0 / 1048576.0
                                               : 1.0;
    for (size_t j = 0; j < s->s.n; j++)
      if ((rc = gf__series_push(dst, s->s.v[j] * scale)))
        goto out;
  }
  if (orphans)
    gf__plan_warn(p,
                  "usage: %zu series name pods that are not in the snapshot "
                  "(left out)",
                  orphans);
  if (p->skipped_series)
    gf__plan_warn(p, "usage: %u series have no pod label (left out)",
                  p->skipped_series);
out:
  gf__free(idx);
  gf__free(uidx);
  return rc;
}

/* ---- per pod -------------------------------------------------------------*/

typedef struct podstat {
  double mem_peak, mem_p95, c_peak, c_p95;
  size_t mem_n;
  bool has_c;
} podstat;

static void pod_held(gf_plan *p, gf__ppod *pod) {
  const gf__pnode *n = pod->node_idx >= 0 ? &p->nodes[pod->node_idx] : NULL;
  int64_t gmem = n ? n->gpu_mem_mib : 0;
  double f = 1;
  switch (pod->kind) {
  case GF_PLAN_REQ_NONE:
  case GF_PLAN_REQ_MIXED:
    pod->held = 0;
    return;
  case GF_PLAN_REQ_WHOLE:
    pod->held = pod->ngpus;
    return;
  case GF_PLAN_REQ_MIG: {
    double slices = n && strstr(n->model, "A30") ? 4.0 : 7.0;
    f = pod->mig_g / slices;
    pod->held = pod->ngpus * (f > 1 ? 1 : f);
    return;
  }
  case GF_PLAN_REQ_HAMI:
  case GF_PLAN_REQ_KAI:
  case GF_PLAN_REQ_GPUFRAC:
    f = pod->frac;
    if (pod->mem_mib > 0) {
      if (gmem > 0) {
        double m = pod->mem_mib / (double)gmem;
        if (m > f)
          f = m;
      } else {
        pod->whole_fallback = true;
        f = 1;
        gf__plan_warn(p,
                      "Pod %s/%s: asks for %.0f MiB of GPU memory on node "
                      "'%s', whose GPU memory is unknown (no "
                      "nvidia.com/gpu.memory label): counted as whole GPUs",
                      pod->ns, pod->name, pod->mem_mib, pod->node);
      }
    }
    if (f <= 0 || f > 1)
      f = 1;
    pod->held = pod->ngpus * f;
    return;
  }
}

static void pod_usage(gf_plan *p, gf__ppod *pod, podstat *st) {
  /* gpufrac's per-container series, where there are any, over DCGM's
   * per-device ones (which on a shared GPU carry everyone's use). */
  gf__series *mem = pod->gmem.n ? &pod->gmem : &pod->mem;
  stats(mem, &st->mem_peak, &st->mem_p95);
  st->mem_n = mem->n;
  gf__series *c = pod->gutil.n ? &pod->gutil
                  : pod->gr.n  ? &pod->gr
                               : &pod->util;
  st->has_c = c->n > 0;
  stats(c, &st->c_peak, &st->c_p95);
  pod->used = -1; /* unmeasured */
  if (!st->mem_n)
    return;
  const gf__pnode *n = pod->node_idx >= 0 ? &p->nodes[pod->node_idx] : NULL;
  if (!n || n->gpu_mem_mib <= 0) {
    gf__plan_warn(p,
                  "Pod %s/%s: has usage but the GPU memory of its node is "
                  "unknown: left unmeasured",
                  pod->ns, pod->name);
    return;
  }
  double f = st->mem_peak / (double)n->gpu_mem_mib;
  if (st->has_c && st->c_p95 / 100.0 > f)
    f = st->c_p95 / 100.0;
  double used = pod->ngpus * f;
  pod->used = used > pod->held ? pod->held : used;
}

/* ---- tables --------------------------------------------------------------*/

static double month(double gpus, double price) {
  return gpus * price * GF_PLAN_HOURS_PER_MONTH;
}

/* Adds pod's GPUs to the figures of a namespace, node type or the totals:
 * held without usage data when it has none, else used and wasted. */
static void add_use(const gf__ppod *pod, double *unmeasured, double *used,
                    double *waste, double *waste_per_month) {
  if (pod->used < 0) {
    *unmeasured += pod->held;
    return;
  }
  *used += pod->used;
  *waste += pod->held - pod->used;
  *waste_per_month += month(pod->held - pod->used, pod->price);
}

static int cmp_wl(const void *a, const void *b) {
  const gf_plan_workload *x = &((const gf__wl *)a)->pub;
  const gf_plan_workload *y = &((const gf__wl *)b)->pub;
  if (x->waste_gpus != y->waste_gpus)
    return x->waste_gpus > y->waste_gpus ? -1 : 1;
  if (x->gpus_held != y->gpus_held)
    return x->gpus_held > y->gpus_held ? -1 : 1;
  int c = strcmp(x->ns, y->ns);
  if (!c)
    c = strcmp(x->kind, y->kind);
  return c ? c : strcmp(x->name, y->name);
}

static int cmp_ns(const void *a, const void *b) {
  const gf_plan_group *x = a, *y = b;
  if (x->waste_gpus != y->waste_gpus)
    return x->waste_gpus > y->waste_gpus ? -1 : 1;
  if (x->gpus_held != y->gpus_held)
    return x->gpus_held > y->gpus_held ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int cmp_type(const void *a, const void *b) {
  const gf_plan_group *x = a, *y = b;
  if (x->gpus != y->gpus)
    return x->gpus > y->gpus ? -1 : 1;
  return strcmp(x->name, y->name);
}

static gf_plan_group *find_group(gf_plan_group *g, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(g[i].name, name) == 0)
      return &g[i];
  return NULL;
}

static void recommend(const gf_plan *p, gf_plan_workload *w, bool any_c,
                      bool some_unmeasured) {
  double h = 1.0 + p->opt.headroom_pct / 100.0;
  w->action = GF_PLAN_KEEP;
  w->rec_mem_mib = 0;
  w->rec_compute = 0;
  w->rec_gpus = w->pods ? w->gpus_held / w->pods : 0;
  if (w->mem_peak_mib < 0) {
    w->flags |= GF_PLAN_FLAG_NO_DATA;
    return;
  }
  if (some_unmeasured || w->samples < p->opt.min_samples)
    w->flags |= GF_PLAN_FLAG_FEW_SAMPLES;
  if (w->mem_peak_mib > 1.5 * w->mem_p95_mib)
    w->flags |= GF_PLAN_FLAG_SPIKY;
  if (!any_c)
    w->flags |= GF_PLAN_FLAG_NO_UTIL;
  if (w->gpus_per_pod > 1) {
    w->flags |= GF_PLAN_FLAG_MULTI_GPU;
    return;
  }
  if (w->gpu_mem_mib <= 0) {
    w->flags |= GF_PLAN_FLAG_UNKNOWN_MEM;
    return;
  }
  double mem = ceil(w->mem_peak_mib * h / 256.0) * 256.0;
  if (mem < 256)
    mem = 256;
  double c = any_c ? ceil(w->compute_p95_pct * h)
                   : ceil(100.0 * mem / (double)w->gpu_mem_mib);
  if (c < 1)
    c = 1;
  if (mem >= (double)w->gpu_mem_mib || c >= 100) {
    w->flags |= GF_PLAN_FLAG_NEEDS_WHOLE;
    w->rec_gpus = 1;
    return;
  }
  w->action = GF_PLAN_SHARE;
  w->rec_mem_mib = (int64_t)mem;
  w->rec_compute = (int32_t)c;
  double f = mem / (double)w->gpu_mem_mib;
  w->rec_gpus = c / 100.0 > f ? c / 100.0 : f;
}

static int build_workloads(gf_plan *p, podstat *st) {
  size_t n = 0;
  gf__ppod **idx = gf__malloc((p->npods ? p->npods : 1) * sizeof(*idx));
  if (!idx)
    return GF_ENOMEM;
  for (size_t i = 0; i < p->npods; i++)
    if (p->pods[i].holding && p->pods[i].kind != GF_PLAN_REQ_NONE)
      idx[n++] = &p->pods[i];
  qsort(idx, n, sizeof(*idx), cmp_workload_key);
  p->wls = gf__calloc(n ? n : 1, sizeof(*p->wls));
  if (!p->wls) {
    gf__free(idx);
    return GF_ENOMEM;
  }
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    const gf__ppod *a = idx[i];
    while (j < n) {
      const gf__ppod *b = idx[j];
      if (strcmp(a->wkind, b->wkind) || strcmp(a->ns, b->ns) ||
          strcmp(a->wname, b->wname))
        break;
      j++;
    }
    gf__wl *wl = &p->wls[p->nwls];
    wl->pods = gf__malloc((j - i) * sizeof(*wl->pods));
    if (!wl->pods) {
      gf__free(idx);
      return GF_ENOMEM;
    }
    p->nwls++;
    gf_plan_workload *w = &wl->pub;
    w->kind = a->wkind;
    w->ns = a->ns;
    w->name = a->wname;
    w->request = a->kind;
    const gf__pnode *node = a->node_idx >= 0 ? &p->nodes[a->node_idx] : NULL;
    w->gpu_model = node ? node->model : "";
    w->gpu_mem_mib = node ? node->gpu_mem_mib : 0;
    w->mem_peak_mib = w->mem_p95_mib = -1;
    w->compute_peak_pct = w->compute_p95_pct = -1;
    w->samples = UINT32_MAX;
    bool any_c = false, unmeasured = false, measured_any = false;
    for (size_t k = i; k < j; k++) {
      const gf__ppod *pod = idx[k];
      size_t pi = (size_t)(pod - p->pods);
      const podstat *s = &st[pi];
      wl->pods[wl->npods++] = pi;
      w->pods++;
      if (pod->kind != w->request)
        w->request = GF_PLAN_REQ_MIXED;
      if (pod->ngpus > w->gpus_per_pod)
        w->gpus_per_pod = pod->ngpus;
      const gf__pnode *pn =
          pod->node_idx >= 0 ? &p->nodes[pod->node_idx] : NULL;
      if (pn && pn->gpu_mem_mib != w->gpu_mem_mib) {
        w->flags |= GF_PLAN_FLAG_MIXED_MODELS;
        if (pn->gpu_mem_mib < w->gpu_mem_mib) {
          w->gpu_mem_mib = pn->gpu_mem_mib;
          w->gpu_model = pn->model;
        }
      }
      w->gpus_held += pod->held;
      if (pod->used < 0) {
        unmeasured = true;
        w->samples = 0;
        continue;
      }
      measured_any = true;
      w->gpus_used += pod->used;
      w->waste_gpus += pod->held - pod->used;
      w->waste_per_month += month(pod->held - pod->used, pod->price);
      if (s->mem_n < w->samples)
        w->samples = (uint32_t)s->mem_n;
      if (s->mem_peak > w->mem_peak_mib)
        w->mem_peak_mib = s->mem_peak;
      if (s->mem_p95 > w->mem_p95_mib)
        w->mem_p95_mib = s->mem_p95;
      if (s->has_c) {
        any_c = true;
        if (s->c_peak > w->compute_peak_pct)
          w->compute_peak_pct = s->c_peak;
        if (s->c_p95 > w->compute_p95_pct)
          w->compute_p95_pct = s->c_p95;
      }
    }
    if (!measured_any)
      w->samples = 0;
    w->measured = !unmeasured;
    recommend(p, w, any_c, unmeasured);
    i = j;
  }
  gf__free(idx);
  qsort(p->wls, p->nwls, sizeof(*p->wls), cmp_wl);
  return 0;
}

static int build_groups(gf_plan *p) {
  p->nss = gf__calloc(p->npods ? p->npods : 1, sizeof(*p->nss));
  p->types = gf__calloc(p->nnodes ? p->nnodes : 1, sizeof(*p->types));
  if (!p->nss || !p->types)
    return GF_ENOMEM;
  for (size_t i = 0; i < p->nnodes; i++) {
    const gf__pnode *n = &p->nodes[i];
    if (!n->ngpus)
      continue;
    gf_plan_group *g = find_group(p->types, p->ntypes, n->type);
    if (!g) {
      g = &p->types[p->ntypes++];
      g->name = n->type;
      g->gpu_model = n->model;
      g->price_per_gpu_hour = n->price;
    }
    g->nodes++;
    g->gpus += n->ngpus;
  }
  for (size_t i = 0; i < p->npods; i++) {
    const gf__ppod *pod = &p->pods[i];
    if (!pod->holding || pod->kind == GF_PLAN_REQ_NONE)
      continue;
    gf_plan_group *g = find_group(p->nss, p->nnss, pod->ns);
    if (!g) {
      g = &p->nss[p->nnss++];
      g->name = pod->ns;
      g->gpu_model = "";
    }
    gf_plan_group *t =
        pod->node_idx >= 0
            ? find_group(p->types, p->ntypes, p->nodes[pod->node_idx].type)
            : NULL;
    for (int k = 0; k < 2; k++) {
      gf_plan_group *x = k ? t : g;
      if (!x)
        continue;
      x->pods++;
      x->gpus_held += pod->held;
      add_use(pod, &x->gpus_unmeasured, &x->gpus_used, &x->waste_gpus,
              &x->waste_per_month);
    }
  }
  qsort(p->nss, p->nnss, sizeof(*p->nss), cmp_ns);
  qsort(p->types, p->ntypes, sizeof(*p->types), cmp_type);
  return 0;
}

int gf_plan_run(gf_plan *p, const gf_plan_options *o, gf_diag *d) {
  if (!p)
    return gf_diag_set(d, GF_EINVAL, "gf_plan_run: no plan");
  if (p->ran)
    return gf_diag_set(d, GF_ESTATE, "gf_plan_run: already run");
  gf_plan_options def;
  if (!o) {
    gf_plan_options_init(&def);
    o = &def;
  }
  if (!(o->headroom_pct >= 0 && o->headroom_pct <= 1000))
    return gf_diag_set(d, GF_EINVAL, "--headroom %g: a percent in 0..1000",
                       o->headroom_pct);
  double probe;
  int rc = gf_plan_price(o->prices, "", 0, &probe, d);
  if (rc)
    return rc;
  p->opt = *o;
  p->opt.prices = NULL; /* not kept: the caller's string */
  if ((rc = gf__plan_resolve_claims(p)))
    return rc;

  uint32_t gpu_nodes = 0;
  for (size_t i = 0; i < p->nnodes; i++) {
    gf__pnode *n = &p->nodes[i];
    if (!n->ngpus && n->mig_devices)
      gf__plan_warn(p,
                    "Node %s: %u MIG devices but no GPU count "
                    "(nvidia.com/gpu or the label nvidia.com/gpu.count): its "
                    "GPUs are not counted",
                    n->name, n->mig_devices);
    if (!n->ngpus)
      continue;
    gpu_nodes++;
    if ((rc = gf_plan_price(o->prices, n->model, n->gpu_mem_mib, &n->price, d)))
      return rc;
    if (!n->model[0])
      gf__plan_warn(p,
                    "Node %s: %u GPUs of unknown model (no "
                    "nvidia.com/gpu.product label): priced at the default",
                    n->name, n->ngpus);
  }
  for (size_t i = 0; i < p->nftypes; i++) {
    gf__ntype *t = &p->ftypes[i];
    double per_gpu;
    if (t->price_hour < 0) {
      if ((rc =
               gf_plan_price(o->prices, t->model, t->gpu_mem_mib, &per_gpu, d)))
        return rc;
      t->price_hour = per_gpu * t->gpus;
    }
  }
  if (!gpu_nodes)
    return gf_diag_set(d, GF_ENOTFOUND,
                       "no node in the snapshot has GPUs (nvidia.com/gpu "
                       "allocatable or an nvidia.com/gpu.count label); "
                       "%zu nodes, %zu pods read",
                       p->nnodes, p->npods);
  p->ran = true;
  if ((rc = match_nodes(p)) || (rc = match_usage(p)))
    return gf_diag_set(d, rc, "planner: out of memory");

  podstat *st = gf__calloc(p->npods ? p->npods : 1, sizeof(*st));
  if (!st)
    return gf_diag_set(d, GF_ENOMEM, "planner: out of memory");
  gf_plan_totals *t = &p->today;
  memset(t, 0, sizeof(*t));
  t->nodes = (uint32_t)p->nnodes;
  t->gpu_nodes = gpu_nodes;
  t->pods = (uint32_t)p->npods;
  for (size_t i = 0; i < p->nnodes; i++)
    t->gpus += p->nodes[i].ngpus;
  for (size_t i = 0; i < p->npods; i++) {
    gf__ppod *pod = &p->pods[i];
    if (pod->kind == GF_PLAN_REQ_NONE)
      continue;
    if (pod->pending) {
      t->pending_gpu_pods++;
      continue;
    }
    if (!pod->holding)
      continue;
    t->gpu_pods++;
    if (pod->node_idx < 0) {
      gf__plan_warn(p,
                    "Pod %s/%s: on node '%s', which is not in the snapshot: "
                    "priced at the default",
                    pod->ns, pod->name, pod->node);
      pod->price = DEFAULT_PRICE;
      if (o->prices && !strchr(o->prices, '='))
        gf_plan_price(o->prices, "", 0, &pod->price, NULL);
    } else {
      const gf__pnode *n = &p->nodes[pod->node_idx];
      pod->price = n->price;
      if (!n->ngpus)
        gf__plan_warn(p, "Pod %s/%s: asks for GPUs on node %s, which has none",
                      pod->ns, pod->name, n->name);
    }
    pod_held(p, pod);
    pod_usage(p, pod, &st[i]);
    t->gpus_held += pod->held;
    t->held_per_month += month(pod->held, pod->price);
    add_use(pod, &t->gpus_unmeasured, &t->gpus_used, &t->waste_gpus,
            &t->waste_per_month);
  }
  t->gpus_idle = t->gpus > t->gpus_held ? t->gpus - t->gpus_held : 0;
  if (p->skipped_items)
    gf__plan_warn(p, "snapshot: %u items of other kinds skipped",
                  p->skipped_items);
  rc = build_workloads(p, st);
  gf__free(st);
  if (rc || (rc = build_groups(p)))
    return gf_diag_set(d, rc, "planner: out of memory");
  if (!o->no_whatif && (rc = gf__plan_whatif(p, d)))
    return rc;
  return 0;
}

/* ---- accessors -----------------------------------------------------------*/

const gf_plan_totals *gf_plan_today(const gf_plan *p) { return &p->today; }
size_t gf_plan_nworkloads(const gf_plan *p) { return p->nwls; }
const gf_plan_workload *gf_plan_workload_at(const gf_plan *p, size_t i) {
  return i < p->nwls ? &p->wls[i].pub : NULL;
}
size_t gf_plan_nnamespaces(const gf_plan *p) { return p->nnss; }
const gf_plan_group *gf_plan_namespace_at(const gf_plan *p, size_t i) {
  return i < p->nnss ? &p->nss[i] : NULL;
}
size_t gf_plan_nnode_types(const gf_plan *p) { return p->ntypes; }
const gf_plan_group *gf_plan_node_type_at(const gf_plan *p, size_t i) {
  return i < p->ntypes ? &p->types[i] : NULL;
}
size_t gf_plan_nwhatif(const gf_plan *p) { return p->nwhatif; }
const gf_plan_whatif *gf_plan_whatif_at(const gf_plan *p, size_t i) {
  return i < p->nwhatif ? &p->whatif[i] : NULL;
}
size_t gf_plan_nwarnings(const gf_plan *p) { return p->nwarnings; }
const char *gf_plan_warning_at(const gf_plan *p, size_t i) {
  return i < p->nwarnings ? p->warnings[i] : NULL;
}
