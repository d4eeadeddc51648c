/*
 * Reports.  Aggregation over seeds uses the mean and the sample standard
 * deviation (n - 1), as the reference results do.
 */
#include "gpufrac/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "svg.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  if (n <= 0)
    return NAN;
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* Mean and sample std of the finite values of v. */
static void mean_std(const double *v, int n, double *mean, double *std) {
  double s = 0, ss = 0;
  int k = 0;
  for (int i = 0; i < n; i++)
    if (isfinite(v[i])) {
      s += v[i];
      k++;
    }
  *mean = k ? s / k : NAN;
  for (int i = 0; i < n; i++)
    if (isfinite(v[i]))
      ss += (v[i] - *mean) * (v[i] - *mean);
  if (std)
    *std = k > 1 ? sqrt(ss / (k - 1)) : 0.0;
}

void gf_summary_of(const char *policy, const char *trace, uint32_t ngpus,
                   const gf_sim_result *runs, int n, gf_summary *out) {
  memset(out, 0, sizeof(*out));
  out->policy = policy;
  out->trace = trace;
  out->nseeds = n;
  out->ngpus = ngpus;
  double *v = calloc((size_t)(n > 0 ? n : 1), sizeof(*v));
  if (!v)
    return;
#define OVER_RUNS(expr)                                                        \
  for (int i = 0; i < n; i++)                                                  \
  v[i] = (expr)
  OVER_RUNS(gf_sim_unallocated_at(&runs[i], 100));
  mean_std(v, n, &out->unalloc100, &out->unalloc100_std);
  OVER_RUNS(gf_sim_unallocated_at(&runs[i], 130));
  mean_std(v, n, &out->unalloc130, &out->unalloc130_std);
  OVER_RUNS(runs[i].npoints > 80 && runs[i].curve[80].present
                ? runs[i].curve[80].frag_amount_pct
                : NAN);
  mean_std(v, n, &out->frag80, NULL);
  OVER_RUNS(runs[i].npoints > 100 && runs[i].curve[100].present
                ? runs[i].curve[100].held_pct - runs[i].curve[100].alloc_pct
                : NAN);
  mean_std(v, n, &out->held_unused100, NULL);
  OVER_RUNS(100.0 * (double)runs[i].placed / (double)runs[i].arrived);
  mean_std(v, n, &out->placed_pct, NULL);
  OVER_RUNS((double)runs[i].placed_share);
  mean_std(v, n, &out->placed_share, NULL);
  OVER_RUNS((double)runs[i].placed_whole);
  mean_std(v, n, &out->placed_whole, NULL);
  OVER_RUNS((double)runs[i].placed_cpu);
  mean_std(v, n, &out->placed_cpu, NULL);
  OVER_RUNS((double)runs[i].failed_share);
  mean_std(v, n, &out->failed_share, NULL);
  OVER_RUNS((double)runs[i].failed_whole);
  mean_std(v, n, &out->failed_whole, NULL);
  OVER_RUNS((double)runs[i].failed_cpu);
  mean_std(v, n, &out->failed_cpu, NULL);
  OVER_RUNS(runs[i].wall_s);
  mean_std(v, n, &out->wall_s, NULL);
  OVER_RUNS(runs[i].first_drop_pct);
  mean_std(v, n, &out->first_drop, NULL);
  out->models = n > 0 && runs[0].has_models;
  if (out->models) {
    OVER_RUNS(runs[i].model_pods ? 100.0 * (double)runs[i].model_hits /
                                       (double)runs[i].model_pods
                                 : NAN);
    mean_std(v, n, &out->hit_pct, NULL);
    OVER_RUNS((double)runs[i].bytes_fetched / 1e12);
    mean_std(v, n, &out->fetched_tb, NULL);
    OVER_RUNS((double)runs[i].evictions);
    mean_std(v, n, &out->evictions, NULL);
  }
  OVER_RUNS(runs[i].decision_us_median);
  out->decision_us_median = median(v, n);
  OVER_RUNS(runs[i].decision_us_p99);
  out->decision_us_p99 = median(v, n);
  int np = 0;
  for (int i = 0; i < n; i++)
    np = runs[i].npoints > np ? runs[i].npoints : np;
  out->npoints = np;
  for (int k = 0; k < np; k++) {
    OVER_RUNS(k < runs[i].npoints && runs[i].curve[k].present
                  ? runs[i].curve[k].alloc_pct
                  : NAN);
    mean_std(v, n, &out->alloc_curve[k], NULL);
    OVER_RUNS(k < runs[i].npoints && runs[i].curve[k].present
                  ? runs[i].curve[k].frag_amount_pct
                  : NAN);
    mean_std(v, n, &out->frag_curve[k], NULL);
  }
#undef OVER_RUNS
  free(v);
}

