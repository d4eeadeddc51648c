/*
 * Writing a plan: the terminal summary, the JSON document (its fields are
 * listed in docs/plan.md and only ever added to), the CSVs and --out DIR.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "internal.h"

/* Figures in the JSON and CSVs carry 4 decimals (GPUs) or 2 (money), so
 * the same plan always prints the same text. */

/* ---- terminal ------------------------------------------------------------*/

static void flags_text(unsigned flags, char *buf, size_t cap) {
  buf[0] = '\0';
  size_t len = 0;
  for (unsigned i = 0; i < GF_PLAN_NFLAGS; i++)
    if (flags & (1u << i)) {
      int w = snprintf(buf + len, cap - len, "%s%s", len ? "," : "",
                       gf_plan_flag_name(i));
      if (w < 0 || (size_t)w >= cap - len)
        break;
      len += (size_t)w;
    }
}

static void text_today(const gf_plan *p, FILE *fp) {
  char m[40];
  const gf_plan_totals *t = &p->today;
  fprintf(fp,
          "  GPU bill    %8.0f GPUs     %s/month (every GPU of the %u GPU "
          "nodes at its price)\n",
          t->gpus, gf__plan_money(gf__plan_bill(p), m, sizeof(m)),
          t->gpu_nodes);
  fprintf(fp, "  GPUs held   %8.1f of %.0f    %s/month\n", t->gpus_held,
          t->gpus, gf__plan_money(t->held_per_month, m, sizeof(m)));
  fprintf(fp, "  GPUs used   %8.1f          (pods with usage data",
          t->gpus_used);
  if (t->gpus_unmeasured > 0)
    fprintf(fp, "; %.1f held by pods without it", t->gpus_unmeasured);
  fprintf(fp, ")\n");
  if (gf__plan_unmeasured(t->gpus_held, t->gpus_unmeasured))
    fprintf(fp, "  Waste        unknown: no pod has usage data (give --usage "
                "FILE or --prometheus URL;\n               docs/plan.md, "
                "\"Usage\")\n\n");
  else
    fprintf(fp, "  Waste       %8.1f GPUs     %s/month%s\n\n", t->waste_gpus,
            gf__plan_money(t->waste_per_month, m, sizeof(m)),
            t->gpus_unmeasured > 0 ? " (of the pods with usage data)" : "");
}

static void text_fleet(const gf_plan *p, FILE *fp) {
  char m[40], a[40], b[40];
  double bill = gf__plan_bill(p);
  fprintf(fp, "Cheapest fleet of the given node types (whole nodes: the "
              "bill you can reach):\n");
  for (size_t i = 0; i < p->nwhatif; i++) {
    const gf_plan_whatif *w = &p->whatif[i];
    fprintf(fp, "  %-8s %u nodes, %u GPUs, %s/month", w->policy, w->fleet_nodes,
            w->fleet_gpus, gf__plan_money(w->fleet_per_month, m, sizeof(m)));
    for (size_t k = 0, any = 0; k < w->nfleet; k++)
      if (w->fleet[k].nodes) {
        fprintf(fp, "%s%u x %s", any ? ", " : " (", w->fleet[k].nodes,
                w->fleet[k].name);
        any = 1;
      }
    fprintf(fp, ")%s\n", w->fleet_unplaced ? " [some pods fit no type]" : "");
    fprintf(fp, "           %s less than today's GPU bill",
            gf__plan_money(bill - w->fleet_per_month, a, sizeof(a)));
    if (i)
      fprintf(fp, ", %s less than the whole-GPU fleet",
              gf__plan_money(p->whatif[0].fleet_per_month - w->fleet_per_month,
                             b, sizeof(b)));
    fprintf(fp, "\n");
  }
  fprintf(fp, "\n");
}

