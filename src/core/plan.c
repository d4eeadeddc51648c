/*
 * The packing plan (plan.h): column generation on the configuration LP of
 * bin packing.
 *
 * Primal: minimise sum_p x_p (GPUs) subject to sum_p a_ip x_p >= d_i for
 * every share size i, x >= 0, where a_ip is how many shares of size i
 * pattern p holds.  We solve the dual, max sum_i d_i z_i subject to
 * sum_i a_ip z_i <= 1 for every pattern p, z >= 0, whose origin is feasible
 * (no phase one).  The primal x_p are the reduced costs of the dual's slack
 * variables at the optimum.  A new pattern is worth adding when its value
 * under the duals, sum_i a_ip z_i, exceeds 1; the best one is an unbounded
 * knapsack over the sizes with values z_i, capacity 1000 milli and at most
 * GF__PLAN_MAX_ITEMS shares.
 *
 * The sizes are few (tens) and the patterns that matter are few (tens), so
 * a dense tableau solved afresh after each new pattern, with Bland's rule
 * (no cycling on the many degenerate pivots bin-packing LPs have), is fast
 * enough: milliseconds for the Alibaba traces.
 */
#include "plan.h"

#include <math.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/model.h"

#define EPS 1e-9
/* The least pivot.  After many degenerate pivots, entries that are 0 in
 * exact arithmetic come out as rounding noise of 1e-9 to 1e-8; pivoting on
 * one blows the tableau up (entries of 1e8) and the simplex wanders without
 * converging (with EPS as the least pivot, about one LP of 64 random sizes
 * in 250 failed, and some others ended infeasible).  The smallest pivot the
 * LPs of the traces take is 0.06; of random LPs of 64 sizes, about 1e-5. */
#define PIVOT_EPS 1e-7

typedef struct lp {
  size_t m;      /* size variables z_0..z_{m-1} */
  size_t rows;   /* patterns */
  size_t cols;   /* m + rows slacks */
  double *t;     /* rows x (cols + 1); last column is the right-hand side */
  double *obj;   /* cols + 1; reduced costs, last is -value */
  size_t *basis; /* rows */
} lp;

static double *cell(lp *l, size_t r, size_t c) {
  return &l->t[r * (l->cols + 1) + c];
}

static void pivot(lp *l, size_t pr, size_t pc) {
  const size_t w = l->cols + 1;
  double *row = &l->t[pr * w];
  const double inv = 1.0 / row[pc];
  for (size_t c = 0; c < w; c++)
    row[c] *= inv;
  row[pc] = 1.0;
  for (size_t r = 0; r < l->rows; r++) {
    if (r == pr)
      continue;
    double *o = &l->t[r * w];
    const double f = o[pc];
    if (f == 0)
      continue;
    for (size_t c = 0; c < w; c++)
      o[c] -= f * row[c];
    o[pc] = 0;
  }
  const double f = l->obj[pc];
  if (f != 0) {
    for (size_t c = 0; c < w; c++)
      l->obj[c] -= f * row[c];
    l->obj[pc] = 0;
  }
  l->basis[pr] = pc;
}

/* Solves the dual over the patterns pats[0..rows) with Bland's rule.
 * Returns 0, or GF_EINVAL if it does not converge (should not happen). */
static int solve(lp *l, const double *demand, const gf__plan_pattern *pats,
                 const int16_t *sizes) {
  const size_t w = l->cols + 1;
  memset(l->t, 0, l->rows * w * sizeof(*l->t));
  memset(l->obj, 0, w * sizeof(*l->obj));
  for (size_t r = 0; r < l->rows; r++) {
    for (size_t k = 0; k < pats[r].n; k++)
      for (size_t i = 0; i < l->m; i++)
        if (sizes[i] == pats[r].v[k])
          *cell(l, r, i) += 1.0;
    *cell(l, r, l->m + r) = 1.0;
    *cell(l, r, l->cols) = 1.0;
    l->basis[r] = l->m + r;
  }
  for (size_t i = 0; i < l->m; i++)
    l->obj[i] = -demand[i];

  for (size_t iter = 0; iter < 100000; iter++) {
    size_t pc = l->cols;
    for (size_t c = 0; c < l->cols; c++)
      if (l->obj[c] < -EPS) {
        pc = c;
        break;
      }
    if (pc == l->cols)
      return 0;
    size_t pr = l->rows;
    double best = INFINITY;
    for (size_t r = 0; r < l->rows; r++) {
      const double a = *cell(l, r, pc);
      if (a <= PIVOT_EPS)
        continue;
      const double q = *cell(l, r, l->cols) / a;
      if (pr == l->rows || q < best - EPS ||
          (q <= best + EPS && l->basis[r] < l->basis[pr])) {
        best = q < best ? q : best;
        pr = r;
      }
    }
    if (pr == l->rows)
      return GF_EINVAL; /* unbounded: every size is in a starting pattern */
    pivot(l, pr, pc);
  }
  return GF_EINVAL;
}