void gf_report_table(FILE *fp, const gf_summary *s, int n) {
  int w = 18; /* the policy column: as wide as its longest name */
  for (int i = 0; i < n; i++) {
    size_t len = strlen(s[i].policy);
    if (len > (size_t)w)
      w = len > 120 ? 120 : (int)len;
  }
  bool models = false;
  for (int i = 0; i < n; i++)
    models |= s[i].models;
  fprintf(fp, "%-12s %-*s %5s %8s %13s %13s %9s %9s  %s", "trace", w, "policy",
          "seeds", "placed%", "stranded@100%", "stranded@130%", "frag@80%",
          "p99(us)", "dropped: share/whole/cpu");
  if (models)
    fprintf(fp, "  %8s %11s %9s", "cache-hit%", "fetched(TB)", "evictions");
  fputc('\n', fp);
  for (int i = 0; i < n; i++) {
    fprintf(fp,
            "%-12s %-*s %5d %8.2f %7.2f±%-5.2f %7.2f±%-5.2f %9.2f %9.1f  "
            "%.0f/%.0f/%.0f",
            s[i].trace, w, s[i].policy, s[i].nseeds, s[i].placed_pct,
            s[i].unalloc100, s[i].unalloc100_std, s[i].unalloc130,
            s[i].unalloc130_std, s[i].frag80, s[i].decision_us_p99,
            s[i].failed_share, s[i].failed_whole, s[i].failed_cpu);
    if (s[i].models)
      fprintf(fp, "  %10.2f %11.2f %9.0f", s[i].hit_pct, s[i].fetched_tb,
              s[i].evictions);
    fputc('\n', fp);
  }
}

void gf_report_csv(FILE *fp, const gf_summary *s, int n) {
  fprintf(fp, "trace,policy,seeds,placed_pct,unallocated_at_100,"
              "unallocated_at_100_std,unallocated_at_130,"
              "unallocated_at_130_std,frag_amount_at_80,held_unused_at_100,"
              "decision_us_median,decision_us_p99\n");
  for (int i = 0; i < n; i++)
    fprintf(fp, "%s,%s,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.3f,%.3f\n",
            s[i].trace, s[i].policy, s[i].nseeds, s[i].placed_pct,
            s[i].unalloc100, s[i].unalloc100_std, s[i].unalloc130,
            s[i].unalloc130_std, s[i].frag80, s[i].held_unused100,
            s[i].decision_us_median, s[i].decision_us_p99);
}

/* JSON numbers: NaN and infinities become null. */
static void jnum(FILE *fp, const char *key, double v, int last) {
  if (isfinite(v))
    fprintf(fp, "\"%s\": %.4f%s", key, v, last ? "" : ", ");
  else
    fprintf(fp, "\"%s\": null%s", key, last ? "" : ", ");
}

/* Names here are policy and trace names, which the CLI restricts to
 * [A-Za-z0-9._-]; escape anyway so the output is always valid JSON. */
static void jstr(FILE *fp, const char *key, const char *v) {
  fprintf(fp, "\"%s\": \"", key);
  for (const char *p = v; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(fp, "\\%c", *p);
    else if ((unsigned char)*p < 0x20)
      fprintf(fp, "\\u%04x", (unsigned char)*p);
    else
      fputc(*p, fp);
  }
  fprintf(fp, "\", ");
}