static void text_whatif(const gf_plan *p, FILE *fp) {
  char m[40];
  fprintf(fp, "What-if, the same pods on the same nodes (fgd and gpufrac "
              "with the recommended requests):\n");
  fprintf(fp, "  %-8s %6s %6s %9s %6s  %12s\n", "policy", "GPUs", "nodes",
          "unplaced", "freed", "saved/month");
  for (size_t i = 0; i < p->nwhatif; i++) {
    const gf_plan_whatif *w = &p->whatif[i];
    fprintf(fp, "  %-8s %6u %6u %9u %6d  %12s\n", w->policy, w->gpus_needed,
            w->nodes_needed, w->pods_unplaced, w->gpus_freed,
            gf__plan_money(w->saved_per_month, m, sizeof(m)));
  }
  bool unplaced = false;
  for (size_t i = 0; i < p->nwhatif; i++)
    unplaced |= p->whatif[i].pods_unplaced > 0;
  if (unplaced)
    fprintf(fp, "  unplaced: pods no GPU of their model could take under that "
                "policy (whole: as\n  whole GPUs, pods that share today need "
                "more GPUs than there are); the\n  warnings name the first "
                "of each.\n");
  fprintf(fp,
          "  saved/month prices each freed GPU at its node's price: an "
          "upper bound, money\n  only once freed GPUs add up to whole nodes "
          "you remove (nodes: what these\n  placements still use).  %s\n\n",
          p->whatif[0].has_fleet ? "The cheapest fleet below prices whole "
                                   "nodes."
                                 : "--node-types FILE prices whole nodes.");
  if (p->whatif[0].has_fleet)
    text_fleet(p, fp);
}

int gf_plan_write_text(const gf_plan *p, FILE *fp) {
  char m[40];
  const gf_plan_totals *t = &p->today;
  fprintf(fp,
          "gpufrac plan: %u nodes (%u with %.0f GPUs), %u pods (%u hold "
          "GPUs, %u GPU pods pending)\n\n",
          t->nodes, t->gpu_nodes, t->gpus, t->pods, t->gpu_pods,
          t->pending_gpu_pods);
  text_today(p, fp);
  if (p->nwhatif)
    text_whatif(p, fp);
  if (p->nnss) {
    fprintf(fp, "Namespaces by waste:\n");
    for (size_t i = 0; i < p->nnss && i < 5; i++) {
      const gf_plan_group *g = &p->nss[i];
      if (gf__plan_unmeasured(g->gpus_held, g->gpus_unmeasured))
        fprintf(fp, "  %-24s held %6.1f  used unknown (no usage data)\n",
                g->name, g->gpus_held);
      else
        fprintf(fp, "  %-24s held %6.1f  used %6.1f  waste %6.1f  %s/month\n",
                g->name, g->gpus_held, g->gpus_used, g->waste_gpus,
                gf__plan_money(g->waste_per_month, m, sizeof(m)));
    }
    if (p->nnss > 5)
      fprintf(fp, "  (%zu more)\n", p->nnss - 5);
    fprintf(fp, "\n");
  }
  if (p->nwls) {
    fprintf(fp, "Most wasteful workloads:\n");
    for (size_t i = 0; i < p->nwls && i < 5; i++) {
      const gf_plan_workload *w = &p->wls[i].pub;
      char fl[160];
      flags_text(w->flags, fl, sizeof(fl));
      if (gf__plan_wl_unmeasured(w))
        fprintf(fp, "  %s %s/%s: %u pods, held %.1f, waste unknown -> ",
                w->kind, w->ns, w->name, w->pods, w->gpus_held);
      else
        fprintf(fp, "  %s %s/%s: %u pods, held %.1f, waste %.1f -> ", w->kind,
                w->ns, w->name, w->pods, w->gpus_held, w->waste_gpus);
      if (w->action == GF_PLAN_SHARE)
        fprintf(fp, "%" PRId64 " MiB, %d%% compute", w->rec_mem_mib,
                w->rec_compute);
      else
        fprintf(fp, "keep");
      fprintf(fp, "%s%s%s\n", fl[0] ? " [" : "", fl, fl[0] ? "]" : "");
    }
    fprintf(fp, "\n");
  }
  if (p->nwarnings)
    fprintf(fp, "%zu warnings (listed in --format json and --out DIR)\n",
            p->nwarnings);
  return ferror(fp) ? GF_EIO : 0;
}

/* ---- JSON ----------------------------------------------------------------*/