/* The pattern of largest value under z (knapsack, capacity 1000 milli, at
 * most GF__PLAN_MAX_ITEMS shares).  Returns its value. */
static double price(const int16_t *sizes, const double *z, size_t m,
                    double *best, int8_t *take, gf__plan_pattern *out) {
  enum { C = GF_GPU_MILLI + 1, K = GF__PLAN_MAX_ITEMS + 1 };
  for (size_t c = 0; c < C; c++) {
    best[c] = 0;
    take[c] = -1;
  }
  for (size_t k = 1; k < K; k++) {
    double *prev = &best[(k - 1) * C], *cur = &best[k * C];
    int8_t *tk = &take[k * C];
    for (size_t c = 0; c < C; c++) {
      cur[c] = prev[c];
      tk[c] = -1;
      for (size_t i = 0; i < m; i++) {
        if (z[i] <= EPS || (size_t)sizes[i] > c)
          continue;
        const double v = prev[c - (size_t)sizes[i]] + z[i];
        if (v > cur[c] + EPS) {
          cur[c] = v;
          tk[c] = (int8_t)i;
        }
      }
    }
  }
  /* Walk back from (K-1, C-1). */
  out->n = 0;
  size_t c = C - 1;
  for (size_t k = K - 1; k > 0; k--) {
    const int8_t i = take[k * C + c];
    if (i < 0)
      continue;
    out->v[out->n++] = sizes[i];
    c -= (size_t)sizes[i];
  }
  /* descending */
  for (size_t a = 1; a < out->n; a++)
    for (size_t b = a; b > 0 && out->v[b - 1] < out->v[b]; b--) {
      int16_t t = out->v[b];
      out->v[b] = out->v[b - 1];
      out->v[b - 1] = t;
    }
  return best[(K - 1) * C + C - 1];
}

static bool same(const gf__plan_pattern *a, const gf__plan_pattern *b) {
  return a->n == b->n && memcmp(a->v, b->v, a->n * sizeof(a->v[0])) == 0;
}

