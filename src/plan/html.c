/*
 * The HTML report: one self-contained file (inline CSS and SVG, no script,
 * nothing fetched at view time).  Every figure shown also carries its
 * exact value in a data-value attribute, with an id or a data-field naming
 * the JSON field it equals, so a test can compare the two.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "gpufrac/error.h"
#include "internal.h"

static void esc(FILE *fp, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '<':
      fputs("&lt;", fp);
      break;
    case '>':
      fputs("&gt;", fp);
      break;
    case '&':
      fputs("&amp;", fp);
      break;
    case '"':
      fputs("&quot;", fp);
      break;
    default:
      fputc(*s, fp);
    }
  }
}

/* A figure: shown with `digits` decimals; in data-value as the JSON has it
 * (money, shown as "$1,234", to 2 decimals; GPUs to 4). */
static void fig(FILE *fp, const char *id, double v, int digits,
                const char *prefix) {
  v = prefix[0] ? gf__plan_r2(v) : gf__plan_r4(v);
  char m[40];
  if (prefix[0])
    fprintf(fp, "<span class=\"fig\" id=\"%s\" data-value=\"%.4f\">%s</span>",
            id, v, gf__plan_money(v, m, sizeof(m)));
  else
    fprintf(fp, "<span class=\"fig\" id=\"%s\" data-value=\"%.4f\">%.*f</span>",
            id, v, digits, v);
}

/* A table cell; money (a field ending in per_month) shown as "$1,234". */
static void cell(FILE *fp, const char *field, double v, int digits) {
  bool money = strstr(field, "per_month") != NULL;
  v = money ? gf__plan_r2(v) : gf__plan_r4(v);
  char m[40];
  if (money)
    fprintf(fp, "<td data-field=\"%s\" data-value=\"%.4f\">%s</td>", field, v,
            gf__plan_money(v, m, sizeof(m)));
  else
    fprintf(fp, "<td data-field=\"%s\" data-value=\"%.4f\">%.*f</td>", field, v,
            digits, v);
}

/* A waste cell of a group or workload nothing of which was measured. */
static void unknown_cell(FILE *fp, const char *field) {
  fprintf(fp, "<td data-field=\"%s\" class=\"unknown\">unknown</td>", field);
}

/* The widest of n labels at 12px sans-serif, in pixels (7 a character:
 * wider than the average glyph), at least min. */
static int label_px(const char *const *labels, size_t n, int min) {
  size_t w = 0;
  for (size_t i = 0; i < n; i++)
    if (strlen(labels[i]) > w)
      w = strlen(labels[i]);
  return (int)w * 7 + 12 > min ? (int)w * 7 + 12 : min;
}

/* Horizontal bars: held (light) and used (dark) per group. */
static void bars(FILE *fp, const char *title, const gf_plan_group *g,
                 size_t n) {
  size_t shown = n < 12 ? n : 12;
  double max = 0;
  for (size_t i = 0; i < shown; i++)
    if (g[i].gpus_held > max)
      max = g[i].gpus_held;
  if (max <= 0)
    max = 1;
  const char *names[12];
  for (size_t i = 0; i < shown; i++)
    names[i] = g[i].name;
  int row = 26, left = label_px(names, shown, 170), width = 420;
  int h = (int)shown * row + 30;
  fprintf(fp, "<h2>");
  esc(fp, title);
  fprintf(fp,
          "</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
          "height=\"%d\" role=\"img\">\n",
          left + width + 110, h);
  for (size_t i = 0; i < shown; i++) {
    int y = (int)i * row + 4;
    double wh = width * g[i].gpus_held / max;
    double wu = width * g[i].gpus_used / max;
    fprintf(fp, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 6,
            y + 15);
    esc(fp, g[i].name);
    fprintf(fp,
            "</text><rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"18\" "
            "class=\"held\"/><rect x=\"%d\" y=\"%d\" width=\"%.1f\" "
            "height=\"18\" class=\"used\"/><text x=\"%.1f\" y=\"%d\">%.1f / "
            "%.1f</text>\n",
            left, y, wh, left, y, wu, left + wh + 6, y + 15, g[i].gpus_used,
            g[i].gpus_held);
  }
  fprintf(fp,
          "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" "
          "class=\"held\"/><text x=\"%d\" y=\"%d\">held</text><rect "
          "x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" class=\"used\"/>"
          "<text x=\"%d\" y=\"%d\">used</text>\n</svg>\n",
          left, h - 18, left + 16, h - 8, left + 70, h - 18, left + 86, h - 8);
}