static json_t *group_json(const gf_plan_group *g, bool type) {
  json_t *o = json_object();
  if (!o)
    return NULL;
  json_object_set_new(o, "name", json_string(g->name));
  if (type) {
    json_object_set_new(o, "gpu_model", json_string(g->gpu_model));
    json_object_set_new(o, "nodes", json_integer(g->nodes));
    json_object_set_new(o, "gpus", json_real(gf__plan_r4(g->gpus)));
  }
  json_object_set_new(o, "pods", json_integer(g->pods));
  json_object_set_new(o, "gpus_held", json_real(gf__plan_r4(g->gpus_held)));
  json_object_set_new(o, "gpus_used", json_real(gf__plan_r4(g->gpus_used)));
  json_object_set_new(o, "gpus_unmeasured",
                      json_real(gf__plan_r4(g->gpus_unmeasured)));
  json_object_set_new(o, "waste_gpus", json_real(gf__plan_r4(g->waste_gpus)));
  json_object_set_new(o, "waste_per_month",
                      json_real(gf__plan_r2(g->waste_per_month)));
  if (type)
    json_object_set_new(o, "price_per_gpu_hour",
                        json_real(gf__plan_r2(g->price_per_gpu_hour)));
  return o;
}

static json_t *opt_num(double x) {
  return x < 0 ? json_null() : json_real(gf__plan_r4(x));
}

static json_t *workload_json(const gf_plan_workload *w) {
  json_t *o = json_object();
  json_t *rec = json_object();
  json_t *flags = json_array();
  if (!o || !rec || !flags) {
    json_decref(o);
    json_decref(rec);
    json_decref(flags);
    return NULL;
  }
  json_object_set_new(o, "kind", json_string(w->kind));
  json_object_set_new(o, "namespace", json_string(w->ns));
  json_object_set_new(o, "name", json_string(w->name));
  json_object_set_new(o, "pods", json_integer(w->pods));
  json_object_set_new(o, "request", json_string(gf_plan_req_name(w->request)));
  json_object_set_new(o, "gpu_model", json_string(w->gpu_model));
  json_object_set_new(o, "gpu_model_memory_mib", json_integer(w->gpu_mem_mib));
  json_object_set_new(o, "gpus_per_pod", json_integer(w->gpus_per_pod));
  json_object_set_new(o, "gpus_held", json_real(gf__plan_r4(w->gpus_held)));
  json_object_set_new(o, "gpus_used", json_real(gf__plan_r4(w->gpus_used)));
  json_object_set_new(o, "waste_gpus", json_real(gf__plan_r4(w->waste_gpus)));
  json_object_set_new(o, "waste_per_month",
                      json_real(gf__plan_r2(w->waste_per_month)));
  json_object_set_new(o, "measured", json_boolean(w->measured));
  json_object_set_new(o, "samples", json_integer(w->samples));
  json_object_set_new(o, "mem_peak_mib", opt_num(w->mem_peak_mib));
  json_object_set_new(o, "mem_p95_mib", opt_num(w->mem_p95_mib));
  json_object_set_new(o, "compute_peak_pct", opt_num(w->compute_peak_pct));
  json_object_set_new(o, "compute_p95_pct", opt_num(w->compute_p95_pct));
  json_object_set_new(
      rec, "action",
      json_string(w->action == GF_PLAN_SHARE ? "share" : "keep"));
  json_object_set_new(rec, "gpu_memory_mib", json_integer(w->rec_mem_mib));
  json_object_set_new(rec, "gpu_compute_pct", json_integer(w->rec_compute));
  json_object_set_new(rec, "gpus_per_pod", json_real(gf__plan_r4(w->rec_gpus)));
  for (unsigned i = 0; i < GF_PLAN_NFLAGS; i++)
    if (w->flags & (1u << i))
      json_array_append_new(flags, json_string(gf_plan_flag_name(i)));
  json_object_set_new(rec, "flags", flags);
  json_object_set_new(o, "recommendation", rec);
  return o;
}

