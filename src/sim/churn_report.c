/*
 * Reporting the churn replay: means over seeds, a table, JSON, and an SVG
 * chart of the nodes bought over time (gpufrac/churn.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/churn.h"
#include "gpufrac/error.h"
#include "svg.h"

int gf_churn_summary_of(const char *trace, const char *policy,
                        const gf_churn_config *cfg, const gf_churn_result *runs,
                        int n, gf_churn_summary *out) {
  memset(out, 0, sizeof(*out));
  out->trace = trace;
  out->policy = policy;
  out->nseeds = n;
  out->load = cfg->load;
  out->duration_h = cfg->duration_s / 3600;
  uint32_t ns = 0;
  for (int i = 0; i < n; i++)
    ns = runs[i].nsamples > ns ? runs[i].nsamples : ns;
  if (ns && (!(out->nodes = calloc(ns, sizeof(*out->nodes))) ||
             !(out->gpus = calloc(ns, sizeof(*out->gpus))) ||
             !(out->asked = calloc(ns, sizeof(*out->asked))))) {
    gf_churn_summary_release(out);
    return GF_ENOMEM;
  }
  out->nsamples = ns;
  for (int i = 0; i < n; i++) {
    const gf_churn_result *r = &runs[i];
#define ADD(f) out->f += (double)r->f / n
    ADD(rate_per_h);
    ADD(arrived);
    ADD(placed);
    ADD(unschedulable);
    ADD(still_pending);
    ADD(waited);
    ADD(gpu_hours_bought);
    ADD(gpu_hours_asked);
    ADD(gpu_hours_held);
    ADD(cost);
    ADD(evictions);
    ADD(drains);
    ADD(guarded);
    ADD(reload_minutes);
    ADD(peak_nodes);
    ADD(nodes_added);
    ADD(nodes_removed);
    ADD(pending_p50_s);
    ADD(pending_p99_s);
    ADD(pending_mean_s);
    ADD(wall_s);
    ADD(arrived_high);
    ADD(preemptions);
    ADD(preempt_victims);
    ADD(preempt_wasted);
    ADD(defrags);
    ADD(defrag_moves);
    ADD(pending_high_p50_s);
    ADD(pending_high_p99_s);
    ADD(pending_low_p50_s);
    ADD(pending_low_p99_s);
#undef ADD
    for (uint32_t j = 0; j < r->nsamples; j++) {
      out->nodes[j] += (double)r->nodes[j] / n;
      out->gpus[j] += r->gpus ? r->gpus[j] / n : 0;
      out->asked[j] += r->asked ? r->asked[j] / n : 0;
    }
  }
  out->prio = cfg->high > 0;
  out->evictions_per_day =
      cfg->duration_s > 0 ? out->evictions / (cfg->duration_s / 86400) : 0;
  out->waste_ratio = out->gpu_hours_asked > 0
                         ? out->gpu_hours_bought / out->gpu_hours_asked
                         : NAN;
  return 0;
}

void gf_churn_summary_release(gf_churn_summary *s) {
  free(s->nodes);
  free(s->gpus);
  free(s->asked);
  s->nodes = NULL;
  s->gpus = s->asked = NULL;
  s->nsamples = 0;
}

void gf_churn_report_table(FILE *fp, const gf_churn_summary *s, int n) {
  fprintf(fp, "%-14s %-9s %10s %10s %6s %10s %6s %8s %8s %6s %8s %7s %6s %7s\n",
          "trace", "policy", "GPUh bought", "GPUh asked", "ratio", "cost",
          "peak", "wait p50", "wait p99", "evict", "reload m", "guarded",
          "unsch", "wall s");
  for (int i = 0; i < n; i++) {
    const gf_churn_summary *x = &s[i];
    fprintf(fp,
            "%-14s %-9s %11.0f %10.0f %6.3f %10.0f %6.0f %7.0fs %7.0fs "
            "%6.0f %8.0f %7.0f %6.0f %7.2f\n",
            x->trace, x->policy, x->gpu_hours_bought, x->gpu_hours_asked,
            x->waste_ratio, x->cost, x->peak_nodes, x->pending_p50_s,
            x->pending_p99_s, x->evictions, x->reload_minutes, x->guarded,
            x->unschedulable, x->wall_s);
  }
  if (n <= 0 || !s[0].prio)
    return;
  /* Priorities (issue 32): pending time per class, preemption, defrag. */
  fprintf(fp, "\n%-14s %-9s %8s %9s %8s %9s %7s %7s %6s %7s %6s %9s\n", "trace",
          "policy", "high p50", "high p99", "low p50", "low p99", "preempt",
          "victims", "wasted", "defrags", "moved", "evict/day");
  for (int i = 0; i < n; i++) {
    const gf_churn_summary *x = &s[i];
    fprintf(fp,
            "%-14s %-9s %7.0fs %8.0fs %7.0fs %8.0fs %7.1f %7.1f %6.1f %7.1f "
            "%6.1f %9.1f\n",
            x->trace, x->policy, x->pending_high_p50_s, x->pending_high_p99_s,
            x->pending_low_p50_s, x->pending_low_p99_s, x->preemptions,
            x->preempt_victims, x->preempt_wasted, x->defrags, x->defrag_moves,
            x->evictions_per_day);
  }
}

