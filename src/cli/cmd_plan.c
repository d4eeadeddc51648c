/*
 * gpufrac plan: what fractional GPUs would give back on a cluster, from a
 * snapshot and optional DCGM usage (docs/plan.md).  Options only; the work
 * is in src/plan (gpufrac/plan.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "gpufrac/plan.h"
#include "gpufrac/quantity.h"
#include "parse_options.h"

#define MAX_FILES 16

/* "30m", "12h", "7d" -> seconds, 1 minute to 90 days. */
static int parse_window(const char *s, int64_t *out) {
  size_t n = strlen(s);
  if (n < 2 || n > 16)
    return -1;
  char num[20];
  memcpy(num, s, n - 1);
  num[n - 1] = '\0';
  int64_t x, unit = s[n - 1] == 'm'   ? 60
                    : s[n - 1] == 'h' ? 3600
                    : s[n - 1] == 'd' ? 86400
                                      : 0;
  if (!unit || gf_parse_int64(num, 1, 90 * 86400, &x, NULL) ||
      x * unit > 90 * 86400)
    return -1;
  *out = x * unit;
  return 0;
}

enum {
  OPT_SNAPSHOT = 1,
  OPT_USAGE,
  OPT_HEADROOM,
  OPT_MIN_SAMPLES,
  OPT_FORMAT,
  OPT_WINDOW
};

static const gf__opt_cmd plan_cmd = {
    .prog = "gpufrac plan",
    .usage =
        "usage: gpufrac plan --snapshot FILE [--snapshot FILE] [options]\n"
        "       gpufrac plan --kubeconfig FILE [--context NAME] [options]\n"
        "       gpufrac plan --in-cluster [options]\n"
        "       gpufrac plan --example [options]\n"
        "\n"
        "Reads a cluster snapshot ('kubectl get nodes,pods -A -o json', or "
        "the nodes\n"
        "and the pods in two files) and optional DCGM usage from Prometheus, "
        "and\n"
        "reports GPUs held, used and wasted per workload and namespace, a "
        "gpufrac\n"
        "request per workload, and what the same pods need placed by the "
        "whole,\n"
        "fgd and gpufrac policies on the same nodes.  Changes nothing in the "
        "cluster.\n"
        "\n",
};

/* The options into the command's variables (the table names them). */
typedef struct plan_args {
  const char *snaps[MAX_FILES], *usages[MAX_FILES];
  size_t nsnaps, nusages;
  const char *format, *out, *data, *kubeconfig, *context, *prometheus;
  const char *node_types;
  int64_t window;
  bool example, in_cluster, window_given;
} plan_args;

/* One option handed back by id, into a or o: 0, or the usage exit code. */
static int plan_value(const gf__opt_cmd *c, plan_args *a, gf_plan_options *o,
                      int id, const char *v) {
  if (id == OPT_SNAPSHOT || id == OPT_USAGE) {
    bool snap = id == OPT_SNAPSHOT;
    size_t *n = snap ? &a->nsnaps : &a->nusages;
    if (*n >= MAX_FILES)
      return gf__opt_usage_error(c, "%s given too many times",
                                 snap ? "--snapshot" : "--usage");
    (snap ? a->snaps : a->usages)[(*n)++] = v;
  } else if (id == OPT_HEADROOM) {
    char buf[32];
    size_t len = strlen(v);
    if (len == 0 || len >= sizeof(buf))
      return gf__opt_usage_error(c,
                                 "--headroom '%s': a percent, e.g. 20 or "
                                 "20%%",
                                 v);
    memcpy(buf, v, len + 1);
    if (buf[len - 1] == '%')
      buf[len - 1] = '\0';
    int64_t x;
    if (gf_parse_int64(buf, 0, 1000, &x, NULL))
      return gf__opt_usage_error(c,
                                 "--headroom '%s': a whole percent in "
                                 "0..1000",
                                 v);
    o->headroom_pct = (double)x;
  } else if (id == OPT_MIN_SAMPLES) {
    int64_t x;
    if (gf_parse_int64(v, 0, 1000000, &x, NULL))
      return gf__opt_usage_error(c, "--min-samples '%s': a count in 0..1000000",
                                 v);
    o->min_samples = (uint32_t)x;
  } else if (id == OPT_FORMAT) {
    if (strcmp(v, "text") != 0 && strcmp(v, "json") != 0)
      return gf__opt_usage_error(c, "--format '%s': text or json", v);
    a->format = v;
  } else if ((a->window_given = true) && parse_window(v, &a->window)) {
    return gf__opt_usage_error(c,
                               "--window '%s': N followed by m, h or d (1m "
                               "to 90d)",
                               v);
  }
  return 0;
}