/* The fleet of a what-if, or null when no node types were given. */
static json_t *fleet_json(const gf_plan *p, const gf_plan_whatif *w) {
  if (!w->has_fleet)
    return json_null();
  json_t *f = json_object(), *types = json_array();
  if (!f || !types) {
    json_decref(f);
    json_decref(types);
    return NULL;
  }
  json_object_set_new(f, "nodes", json_integer(w->fleet_nodes));
  json_object_set_new(f, "gpus", json_integer(w->fleet_gpus));
  json_object_set_new(f, "pods_unplaced", json_integer(w->fleet_unplaced));
  json_object_set_new(f, "per_month",
                      json_real(gf__plan_r2(w->fleet_per_month)));
  json_object_set_new(
      f, "saved_vs_bill_per_month",
      json_real(gf__plan_r2(gf__plan_bill(p) - w->fleet_per_month)));
  json_object_set_new(f, "saved_vs_whole_per_month",
                      json_real(gf__plan_r2(p->whatif[0].fleet_per_month -
                                            w->fleet_per_month)));
  for (size_t t = 0; t < w->nfleet; t++)
    json_array_append_new(types,
                          json_pack("{s:s,s:I}", "name", w->fleet[t].name,
                                    "nodes", (json_int_t)w->fleet[t].nodes));
  json_object_set_new(f, "types", types);
  return f;
}

static json_t *plan_json(const gf_plan *p) {
  const gf_plan_totals *t = &p->today;
  json_t *root = json_object();
  json_t *set = json_object(), *cl = json_object(), *td = json_object();
  json_t *nss = json_array(), *types = json_array(), *wls = json_array();
  json_t *wi = json_array(), *warn = json_array();
  if (!root || !set || !cl || !td || !nss || !types || !wls || !wi || !warn)
    goto fail;
  json_object_set_new(root, "version", json_integer(GF_PLAN_JSON_VERSION));
  json_object_set_new(set, "headroom_pct", json_real(p->opt.headroom_pct));
  json_object_set_new(set, "min_samples", json_integer(p->opt.min_samples));
  json_object_set_new(set, "hours_per_month",
                      json_real(GF_PLAN_HOURS_PER_MONTH));
  json_object_set_new(root, "settings", set);
  set = NULL;
  json_object_set_new(cl, "nodes", json_integer(t->nodes));
  json_object_set_new(cl, "gpu_nodes", json_integer(t->gpu_nodes));
  json_object_set_new(cl, "gpus", json_real(gf__plan_r4(t->gpus)));
  json_object_set_new(cl, "pods", json_integer(t->pods));
  json_object_set_new(cl, "gpu_pods", json_integer(t->gpu_pods));
  json_object_set_new(cl, "pending_gpu_pods",
                      json_integer(t->pending_gpu_pods));
  json_object_set_new(root, "cluster", cl);
  cl = NULL;
  json_object_set_new(td, "gpus", json_real(gf__plan_r4(t->gpus)));
  json_object_set_new(td, "gpus_held", json_real(gf__plan_r4(t->gpus_held)));
  json_object_set_new(td, "gpus_used", json_real(gf__plan_r4(t->gpus_used)));
  json_object_set_new(td, "gpus_unmeasured",
                      json_real(gf__plan_r4(t->gpus_unmeasured)));
  json_object_set_new(td, "gpus_idle", json_real(gf__plan_r4(t->gpus_idle)));
  json_object_set_new(td, "waste_gpus", json_real(gf__plan_r4(t->waste_gpus)));
  json_object_set_new(td, "held_per_month",
                      json_real(gf__plan_r2(t->held_per_month)));
  json_object_set_new(td, "waste_per_month",
                      json_real(gf__plan_r2(t->waste_per_month)));
  json_object_set_new(td, "bill_per_month",
                      json_real(gf__plan_r2(gf__plan_bill(p))));
  json_object_set_new(
      td, "waste_known",
      json_boolean(!gf__plan_unmeasured(t->gpus_held, t->gpus_unmeasured)));
  json_object_set_new(root, "today", td);
  td = NULL;
  for (size_t i = 0; i < p->nnss; i++)
    json_array_append_new(nss, group_json(&p->nss[i], false));
  json_object_set_new(root, "namespaces", nss);
  nss = NULL;
  for (size_t i = 0; i < p->ntypes; i++)
    json_array_append_new(types, group_json(&p->types[i], true));
  json_object_set_new(root, "node_types", types);
  types = NULL;
  for (size_t i = 0; i < p->nwls; i++)
    json_array_append_new(wls, workload_json(&p->wls[i].pub));
  json_object_set_new(root, "workloads", wls);
  wls = NULL;
  for (size_t i = 0; i < p->nwhatif; i++) {
    const gf_plan_whatif *w = &p->whatif[i];
    json_t *o = json_object();
    if (!o)
      goto fail;
    json_object_set_new(o, "policy", json_string(w->policy));
    json_object_set_new(o, "gpus_needed", json_integer(w->gpus_needed));
    json_object_set_new(o, "nodes_needed", json_integer(w->nodes_needed));
    json_object_set_new(o, "pods_placed", json_integer(w->pods_placed));
    json_object_set_new(o, "pods_unplaced", json_integer(w->pods_unplaced));
    json_object_set_new(o, "gpus_freed", json_integer(w->gpus_freed));
    json_object_set_new(o, "saved_per_month",
                        json_real(gf__plan_r2(w->saved_per_month)));
    json_object_set_new(o, "fleet", fleet_json(p, w));
    json_array_append_new(wi, o);
  }
  json_object_set_new(root, "whatif", wi);
  wi = NULL;
  for (size_t i = 0; i < p->nwarnings; i++)
    json_array_append_new(warn, json_string(p->warnings[i]));
  json_object_set_new(root, "warnings", warn);
  return root;
fail:
  json_decref(root);
  json_decref(set);
  json_decref(cl);
  json_decref(td);
  json_decref(nss);
  json_decref(types);
  json_decref(wls);
  json_decref(wi);
  json_decref(warn);
  return NULL;
}