static void group_table(FILE *fp, const char *cls, const gf_plan_group *g,
                        size_t n, bool type) {
  fprintf(fp,
          "<table class=\"%s\"><tr><th>name</th>%s<th>pods</th>"
          "<th>GPUs held</th><th>used</th><th>unmeasured</th>"
          "<th>waste</th><th>waste / month</th></tr>\n",
          cls, type ? "<th>GPU</th><th>nodes</th><th>GPUs</th>" : "");
  for (size_t i = 0; i < n; i++) {
    fprintf(fp, "<tr><td data-field=\"name\">");
    esc(fp, g[i].name);
    fprintf(fp, "</td>");
    if (type) {
      fprintf(fp, "<td>");
      esc(fp, g[i].gpu_model);
      fprintf(fp, "</td><td>%u</td>", g[i].nodes);
      cell(fp, "gpus", g[i].gpus, 0);
    }
    fprintf(fp, "<td>%u</td>", g[i].pods);
    cell(fp, "gpus_held", g[i].gpus_held, 2);
    cell(fp, "gpus_used", g[i].gpus_used, 2);
    cell(fp, "gpus_unmeasured", g[i].gpus_unmeasured, 2);
    if (gf__plan_unmeasured(g[i].gpus_held, g[i].gpus_unmeasured)) {
      unknown_cell(fp, "waste_gpus");
      unknown_cell(fp, "waste_per_month");
    } else {
      cell(fp, "waste_gpus", g[i].waste_gpus, 2);
      cell(fp, "waste_per_month", g[i].waste_per_month, 0);
    }
    fprintf(fp, "</tr>\n");
  }
  fprintf(fp, "</table>\n");
}

static void html_cards(const gf_plan *p, FILE *fp) {
  const gf_plan_totals *t = &p->today;
  bool unknown = gf__plan_unmeasured(t->gpus_held, t->gpus_unmeasured);
  struct {
    const char *label, *id;
    double v;
    int digits;
    const char *prefix;
  } cards[] = {
      {"GPUs in the cluster", "gpus", t->gpus, 0, ""},
      {"GPU bill per month", "bill_per_month", gf__plan_bill(p), 0, "$"},
      {"GPUs held", "gpus_held", t->gpus_held, 1, ""},
      {"held per month", "held_per_month", t->held_per_month, 0, "$"},
      {"GPUs used", "gpus_used", t->gpus_used, 1, ""},
      {"held, no usage data", "gpus_unmeasured", t->gpus_unmeasured, 1, ""},
      {"waste (GPUs)", "waste_gpus", t->waste_gpus, 1, ""},
      {"waste per month", "waste_per_month", t->waste_per_month, 0, "$"},
  };
  for (size_t i = 0; i < sizeof(cards) / sizeof(cards[0]); i++) {
    fprintf(fp, "<div class=\"card\">%s<b>", cards[i].label);
    if (unknown && strncmp(cards[i].id, "waste", 5) == 0)
      fprintf(fp, "<span class=\"fig unknown\" id=\"%s\">unknown</span>",
              cards[i].id);
    else
      fig(fp, cards[i].id, cards[i].v, cards[i].digits, cards[i].prefix);
    fprintf(fp, "</b></div>\n");
  }
  fprintf(fp, "</div>\n");
  if (unknown)
    fprintf(fp, "<p class=\"unknown\">Waste is unknown: no pod has usage "
                "data.  Give gpufrac plan DCGM's usage with --usage FILE or "
                "--prometheus URL (docs/plan.md, \"Usage\").</p>\n");
  else if (t->gpus_unmeasured > 0)
    fprintf(fp,
            "<p>Waste counts the pods with usage data only; %.1f GPUs "
            "are held by pods without it.</p>\n",
            t->gpus_unmeasured);
}