void gf_report_json(FILE *fp, const gf_summary *s, int n, double inflate,
                    const char *seeds) {
  fprintf(fp, "{\"inflate\": %.4f, ", inflate);
  jstr(fp, "seeds", seeds);
  fprintf(fp, "\"summary\": [");
  for (int i = 0; i < n; i++) {
    fprintf(fp, "%s\n  {", i ? "," : "");
    jstr(fp, "policy", s[i].policy);
    jstr(fp, "trace", s[i].trace);
    fprintf(fp, "\"seeds\": %d, \"gpus\": %u, ", s[i].nseeds, s[i].ngpus);
    jnum(fp, "unallocated_at_100", s[i].unalloc100, 0);
    jnum(fp, "unallocated_at_100_std", s[i].unalloc100_std, 0);
    jnum(fp, "unallocated_at_130", s[i].unalloc130, 0);
    jnum(fp, "unallocated_at_130_std", s[i].unalloc130_std, 0);
    jnum(fp, "frag_amount_at_80", s[i].frag80, 0);
    jnum(fp, "held_unused_at_100", s[i].held_unused100, 0);
    jnum(fp, "placed_pct", s[i].placed_pct, 0);
    jnum(fp, "first_drop_at_pct", s[i].first_drop, 0);
    jnum(fp, "decision_us_median", s[i].decision_us_median, 0);
    if (s[i].models) {
      jnum(fp, "cache_hit_pct", s[i].hit_pct, 0);
      jnum(fp, "fetched_tb", s[i].fetched_tb, 0);
      jnum(fp, "evictions", s[i].evictions, 0);
    }
    jnum(fp, "decision_us_p99", s[i].decision_us_p99, 1);
    fprintf(fp, "}");
  }
  fprintf(fp, "\n]}\n");
}

void gf_report_curves_csv(FILE *fp, const char *trace, const char *policy,
                          uint64_t seed, const gf_sim_result *r, int header) {
  if (header)
    fprintf(fp, "trace,policy,seed,arrived_pct,alloc_pct,held_pct,"
                "frag_amount_pct,frag_ratio_pct\n");
  for (int k = 0; k < r->npoints; k++) {
    const gf_sim_point *p = &r->curve[k];
    if (!p->present)
      continue;
    fprintf(fp, "%s,%s,%llu,%d,%.4f,%.4f,%.4f,%.4f\n", trace, policy,
            (unsigned long long)seed, k, p->alloc_pct, p->held_pct,
            p->frag_amount_pct, p->frag_ratio_pct);
  }
}

/* ---- SVG -------------------------------------------------------------- */

static const char *const palette[] = {"#1b9e77", "#d95f02", "#7570b3",
                                      "#e7298a", "#66a61e", "#e6ab02",
                                      "#a6761d", "#666666"};

const char *gf__svg_color(int i) {
  return palette[i % (int)(sizeof(palette) / sizeof(palette[0]))];
}

void gf__svg_begin(FILE *fp, double w, double h, double l, const char *title) {
  fprintf(fp,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
          "height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
          "<text x=\"%.0f\" y=\"24\" font-size=\"15\" "
          "font-weight=\"bold\">%s</text>\n",
          w, h, l, title);
}

void gf__svg_xgrid(FILE *fp, double px, double t, double ph, double label) {
  fprintf(fp,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
          "stroke=\"#e5e5e5\"/><text x=\"%.1f\" y=\"%.1f\" "
          "text-anchor=\"middle\">%.0f</text>\n",
          px, t, px, t + ph, px, t + ph + 16, label);
}

void gf__svg_ygrid(FILE *fp, double l, double pw, double py, double label) {
  fprintf(fp,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
          "stroke=\"#e5e5e5\"/><text x=\"%.1f\" y=\"%.1f\" "
          "text-anchor=\"end\">%.0f</text>\n",
          l, py, l + pw, py, l - 6, py + 4, label);
}

