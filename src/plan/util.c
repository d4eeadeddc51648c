/* The planner's small helpers every file of it uses (internal.h):
 * growable arrays, value series, rounding, money and the GPU bill.  Apart
 * so that no two files of src/plan call each other in a circle through
 * them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "internal.h"

int gf__plan_grow(void **arr, size_t *cap, size_t n, size_t size) {
  if (n < *cap)
    return 0;
  size_t nc = *cap ? *cap * 2 : 16;
  if (nc > ((size_t)-1) / size)
    return GF_ENOMEM;
  void *np = gf__realloc(*arr, nc * size);
  if (!np)
    return GF_ENOMEM;
  *arr = np;
  *cap = nc;
  return 0;
}

int gf__series_push(gf__series *s, double v) {
  int rc = gf__plan_grow((void **)&s->v, &s->cap, s->n, sizeof(*s->v));
  if (rc)
    return rc;
  s->v[s->n++] = v;
  return 0;
}

void gf__series_release(gf__series *s) {
  gf__free(s->v);
  memset(s, 0, sizeof(*s));
}

double gf__plan_r4(double x) { return round(x * 1e4) / 1e4; }
double gf__plan_r2(double x) { return round(x * 1e2) / 1e2; }

/* "$1,234,567" or "-$1,234" (whole units, thousands separated). */
const char *gf__plan_money(double x, char *buf, size_t cap) {
  char digits[32];
  snprintf(digits, sizeof(digits), "%.0f", fabs(x));
  size_t n = strlen(digits), o = 0;
  const char *sign = x <= -0.5 ? "-$" : "$";
  for (; *sign && o + 1 < cap; sign++)
    buf[o++] = *sign;
  for (size_t i = 0; i < n && o + 2 < cap; i++) {
    if (i && (n - i) % 3 == 0)
      buf[o++] = ',';
    buf[o++] = digits[i];
  }
  buf[o] = '\0';
  return buf;
}

double gf__plan_bill(const gf_plan *p) {
  double b = 0;
  for (size_t i = 0; i < p->ntypes; i++)
    b += p->types[i].gpus * p->types[i].price_per_gpu_hour *
         GF_PLAN_HOURS_PER_MONTH;
  return b;
}

bool gf__plan_unmeasured(double held, double unmeasured) {
  return held > 0 && unmeasured >= held - 1e-9;
}

bool gf__plan_wl_unmeasured(const gf_plan_workload *w) {
  /* no pod measured: nothing used and nothing wasted is known (a measured
   * pod that holds GPUs adds to one or the other) */
  return !w->measured && w->gpus_used == 0 && w->waste_gpus == 0;
}