/* The options and their combinations into a and o: 0 to go on, else the
 * command ends with *exit (0 after --help, 2 on a usage error). */
static int plan_parse(plan_args *a, gf_plan_options *o, int argc, char **argv,
                      int *exit) {
  const gf__opt table[] = {
      GF__OPT_STRING_ID("snapshot", "FILE",
                        "a v1 List / NodeList / PodList as JSON (repeatable)",
                        OPT_SNAPSHOT),
      GF__OPT_STRING("kubeconfig", "FILE",
                     "list nodes and pods from the cluster (read-only;\n"
                     "deploy/planner-rbac.yaml grants what it needs)",
                     &a->kubeconfig),
      GF__OPT_STRING("context", "NAME",
                     "the kubeconfig context (default: "
                     "current)",
                     &a->context),
      GF__OPT_FLAG("in-cluster", "the same with the pod's service account",
                   &a->in_cluster),
      GF__OPT_STRING_ID("usage", "FILE",
                        "Prometheus query-API JSON of DCGM_FI_DEV_FB_USED,\n"
                        "DCGM_FI_DEV_GPU_UTIL, DCGM_FI_PROF_GR_ENGINE_ACTIVE\n"
                        "(repeatable)",
                        OPT_USAGE),
      GF__OPT_STRING("prometheus", "URL",
                     "read the same usage from a Prometheus server\n"
                     "(range queries over --window; docs/plan.md)",
                     &a->prometheus),
      GF__OPT_STRING_ID("window", "W",
                        "with --prometheus: how far back, N followed by\n"
                        "m, h or d, 1m to 90d (default 7d)",
                        OPT_WINDOW),
      GF__OPT_FLAG("example", "the bundled example cluster (data/plan-example)",
                   &a->example),
      GF__OPT_STRING("price", "P",
                     "price per GPU-hour: one number for every model, or\n"
                     "MODEL=P[,MODEL=P..] (substring of the GPU product)\n"
                     "before the default table in docs/plan.md",
                     &o->prices),
      GF__OPT_STRING("node-types", "FILE",
                     "node types a cheapest fleet may be built from\n"
                     "(JSON; docs/plan.md)",
                     &a->node_types),
      GF__OPT_STRING_ID("headroom", "PCT",
                        "added to observed peaks (default 20)", OPT_HEADROOM),
      GF__OPT_STRING_ID("min-samples", "N",
                        "fewer memory samples on a pod: flagged (default 24)",
                        OPT_MIN_SAMPLES),
      GF__OPT_STRING_ID("format", "F", "text (default) or json", OPT_FORMAT),
      GF__OPT_STRING("out", "DIR",
                     "also write summary.json, CSVs, report.html and\n"
                     "patches/ (strategic merge patches; nothing applied)",
                     &a->out),
      GF__OPT_FLAG("no-whatif", "skip the placement what-if", &o->no_whatif),
      GF__OPT_STRING("data", "DIR",
                     "bundled data directory (default: $GPUFRAC_DATA, "
                     "else found beside the executable)",
                     &a->data),
      GF__OPT_END(),
  };
  gf__opt_cmd c = plan_cmd;
  c.opts = table;
  gf__opt_iter it;
  gf__opt_iter_init(&it, &c, argc, argv);
  const char *v;
  int id;
  while ((id = gf__opt_next(&it, &v)) > 0)
    if ((*exit = plan_value(&c, a, o, id, v)))
      return -1;
  *exit = it.exit;
  if (id < 0)
    return id;
  int sources = (a->example ? 1 : 0) + (a->nsnaps ? 1 : 0) +
                (a->kubeconfig ? 1 : 0) + (a->in_cluster ? 1 : 0);
  if (sources > 1)
    return *exit =
               gf__opt_usage_error(&plan_cmd, "%s",
                                   "--example, --snapshot, --kubeconfig and "
                                   "--in-cluster: give one of them");
  if (!sources)
    return *exit = gf__opt_usage_error(
               &plan_cmd, "%s",
               "no snapshot: give --snapshot FILE, --kubeconfig "
               "FILE, --in-cluster or --example");
  if (a->context && !a->kubeconfig)
    return *exit = gf__opt_usage_error(&plan_cmd, "%s",
                                       "--context needs --kubeconfig");
  return 0;
}