void gf__svg_frame(FILE *fp, double l, double t, double pw, double ph, double h,
                   const char *xtitle, const char *ytitle) {
  fprintf(fp,
          "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
          "fill=\"none\" stroke=\"#333\"/>\n"
          "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n"
          "<text transform=\"translate(20,%.0f) rotate(-90)\" "
          "text-anchor=\"middle\">%s</text>\n",
          l, t, pw, ph, l + pw / 2, h - 16, xtitle, t + ph / 2, ytitle);
}

const char *gf__svg_series(FILE *fp, int i) {
  const char *col = gf__svg_color(i);
  fprintf(fp,
          "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
          "points=\"",
          col);
  return col;
}

void gf__svg_legend(FILE *fp, double x, double y, const char *color) {
  fprintf(fp,
          "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" "
          "stroke=\"%s\" stroke-width=\"3\"/><text x=\"%.0f\" y=\"%.0f\">",
          x + 10, y, x + 30, y, color, x + 35, y + 4);
}

/* Allocation % against arrived demand from 50% on, where policies part
 * ways, with the ideal (everything that arrived is placed) dashed. */
void gf_report_svg(FILE *fp, const gf_summary *s, int n, const char *title) {
  /* the legend's column as wide as its longest entry (7 px a character):
   * "POLICY: 12.34% stranded at 100% demand" */
  size_t longest = 0;
  for (int i = 0; i < n; i++)
    if (strlen(s[i].policy) + 34 > longest)
      longest = strlen(s[i].policy) + 34;
  const double H = 480, L = 70, T = 50, B = 60, pw = 520;
  const double R = 45 + 7.0 * (double)longest, W = L + pw + R;
  const double ph = H - T - B;
  const int x0 = 50;
  int x1 = x0 + 10;
  double ymin = 100;
  for (int i = 0; i < n; i++) {
    x1 = s[i].npoints - 1 > x1 ? s[i].npoints - 1 : x1;
    for (int k = x0; k < s[i].npoints; k++)
      if (isfinite(s[i].alloc_curve[k]) && s[i].alloc_curve[k] < ymin)
        ymin = s[i].alloc_curve[k];
  }
  ymin = floor(ymin / 10) * 10;
  if (ymin > 50)
    ymin = 50;
  const double ymax = 100;
#define PX(x) (L + pw * ((x)-x0) / (x1 - x0))
#define PY(y) (T + ph - ph * ((y)-ymin) / (ymax - ymin))
  gf__svg_begin(fp, W, H, L, title);
  for (int x = x0; x <= x1; x += 10)
    gf__svg_xgrid(fp, PX(x), T, ph, x);
  for (double y = ymin; y <= ymax + 1e-9; y += 10)
    gf__svg_ygrid(fp, L, pw, PY(y), y);
  gf__svg_frame(fp, L, T, pw, ph, H,
                "arrived GPU demand (% of cluster GPU capacity)",
                "GPU capacity allocated (%)");
  fprintf(fp,
          "<polyline fill=\"none\" stroke=\"#999\" stroke-dasharray=\"5,4\" "
          "points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\"/>\n"
          "<text x=\"%.0f\" y=\"%.0f\" fill=\"#777\">ideal</text>\n",
          PX(x0), PY(x0 < ymin ? ymin : x0), PX(100), PY(100), PX(x1), PY(100),
          PX(x1) - 40, PY(100) - 6);
  for (int i = 0; i < n; i++) {
    const char *col = gf__svg_series(fp, i);
    for (int k = x0; k < s[i].npoints; k++)
      if (isfinite(s[i].alloc_curve[k]))
        fprintf(fp, "%.1f,%.1f ", PX(k), PY(s[i].alloc_curve[k]));
    fprintf(fp, "\"/>\n");
    gf__svg_legend(fp, L + pw, T + 12 + 22.0 * i, col);
    fprintf(fp, "%s: %.2f%% stranded at 100%% demand</text>\n", s[i].policy,
            s[i].unalloc100);
  }
#undef PX
#undef PY
  fprintf(fp, "</svg>\n");
}