static void html_fleet(const gf_plan *p, FILE *fp) {
  double bill = gf__plan_bill(p);
  fprintf(fp, "<h2>Cheapest fleet of the given node types</h2>\n"
              "<p>Whole nodes of the types given, enough for the pods as "
              "each policy places them: the bill you can reach.</p>\n"
              "<table class=\"fleet\"><tr><th>policy</th><th>nodes</th>"
              "<th>GPUs</th><th>unplaced</th><th>per month</th>"
              "<th>less than today's bill</th>"
              "<th>less than the whole-GPU fleet</th><th>types</th></tr>\n");
  for (size_t i = 0; i < p->nwhatif; i++) {
    const gf_plan_whatif *w = &p->whatif[i];
    fprintf(fp, "<tr><td data-field=\"policy\">%s</td>", w->policy);
    cell(fp, "nodes", w->fleet_nodes, 0);
    cell(fp, "gpus", w->fleet_gpus, 0);
    cell(fp, "pods_unplaced", w->fleet_unplaced, 0);
    cell(fp, "per_month", w->fleet_per_month, 0);
    cell(fp, "saved_vs_bill_per_month", bill - w->fleet_per_month, 0);
    cell(fp, "saved_vs_whole_per_month",
         p->whatif[0].fleet_per_month - w->fleet_per_month, 0);
    fprintf(fp, "<td>");
    for (size_t k = 0, any = 0; k < w->nfleet; k++)
      if (w->fleet[k].nodes) {
        fprintf(fp, "%s%u x ", any ? ", " : "", w->fleet[k].nodes);
        esc(fp, w->fleet[k].name);
        any = 1;
      }
    fprintf(fp, "</td></tr>\n");
  }
  fprintf(fp, "</table>\n");
}

static void html_whatif(const gf_plan *p, FILE *fp) {
  fprintf(fp, "<h2>What-if: the same pods on the same nodes</h2>\n"
              "<p>whole: every pod whole GPUs; fgd and gpufrac: the "
              "recommended requests.</p>\n<table class=\"whatif\"><tr>"
              "<th>policy</th><th>GPUs needed</th><th>nodes</th>"
              "<th>unplaced</th><th>GPUs freed</th><th>saved / month</th>"
              "</tr>\n");
  for (size_t i = 0; i < p->nwhatif; i++) {
    const gf_plan_whatif *w = &p->whatif[i];
    fprintf(fp, "<tr><td data-field=\"policy\">%s</td>", w->policy);
    cell(fp, "gpus_needed", w->gpus_needed, 0);
    cell(fp, "nodes_needed", w->nodes_needed, 0);
    cell(fp, "pods_unplaced", w->pods_unplaced, 0);
    cell(fp, "gpus_freed", w->gpus_freed, 0);
    cell(fp, "saved_per_month", w->saved_per_month, 0);
    fprintf(fp, "</tr>\n");
  }
  fprintf(fp, "</table>\n");
  fprintf(fp,
          "<p>saved / month prices each freed GPU at its node's "
          "price: an upper bound, money only once freed GPUs add up to "
          "whole nodes you remove (nodes: what each placement still "
          "uses).  %s</p>\n",
          p->whatif[0].has_fleet
              ? "The cheapest fleet below prices whole nodes."
              : "gpufrac plan --node-types FILE prices whole nodes.");
  if (p->whatif[0].has_fleet)
    html_fleet(p, fp);
  double max = p->whatif[0].gpus_needed ? p->whatif[0].gpus_needed : 1;
  fprintf(fp,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"720\" "
          "height=\"%zu\" role=\"img\">\n",
          p->nwhatif * 26 + 6);
  for (size_t i = 0; i < p->nwhatif; i++) {
    const gf_plan_whatif *w = &p->whatif[i];
    double wd = 420.0 * w->gpus_needed / max;
    if (wd > 420)
      wd = 420;
    fprintf(fp,
            "<text x=\"164\" y=\"%zu\" text-anchor=\"end\">%s</text><rect "
            "x=\"170\" y=\"%zu\" width=\"%.1f\" height=\"18\" "
            "class=\"used\"/><text x=\"%.1f\" y=\"%zu\">%u GPUs</text>\n",
            i * 26 + 19, w->policy, i * 26 + 4, wd, 176 + wd, i * 26 + 19,
            w->gpus_needed);
  }
  fprintf(fp, "</svg>\n");
}