int cmd_plan(int argc, char **argv) {
  plan_args a = {.format = "text", .window = 7 * 86400};
  a.data = gf__cli_data_dir();
  gf_plan_options o;
  gf_plan_options_init(&o);
  int exit;
  if (plan_parse(&a, &o, argc, argv, &exit))
    return exit;
  if (a.window_given && !a.prometheus) {
    fprintf(stderr, "gpufrac plan: --window needs --prometheus (it is the "
                    "range its queries cover)\n(see 'gpufrac plan --help')\n");
    return GF_EXIT_USAGE;
  }
  const char **snaps = a.snaps, **usages = a.usages;
  size_t nsnaps = a.nsnaps, nusages = a.nusages;
  const char *format = a.format, *out = a.out, *data = a.data;
  const char *kubeconfig = a.kubeconfig, *context = a.context;
  const char *prometheus = a.prometheus, *node_types = a.node_types;
  int64_t window = a.window;
  bool example = a.example, in_cluster = a.in_cluster;
  char ex_snap[4096], ex_usage[4096];
  if (example) {
    snprintf(ex_snap, sizeof(ex_snap), "%s/plan-example/snapshot.json", data);
    snprintf(ex_usage, sizeof(ex_usage), "%s/plan-example/usage.json", data);
    snaps[nsnaps++] = ex_snap;
    if (nusages < MAX_FILES)
      usages[nusages++] = ex_usage;
  }
  int code = GF_EXIT_FAIL;
  gf_diag d = {""};
  gf_plan *p = gf_plan_new();
  if (!p) {
    fprintf(stderr, "gpufrac plan: out of memory\n");
    return GF_EXIT_FAIL;
  }
  for (size_t i = 0; i < nsnaps; i++)
    if (gf_plan_load_snapshot(p, snaps[i], &d))
      goto fail;
  if (kubeconfig || in_cluster) {
    gf_kube_config *kc = NULL;
    int krc = kubeconfig
                  ? gf_kube_config_from_kubeconfig(&kc, kubeconfig, context, &d)
                  : gf_kube_config_in_cluster(&kc, NULL, &d);
    if (!krc)
      krc = gf_plan_add_cluster(p, kc, &d);
    gf_kube_config_free(kc);
    if (krc)
      goto fail;
  }
  for (size_t i = 0; i < nusages; i++)
    if (gf_plan_load_usage(p, usages[i], &d))
      goto fail;
  if (node_types && gf_plan_load_node_types(p, node_types, &d))
    goto fail;
  if (prometheus) {
    gf_kube_config *pc = NULL;
    int prc = gf_kube_config_new_plain(&pc, prometheus, NULL, &d);
    if (!prc)
      prc = gf_plan_add_prometheus(p, pc, (int64_t)time(NULL), window, &d);
    gf_kube_config_free(pc);
    if (prc)
      goto fail;
  }
  int rc = gf_plan_run(p, &o, &d);
  if (rc == GF_EINVAL) {
    fprintf(stderr, "gpufrac plan: %s\n", d.msg);
    gf_plan_free(p);
    return GF_EXIT_USAGE;
  }
  if (rc)
    goto fail;
  if (strcmp(format, "json") == 0)
    rc = gf_plan_write_json(p, stdout);
  else
    rc = gf_plan_write_text(p, stdout);
  if (rc) {
    snprintf(d.msg, sizeof(d.msg), "writing the report: %s", gf_strerror(rc));
    goto fail;
  }
  if (out) {
    if (gf_plan_write_dir(p, out, &d))
      goto fail;
    fprintf(stderr, "gpufrac plan: wrote %s/report.html, CSVs and patches/\n",
            out);
  }
  code = GF_EXIT_OK;
  gf_plan_free(p);
  return code;
fail:
  fprintf(stderr, "gpufrac plan: %s\n", d.msg[0] ? d.msg : "failed");
  gf_plan_free(p);
  return code;
}