static void jnum(FILE *fp, const char *k, double v, int last) {
  if (isfinite(v))
    fprintf(fp, "\"%s\": %.6g%s", k, v, last ? "" : ", ");
  else
    fprintf(fp, "\"%s\": null%s", k, last ? "" : ", ");
}

/* Names here are policy and trace names (letters, digits, -_.:=): quoted
 * with \ and " escaped all the same. */
static void jstr(FILE *fp, const char *k, const char *v) {
  fprintf(fp, "\"%s\": \"", k);
  for (; *v; v++) {
    if (*v == '"' || *v == '\\')
      fputc('\\', fp);
    if ((unsigned char)*v >= 0x20)
      fputc(*v, fp);
  }
  fprintf(fp, "\", ");
}

void gf_churn_report_json(FILE *fp, const gf_churn_summary *s, int n,
                          const gf_churn_config *cfg, const char *seeds) {
  fprintf(fp, "{\"churn\": {");
  jnum(fp, "load", cfg->load, 0);
  jnum(fp, "duration_s", cfg->duration_s, 0);
  jnum(fp, "provision_s", cfg->provision_s, 0);
  jnum(fp, "scale_down_delay_s", cfg->empty_s, 0);
  fprintf(fp, "\"consolidate\": %s, ", cfg->consolidate ? "true" : "false");
  fprintf(fp, "\"guard\": %s, ", cfg->guard ? "true" : "false");
  jnum(fp, "guard_settle_s", cfg->guard_settle_s, 0);
  jnum(fp, "reload_s", cfg->reload_s, 0);
  jnum(fp, "initial_nodes", cfg->initial, 0);
  if (cfg->high > 0) {
    static const char *const modes[] = {"none", "kube", "gpufrac"};
    jnum(fp, "high", cfg->high, 0);
    jstr(fp, "preempt",
         cfg->preempt >= 0 && cfg->preempt <= 2 ? modes[cfg->preempt] : "?");
    fprintf(fp, "\"defrag\": %s, ", cfg->defrag ? "true" : "false");
    jnum(fp, "defrag_max", cfg->defrag_max, 0);
  }
  jnum(fp, "sample_s", cfg->sample_s, 1);
  fprintf(fp, "}, ");
  jstr(fp, "seeds", seeds);
  fprintf(fp, "\"summary\": [");
  for (int i = 0; i < n; i++) {
    const gf_churn_summary *x = &s[i];
    fprintf(fp, "%s\n  {", i ? "," : "");
    jstr(fp, "trace", x->trace);
    jstr(fp, "policy", x->policy);
    fprintf(fp, "\"seeds\": %d, ", x->nseeds);
    jnum(fp, "arrival_rate_per_h", x->rate_per_h, 0);
    jnum(fp, "arrived", x->arrived, 0);
    jnum(fp, "placed", x->placed, 0);
    jnum(fp, "unschedulable", x->unschedulable, 0);
    jnum(fp, "still_pending", x->still_pending, 0);
    jnum(fp, "waited", x->waited, 0);
    jnum(fp, "gpu_hours_bought", x->gpu_hours_bought, 0);
    jnum(fp, "gpu_hours_asked", x->gpu_hours_asked, 0);
    jnum(fp, "gpu_hours_held", x->gpu_hours_held, 0);
    jnum(fp, "bought_per_asked", x->waste_ratio, 0);
    jnum(fp, "cost", x->cost, 0);
    jnum(fp, "peak_nodes", x->peak_nodes, 0);
    jnum(fp, "nodes_added", x->nodes_added, 0);
    jnum(fp, "nodes_removed", x->nodes_removed, 0);
    jnum(fp, "pending_p50_s", x->pending_p50_s, 0);
    jnum(fp, "pending_p99_s", x->pending_p99_s, 0);
    jnum(fp, "pending_mean_s", x->pending_mean_s, 0);
    jnum(fp, "evictions", x->evictions, 0);
    jnum(fp, "drains", x->drains, 0);
    jnum(fp, "guarded", x->guarded, 0);
    jnum(fp, "reload_minutes", x->reload_minutes, 0);
    if (x->prio) {
      jnum(fp, "arrived_high", x->arrived_high, 0);
      jnum(fp, "pending_high_p50_s", x->pending_high_p50_s, 0);
      jnum(fp, "pending_high_p99_s", x->pending_high_p99_s, 0);
      jnum(fp, "pending_low_p50_s", x->pending_low_p50_s, 0);
      jnum(fp, "pending_low_p99_s", x->pending_low_p99_s, 0);
      jnum(fp, "preemptions", x->preemptions, 0);
      jnum(fp, "preempt_victims", x->preempt_victims, 0);
      jnum(fp, "preempt_wasted", x->preempt_wasted, 0);
      jnum(fp, "defrags", x->defrags, 0);
      jnum(fp, "defrag_moves", x->defrag_moves, 0);
      jnum(fp, "evictions_per_day", x->evictions_per_day, 0);
    }
    fprintf(fp, "\"nodes\": [");
    for (uint32_t j = 0; j < x->nsamples; j++)
      fprintf(fp, "%s%.6g", j ? ", " : "", x->nodes[j]);
    fprintf(fp, "]}");
  }
  fprintf(fp, "\n]}\n");
}