static void html_workloads(const gf_plan *p, FILE *fp) {
  fprintf(fp, "<h2>Most wasteful workloads</h2>\n<table class=\"workloads\">"
              "<tr><th>workload</th><th>pods</th><th>request</th>"
              "<th>GPUs held</th><th>used</th><th>waste</th>"
              "<th>waste / month</th><th>recommended</th><th>flags</th>"
              "</tr>\n");
  for (size_t i = 0; i < p->nwls && i < 25; i++) {
    const gf_plan_workload *w = &p->wls[i].pub;
    fprintf(fp, "<tr><td>");
    esc(fp, w->kind);
    fprintf(fp, " ");
    esc(fp, w->ns);
    fprintf(fp, "/");
    esc(fp, w->name);
    fprintf(fp, "</td><td>%u</td><td>%s</td>", w->pods,
            gf_plan_req_name(w->request));
    cell(fp, "gpus_held", w->gpus_held, 2);
    if (gf__plan_wl_unmeasured(w)) {
      unknown_cell(fp, "gpus_used");
      unknown_cell(fp, "waste_gpus");
      unknown_cell(fp, "waste_per_month");
    } else {
      cell(fp, "gpus_used", w->gpus_used, 2);
      cell(fp, "waste_gpus", w->waste_gpus, 2);
      cell(fp, "waste_per_month", w->waste_per_month, 0);
    }
    if (w->action == GF_PLAN_SHARE)
      fprintf(fp, "<td>%" PRId64 " MiB, %d%%</td>", w->rec_mem_mib,
              w->rec_compute);
    else
      fprintf(fp, "<td>keep</td>");
    fprintf(fp, "<td>");
    for (unsigned b = 0, any = 0; b < GF_PLAN_NFLAGS; b++)
      if (w->flags & (1u << b)) {
        fprintf(fp, "%s%s", any ? ", " : "", gf_plan_flag_name(b));
        any = 1;
      }
    fprintf(fp, "</td></tr>\n");
  }
  fprintf(fp, "</table>\n");
}

int gf__plan_write_html(const gf_plan *p, FILE *fp) {
  const gf_plan_totals *t = &p->today;
  fprintf(fp,
          "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
          "<title>gpufrac plan</title>\n<style>\n"
          "body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}\n"
          ".cards{display:flex;gap:1em;flex-wrap:wrap}\n"
          ".card{border:1px solid #ccc;border-radius:6px;padding:.8em 1.2em}"
          "\n.card b{display:block;font-size:1.6em}\n"
          "table{border-collapse:collapse;margin:.5em 0 1.5em}\n"
          "td,th{border-bottom:1px solid #ddd;padding:3px 8px;"
          "text-align:right}\ntd:first-child,th:first-child{text-align:left}"
          "\nsvg text{font:12px sans-serif}\n.held{fill:#c6dbef}"
          ".used{fill:#2171b5}\n</style></head><body>\n"
          "<h1>gpufrac plan</h1>\n<p>%u nodes (%u with GPUs), %u pods "
          "(%u hold GPUs, %u GPU pods pending).  Money per month at "
          "%.0f hours.</p>\n<div class=\"cards\">\n",
          t->nodes, t->gpu_nodes, t->pods, t->gpu_pods, t->pending_gpu_pods,
          GF_PLAN_HOURS_PER_MONTH);
  html_cards(p, fp);
  if (p->nwhatif)
    html_whatif(p, fp);
  bars(fp, "Held vs used per namespace (GPUs)", p->nss, p->nnss);
  group_table(fp, "namespaces", p->nss, p->nnss, false);
  bars(fp, "Held vs used per node type (GPUs)", p->types, p->ntypes);
  group_table(fp, "node_types", p->types, p->ntypes, true);

  html_workloads(p, fp);
  if (p->nwarnings) {
    fprintf(fp, "<h2>Warnings</h2>\n<ul class=\"warnings\">\n");
    for (size_t i = 0; i < p->nwarnings; i++) {
      fprintf(fp, "<li>");
      esc(fp, p->warnings[i]);
      fprintf(fp, "</li>\n");
    }
    fprintf(fp, "</ul>\n");
  }
  fprintf(fp, "<p>Generated by gpufrac plan; how each figure is computed: "
              "docs/plan.md.</p>\n</body></html>\n");
  return ferror(fp) ? GF_EIO : 0;
}