int gf_plan_write_json(const gf_plan *p, FILE *fp) {
  json_t *root = plan_json(p);
  if (!root)
    return GF_ENOMEM;
  int rc = json_dumpf(
      root, fp, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
  json_decref(root);
  fputc('\n', fp);
  return rc || ferror(fp) ? GF_EIO : 0;
}

/* ---- CSV -----------------------------------------------------------------*/

/* A CSV field: quoted when it holds a comma, quote or newline. */
static void csv_str(FILE *fp, const char *s) {
  if (!strpbrk(s, ",\"\n\r")) {
    fputs(s, fp);
    return;
  }
  fputc('"', fp);
  for (; *s; s++) {
    if (*s == '"')
      fputc('"', fp);
    fputc(*s, fp);
  }
  fputc('"', fp);
}

static void csv_workloads(const gf_plan *p, FILE *fp) {
  fprintf(fp, "kind,namespace,name,pods,request,gpu_model,gpus_held,"
              "gpus_used,waste_gpus,waste_per_month,measured,samples,"
              "mem_peak_mib,mem_p95_mib,compute_p95_pct,action,"
              "rec_gpu_memory_mib,rec_gpu_compute_pct,rec_gpus_per_pod,"
              "flags\n");
  for (size_t i = 0; i < p->nwls; i++) {
    const gf_plan_workload *w = &p->wls[i].pub;
    char fl[160];
    flags_text(w->flags, fl, sizeof(fl));
    csv_str(fp, w->kind);
    fputc(',', fp);
    csv_str(fp, w->ns);
    fputc(',', fp);
    csv_str(fp, w->name);
    fprintf(fp, ",%u,%s,", w->pods, gf_plan_req_name(w->request));
    csv_str(fp, w->gpu_model);
    fprintf(fp,
            ",%.4f,%.4f,%.4f,%.2f,%s,%u,%.1f,%.1f,%.1f,%s,%" PRId64 ",%d,%.4f,",
            w->gpus_held, w->gpus_used, w->waste_gpus, w->waste_per_month,
            w->measured ? "true" : "false", w->samples, w->mem_peak_mib,
            w->mem_p95_mib, w->compute_p95_pct,
            w->action == GF_PLAN_SHARE ? "share" : "keep", w->rec_mem_mib,
            w->rec_compute, w->rec_gpus);
    csv_str(fp, fl);
    fputc('\n', fp);
  }
}

static void csv_groups(const gf_plan_group *g, size_t n, bool type, FILE *fp) {
  fprintf(fp,
          "name,%spods,gpus_held,gpus_used,gpus_unmeasured,waste_gpus,"
          "waste_per_month%s\n",
          type ? "gpu_model,nodes,gpus," : "",
          type ? ",price_per_gpu_hour" : "");
  for (size_t i = 0; i < n; i++) {
    csv_str(fp, g[i].name);
    fputc(',', fp);
    if (type) {
      csv_str(fp, g[i].gpu_model);
      fprintf(fp, ",%u,%.0f,", g[i].nodes, g[i].gpus);
    }
    fprintf(fp, "%u,%.4f,%.4f,%.4f,%.4f,%.2f", g[i].pods, g[i].gpus_held,
            g[i].gpus_used, g[i].gpus_unmeasured, g[i].waste_gpus,
            g[i].waste_per_month);
    if (type)
      fprintf(fp, ",%.2f", g[i].price_per_gpu_hour);
    fputc('\n', fp);
  }
}

static void csv_whatif(const gf_plan *p, FILE *fp) {
  fprintf(fp, "policy,gpus_needed,nodes_needed,pods_placed,pods_unplaced,"
              "gpus_freed,saved_per_month,fleet_nodes,fleet_gpus,"
              "fleet_pods_unplaced,fleet_per_month\n");
  for (size_t i = 0; i < p->nwhatif; i++) {
    const gf_plan_whatif *w = &p->whatif[i];
    fprintf(fp, "%s,%u,%u,%u,%u,%d,%.2f", w->policy, w->gpus_needed,
            w->nodes_needed, w->pods_placed, w->pods_unplaced, w->gpus_freed,
            w->saved_per_month);
    if (w->has_fleet)
      fprintf(fp, ",%u,%u,%u,%.2f\n", w->fleet_nodes, w->fleet_gpus,
              w->fleet_unplaced, w->fleet_per_month);
    else
      fprintf(fp, ",,,,\n");
  }
}

/* ---- --out DIR -----------------------------------------------------------*/

static int mkdir_p1(const char *dir, gf_diag *d) {
  if (mkdir(dir, 0755) == 0 || errno == EEXIST) {
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
      return 0;
    return gf_diag_set(d, GF_EIO, "%s: exists and is not a directory", dir);
  }
  return gf_diag_set(d, GF_EIO, "%s: %s", dir, strerror(errno));
}

typedef enum {
  OUT_JSON,
  OUT_WL,
  OUT_NS,
  OUT_TYPES,
  OUT_WHATIF,
  OUT_HTML
} out_kind;

static int write_one(const gf_plan *p, const char *dir, const char *file,
                     out_kind k, gf_diag *d) {
  char path[4096];
  if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path))
    return gf_diag_set(d, GF_EINVAL, "%s: path too long", dir);
  FILE *fp = fopen(path, "w");
  if (!fp)
    return gf_diag_set(d, GF_EIO, "%s: %s", path, strerror(errno));
  int rc = 0;
  switch (k) {
  case OUT_JSON:
    rc = gf_plan_write_json(p, fp);
    break;
  case OUT_WL:
    csv_workloads(p, fp);
    break;
  case OUT_NS:
    csv_groups(p->nss, p->nnss, false, fp);
    break;
  case OUT_TYPES:
    csv_groups(p->types, p->ntypes, true, fp);
    break;
  case OUT_WHATIF:
    csv_whatif(p, fp);
    break;
  case OUT_HTML:
    rc = gf__plan_write_html(p, fp);
    break;
  }
  if (ferror(fp))
    rc = GF_EIO;
  if (fclose(fp) && !rc)
    rc = GF_EIO;
  if (rc)
    return gf_diag_set(d, rc, "%s: %s", path, gf_strerror(rc));
  return 0;
}

int gf_plan_write_dir(const gf_plan *p, const char *dir, gf_diag *d) {
  int rc;
  if ((rc = mkdir_p1(dir, d)) ||
      (rc = write_one(p, dir, "summary.json", OUT_JSON, d)) ||
      (rc = write_one(p, dir, "workloads.csv", OUT_WL, d)) ||
      (rc = write_one(p, dir, "namespaces.csv", OUT_NS, d)) ||
      (rc = write_one(p, dir, "node_types.csv", OUT_TYPES, d)) ||
      (rc = write_one(p, dir, "whatif.csv", OUT_WHATIF, d)) ||
      (rc = write_one(p, dir, "report.html", OUT_HTML, d)))
    return rc;
  char pd[4096];
  if ((size_t)snprintf(pd, sizeof(pd), "%s/patches", dir) >= sizeof(pd))
    return gf_diag_set(d, GF_EINVAL, "%s: path too long", dir);
  if ((rc = mkdir_p1(pd, d)))
    return rc;
  return gf__plan_write_patches(p, pd, d);
}
