/*
 * gpufrac plan: what fractional GPUs would give back on a cluster, from a
 * snapshot and optional DCGM usage (docs/plan.md).  Options only; the work
 * is in src/plan (gpufrac/plan.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "gpufrac/plan.h"
#include "gpufrac/quantity.h"

#define MAX_FILES 16

static void usage(FILE *fp) {
  fprintf(
      fp,
      "usage: gpufrac plan --snapshot FILE [--snapshot FILE] [options]\n"
      "       gpufrac plan --kubeconfig FILE [--context NAME] [options]\n"
      "       gpufrac plan --in-cluster [options]\n"
      "       gpufrac plan --example [options]\n"
      "\n"
      "Reads a cluster snapshot ('kubectl get nodes,pods -A -o json', "
      "or the nodes\n"
      "and the pods in two files) and optional DCGM usage from "
      "Prometheus, and\n"
      "reports GPUs held, used and wasted per workload and namespace, a "
      "gpufrac\n"
      "request per workload, and what the same pods need placed by the "
      "whole,\n"
      "fgd and gpufrac policies on the same nodes.  Changes nothing in "
      "the cluster.\n"
      "\n"
      "options:\n"
      "  --snapshot FILE   a v1 List / NodeList / PodList as JSON "
      "(repeatable)\n"
      "  --kubeconfig FILE list nodes and pods from the cluster (read-only;\n"
      "                    deploy/planner-rbac.yaml grants what it needs)\n"
      "  --context NAME    the kubeconfig context (default: current)\n"
      "  --in-cluster      the same with the pod's service account\n"
      "  --usage FILE      Prometheus query-API JSON of "
      "DCGM_FI_DEV_FB_USED,\n"
      "                    DCGM_FI_DEV_GPU_UTIL, "
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE\n"
      "                    (repeatable)\n"
      "  --example         the bundled example cluster "
      "(data/plan-example)\n"
      "  --price P         price per GPU-hour: one number for every "
      "model, or\n"
      "                    MODEL=P[,MODEL=P..] (substring of the GPU "
      "product)\n"
      "                    before the default table in docs/plan.md\n"
      "  --headroom PCT    added to observed peaks (default 20)\n"
      "  --min-samples N   fewer memory samples on a pod: flagged "
      "(default 24)\n"
      "  --format F        text (default) or json\n"
      "  --out DIR         also write summary.json, CSVs, report.html "
      "and\n"
      "                    patches/ (strategic merge patches; nothing "
      "applied)\n"
      "  --no-whatif       skip the placement what-if\n"
      "  --data DIR        bundled data directory (default: the build's)\n"
      "  -h, --help        this help\n");
}

static int bad_usage(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static int bad_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "gpufrac plan: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(see 'gpufrac plan --help')\n");
  va_end(ap);
  return GF_EXIT_USAGE;
}

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

int cmd_plan(int argc, char **argv) {
  const char *snaps[MAX_FILES], *usages[MAX_FILES];
  size_t nsnaps = 0, nusages = 0;
  const char *format = "text", *out = NULL, *data = GF_DATA_DIR;
  const char *kubeconfig = NULL, *context = NULL, *prometheus = NULL;
  const char *node_types = NULL;
  int64_t window = 7 * 86400;
  bool example = false, in_cluster = false;
  gf_plan_options o;
  gf_plan_options_init(&o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return GF_EXIT_OK;
    }
    if (strcmp(a, "--example") == 0) {
      example = true;
      continue;
    }
    if (strcmp(a, "--in-cluster") == 0) {
      in_cluster = true;
      continue;
    }
    if (strcmp(a, "--no-whatif") == 0) {
      o.no_whatif = true;
      continue;
    }
    bool takes = strcmp(a, "--snapshot") == 0 || strcmp(a, "--usage") == 0 ||
                 strcmp(a, "--price") == 0 || strcmp(a, "--headroom") == 0 ||
                 strcmp(a, "--min-samples") == 0 ||
                 strcmp(a, "--format") == 0 || strcmp(a, "--out") == 0 ||
                 strcmp(a, "--data") == 0 || strcmp(a, "--kubeconfig") == 0 ||
                 strcmp(a, "--context") == 0 ||
                 strcmp(a, "--prometheus") == 0 || strcmp(a, "--window") == 0 ||
                 strcmp(a, "--node-types") == 0;
    if (!takes)
      return bad_usage("unknown option '%s'", a);
    if (i + 1 >= argc)
      return bad_usage("%s needs a value", a);
    const char *v = argv[++i];
    if (strcmp(a, "--snapshot") == 0 || strcmp(a, "--usage") == 0) {
      bool snap = a[2] == 's';
      size_t *n = snap ? &nsnaps : &nusages;
      if (*n >= MAX_FILES)
        return bad_usage("%s given too many times", a);
      (snap ? snaps : usages)[(*n)++] = v;
    } else if (strcmp(a, "--price") == 0) {
      o.prices = v;
    } else if (strcmp(a, "--headroom") == 0) {
      char buf[32];
      size_t len = strlen(v);
      if (len == 0 || len >= sizeof(buf))
        return bad_usage("--headroom '%s': a percent, e.g. 20 or 20%%", v);
      memcpy(buf, v, len + 1);
      if (buf[len - 1] == '%')
        buf[len - 1] = '\0';
      int64_t x;
      if (gf_parse_int64(buf, 0, 1000, &x, NULL))
        return bad_usage("--headroom '%s': a whole percent in 0..1000", v);
      o.headroom_pct = (double)x;
    } else if (strcmp(a, "--min-samples") == 0) {
      int64_t x;
      if (gf_parse_int64(v, 0, 1000000, &x, NULL))
        return bad_usage("--min-samples '%s': a count in 0..1000000", v);
      o.min_samples = (uint32_t)x;
    } else if (strcmp(a, "--format") == 0) {
      if (strcmp(v, "text") != 0 && strcmp(v, "json") != 0)
        return bad_usage("--format '%s': text or json", v);
      format = v;
    } else if (strcmp(a, "--out") == 0) {
      out = v;
    } else if (strcmp(a, "--kubeconfig") == 0) {
      kubeconfig = v;
    } else if (strcmp(a, "--context") == 0) {
      context = v;
    } else if (strcmp(a, "--node-types") == 0) {
      node_types = v;
    } else if (strcmp(a, "--prometheus") == 0) {
      prometheus = v;
    } else if (strcmp(a, "--window") == 0) {
      if (parse_window(v, &window))
        return bad_usage("--window '%s': N followed by m, h or d (1m to "
                         "90d)",
                         v);
    } else {
      data = v;
    }
  }
  int sources = (example ? 1 : 0) + (nsnaps ? 1 : 0) + (kubeconfig ? 1 : 0) +
                (in_cluster ? 1 : 0);
  if (sources > 1)
    return bad_usage("%s", "--example, --snapshot, --kubeconfig and "
                           "--in-cluster: give one of them");
  if (!sources)
    return bad_usage("%s", "no snapshot: give --snapshot FILE, --kubeconfig "
                           "FILE, --in-cluster or --example");
  if (context && !kubeconfig)
    return bad_usage("%s", "--context needs --kubeconfig");

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