int gf__plan_build(const int32_t *sizes_in, const double *demand_in, size_t m0,
                   gf__plan *out) {
  memset(out, 0, sizeof(*out));
  int16_t sizes[GF__PLAN_MAX_SIZES];
  double demand[GF__PLAN_MAX_SIZES], total = 0;
  size_t m = 0;
  for (size_t i = 0; i < m0 && m < GF__PLAN_MAX_SIZES; i++) {
    if (sizes_in[i] <= 0 || sizes_in[i] >= GF_GPU_MILLI || !(demand_in[i] > 0))
      continue;
    sizes[m] = (int16_t)sizes_in[i];
    demand[m] = demand_in[i];
    total += demand_in[i];
    m++;
  }
  if (m == 0)
    return GF_EINVAL;
  for (size_t i = 0; i < m; i++)
    demand[i] /= total;

  int rc = GF_ENOMEM;
  gf__plan_pattern *pats = gf__calloc(GF__PLAN_MAX_PATTERNS, sizeof(*pats));
  double *best =
      gf__calloc((GF__PLAN_MAX_ITEMS + 1) * (GF_GPU_MILLI + 1), sizeof(double));
  int8_t *take = gf__calloc((GF__PLAN_MAX_ITEMS + 1) * (GF_GPU_MILLI + 1), 1);
  lp l = {.m = m};
  const size_t maxcols = m + GF__PLAN_MAX_PATTERNS;
  l.t = gf__calloc(GF__PLAN_MAX_PATTERNS * (maxcols + 1), sizeof(double));
  l.obj = gf__calloc(maxcols + 1, sizeof(double));
  l.basis = gf__calloc(GF__PLAN_MAX_PATTERNS, sizeof(size_t));
  if (!pats || !best || !take || !l.t || !l.obj || !l.basis)
    goto out;

  /* Start: each size alone, as many copies as fit. */
  size_t np = 0;
  for (size_t i = 0; i < m; i++) {
    gf__plan_pattern *p = &pats[np++];
    size_t k = (size_t)(GF_GPU_MILLI / sizes[i]);
    if (k > GF__PLAN_MAX_ITEMS)
      k = GF__PLAN_MAX_ITEMS;
    for (p->n = 0; p->n < k; p->n++)
      p->v[p->n] = sizes[i];
  }
  double z[GF__PLAN_MAX_SIZES];
  for (;;) {
    l.rows = np;
    l.cols = m + np;
    /* the tableau's row width changes with np: solve() lays it out anew */
    if ((rc = solve(&l, demand, pats, sizes)))
      goto out;
    for (size_t i = 0; i < m; i++)
      z[i] = 0;
    for (size_t r = 0; r < l.rows; r++)
      if (l.basis[r] < m)
        z[l.basis[r]] = *cell(&l, r, l.cols);
    if (np == GF__PLAN_MAX_PATTERNS)
      break;
    gf__plan_pattern cand;
    if (price(sizes, z, m, best, take, &cand) <= 1.0 + 1e-7)
      break;
    bool dup = false;
    for (size_t p = 0; p < np && !dup; p++)
      dup = same(&pats[p], &cand);
    if (dup)
      break; /* numerically done */
    pats[np++] = cand;
  }

  /* The dual and, from it, the room table (unbounded knapsack). */
  for (size_t i = 0; i < m; i++)
    out->z[sizes[i]] = z[i];
  for (size_t c = 0; c <= GF_GPU_MILLI; c++) {
    double b = c ? out->room[c - 1] : 0;
    for (size_t i = 0; i < m; i++)
      if ((size_t)sizes[i] <= c && out->room[c - (size_t)sizes[i]] + z[i] > b)
        b = out->room[c - (size_t)sizes[i]] + z[i];
    out->room[c] = b;
  }

  /* The optimum's patterns: x_p = reduced cost of slack p. */
  size_t used = 0;
  double gpus = 0, idle = 0;
  for (size_t p = 0; p < np; p++) {
    const double x = l.obj[m + p];
    if (x <= EPS)
      continue;
    pats[p].x = x;
    gpus += x;
    int32_t fill = 0;
    for (size_t k = 0; k < pats[p].n; k++)
      fill += pats[p].v[k];
    idle += x * (GF_GPU_MILLI - fill);
    pats[used++] = pats[p];
  }
  out->p = gf__realloc(pats, (used ? used : 1) * sizeof(*pats));
  if (!out->p) {
    out->p = pats; /* shrinking failed: keep the larger block */
  }
  pats = NULL;
  out->n = used;
  out->gpus = gpus;
  out->waste = gpus > 0 ? idle / gpus : 0;
  rc = used ? 0 : GF_EINVAL;
  if (rc) {
    gf__free(out->p);
    memset(out, 0, sizeof(*out));
  }
out:
  gf__free(pats);
  gf__free(best);
  gf__free(take);
  gf__free(l.t);
  gf__free(l.obj);
  gf__free(l.basis);
  return rc;
}

bool gf__plan_fits(const gf__plan *p, const int16_t *v, size_t n, int16_t add) {
  if (n + 1 > GF__PLAN_MAX_ITEMS)
    return false;
  int16_t x[GF__PLAN_MAX_ITEMS];
  size_t k = 0;
  bool put = false;
  for (size_t i = 0; i < n; i++) {
    if (!put && add >= v[i]) {
      x[k++] = add;
      put = true;
    }
    x[k++] = v[i];
  }
  if (!put)
    x[k++] = add;
  for (size_t q = 0; q < p->n; q++) {
    const gf__plan_pattern *pat = &p->p[q];
    if (pat->n < k)
      continue;
    size_t a = 0;
    for (size_t b = 0; b < pat->n && a < k; b++)
      if (pat->v[b] == x[a])
        a++;
    if (a == k)
      return true;
  }
  return false;
}

double gf__plan_value(const gf__plan *p, int32_t size) {
  return size > 0 && size < GF_GPU_MILLI ? p->z[size] : 0;
}

bool gf__plan_tight(const gf__plan *p, double value, int32_t used) {
  if (used < 0 || used > GF_GPU_MILLI)
    return false;
  return value + p->room[GF_GPU_MILLI - used] >= 1.0 - 1e-7;
}

void gf__plan_release(gf__plan *p) {
  gf__free(p->p);
  memset(p, 0, sizeof(*p));
}