void gf_churn_report_svg(FILE *fp, const gf_churn_summary *s, int n,
                         double sample_s, const char *title) {
  /* the legend's column as wide as its longest entry (7 px a character) */
  size_t longest = strlen("asked: GPUs the running pods want");
  for (int i = 0; i < n; i++)
    if (strlen(s[i].policy) + 22 > longest)
      longest = strlen(s[i].policy) + 22;
  const double L = 70, T = 50, B = 60, H = 480, pw = 520;
  const double R = 45 + 7.0 * (double)longest, W = L + pw + R;
  const double ph = H - T - B;
  double xmax = 0, ymax = 1;
  uint32_t nmax = 0;
  for (int i = 0; i < n; i++) {
    if (s[i].nsamples > 1 && (s[i].nsamples - 1) * sample_s / 3600 > xmax)
      xmax = (s[i].nsamples - 1) * sample_s / 3600;
    nmax = s[i].nsamples > nmax ? s[i].nsamples : nmax;
    for (uint32_t j = 0; j < s[i].nsamples; j++) {
      ymax = s[i].gpus[j] > ymax ? s[i].gpus[j] : ymax;
      ymax = s[i].asked[j] > ymax ? s[i].asked[j] : ymax;
    }
  }
  if (xmax <= 0)
    xmax = 1;
  double ystep = pow(10, floor(log10(ymax)));
  if (ymax / ystep < 3)
    ystep /= 2;
  ymax = ceil(ymax / ystep) * ystep;
  double xstep = xmax > 48 ? 24 : xmax > 12 ? 6 : 1;
#define PX(x) (L + pw * (x) / xmax)
#define PY(y) (T + ph - ph * (y) / ymax)
  gf__svg_begin(fp, W, H, L, title);
  for (double x = 0; x <= xmax + 1e-9; x += xstep)
    gf__svg_xgrid(fp, PX(x), T, ph, x);
  for (double y = 0; y <= ymax + 1e-9; y += ystep)
    gf__svg_ygrid(fp, L, pw, PY(y), y);
  gf__svg_frame(fp, L, T, pw, ph, H, "hours", "GPUs");
  /* asked: the mean over the policies (the same pods; they differ only
   * by how long each waits) */
  fprintf(fp, "<polyline fill=\"none\" stroke=\"#333\" stroke-width=\"2\" "
              "stroke-dasharray=\"6,4\" points=\"");
  for (uint32_t j = 0; j < nmax; j++) {
    double a = 0;
    int k = 0;
    for (int i = 0; i < n; i++)
      if (j < s[i].nsamples) {
        a += s[i].asked[j];
        k++;
      }
    fprintf(fp, "%.1f,%.1f ", PX(j * sample_s / 3600), PY(k ? a / k : 0));
  }
  fprintf(fp, "\"/>\n");
  for (int i = 0; i < n; i++) {
    const char *col = gf__svg_series(fp, i);
    for (uint32_t j = 0; j < s[i].nsamples; j++)
      fprintf(fp, "%.1f,%.1f ", PX(j * sample_s / 3600), PY(s[i].gpus[j]));
    fprintf(fp, "\"/>\n");
    gf__svg_legend(fp, L + pw, T + 12 + 22.0 * i, col);
    fprintf(fp, "%s bought: %.3f bought/asked</text>\n", s[i].policy,
            s[i].waste_ratio);
  }
  double ly = T + 12 + 22.0 * n;
  fprintf(fp,
          "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" "
          "stroke=\"#333\" stroke-width=\"2\" stroke-dasharray=\"6,4\"/>"
          "<text x=\"%.0f\" y=\"%.0f\">asked: GPUs the running pods "
          "want</text>\n",
          L + pw + 10, ly, L + pw + 30, ly, L + pw + 35, ly + 4);
#undef PX
#undef PY
  fprintf(fp, "</svg>\n");
}
