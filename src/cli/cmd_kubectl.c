/*
 * `kubectl gpufrac ...` (the plugin: gpufrac called as kubectl-gpufrac, a
 * symlink the build makes) and `gpufrac kubectl ...`: the cluster's GPU
 * shares as kubectl would show them (docs/kubectl.md).
 *
 *   top                    per node and GPU: shares, compute granted,
 *                          memory used / granted, holders
 *   describe pod NAME      a pod's grant: node, container, GPUs, and what
 *                          kube-scheduler said about it
 *   why-pending POD        kube-scheduler's FailedScheduling reasons
 *                          (the extender's among them) and, with
 *                          --extender URL, the extender's reason per node
 *
 * Read-only: GET and LIST through the API server (src/kube), plus one POST
 * /filter to the extender when --extender is given.  The agents' metrics
 * are read through the API server's pod proxy
 * (/api/v1/namespaces/NS/pods/POD:PORT/proxy/metrics), so the command needs
 * no route to pod IPs, only kubectl's own credentials (pods/proxy get in
 * the agents' namespace).
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/kube.h"
#include "parse_options.h"
#include "why_pending.h"

#define PAGE 500
#define MAX_COLS 9

typedef struct kopts {
  const char *kubeconfig, *context, *ns, *output, *agent_ns, *extender;
  bool all_ns;
} kopts;

/* ---- output -------------------------------------------------------------*/

/* YAML for a JSON value: block style, strings double-quoted JSON-style
 * (valid YAML), at indent `ind`. */
static void yaml_scalar(FILE *f, const json_t *v) {
  if (json_is_string(v)) {
    char *s = json_dumps(v, JSON_ENCODE_ANY);
    fputs(s ? s : "\"\"", f);
    free(s);
  } else {
    char *s = json_dumps(v, JSON_ENCODE_ANY);
    fputs(s ? s : "null", f);
    free(s);
  }
}

static bool yaml_empty(const json_t *v) {
  return (json_is_object(v) && json_object_size(v) == 0) ||
         (json_is_array(v) && json_array_size(v) == 0);
}

static void yaml_value(FILE *f, const json_t *v, int ind);

static void yaml_nested(FILE *f, const json_t *v, int ind) {
  if (yaml_empty(v)) {
    fputs(json_is_object(v) ? " {}\n" : " []\n", f);
  } else if (json_is_object(v) || json_is_array(v)) {
    fputc('\n', f);
    yaml_value(f, v, ind + 2);
  } else {
    fputc(' ', f);
    yaml_scalar(f, v);
    fputc('\n', f);
  }
}

static void yaml_value(FILE *f, const json_t *v, int ind) {
  if (json_is_object(v)) {
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)v, k, x) {
      json_t *key = json_string(k);
      fprintf(f, "%*s", ind, "");
      yaml_scalar(f, key);
      json_decref(key);
      fputc(':', f);
      yaml_nested(f, x, ind);
    }
  } else if (json_is_array(v)) {
    size_t i;
    const json_t *x;
    json_array_foreach(v, i, x) {
      fprintf(f, "%*s-", ind, "");
      yaml_nested(f, x, ind);
    }
  } else {
    fprintf(f, "%*s", ind, "");
    yaml_scalar(f, v);
    fputc('\n', f);
  }
}

/* Prints doc as -o asks (json, yaml).  0, or GF_EXIT_USAGE for another
 * format. */
static int print_doc(const kopts *o, const json_t *doc) {
  if (strcmp(o->output, "json") == 0) {
    char *s = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!s)
      return GF_EXIT_FAIL;
    printf("%s\n", s);
    free(s);
    return GF_EXIT_OK;
  }
  yaml_value(stdout, doc, 0);
  return GF_EXIT_OK;
}

/* A table: rows of up to MAX_COLS cells, printed with kubectl's layout
 * (upper-case header, columns three spaces apart). */
typedef struct table {
  int ncols;
  const char *head[MAX_COLS];
  json_t *rows; /* array of arrays of strings */
} table;

static void table_print(const table *t) {
  size_t w[MAX_COLS] = {0};
  for (int c = 0; c < t->ncols; c++)
    w[c] = strlen(t->head[c]);
  size_t i;
  const json_t *r;
  json_array_foreach(t->rows, i, r) {
    for (int c = 0; c < t->ncols; c++) {
      size_t l = strlen(json_string_value(json_array_get(r, (size_t)c)));
      if (l > w[c])
        w[c] = l;
    }
  }
  for (int c = 0; c < t->ncols; c++)
    printf("%-*s%s", c + 1 < t->ncols ? (int)w[c] : 0, t->head[c],
           c + 1 < t->ncols ? "   " : "\n");
  json_array_foreach(t->rows, i, r) {
    for (int c = 0; c < t->ncols; c++)
      printf("%-*s%s", c + 1 < t->ncols ? (int)w[c] : 0,
             json_string_value(json_array_get(r, (size_t)c)),
             c + 1 < t->ncols ? "   " : "\n");
  }
}

static void fmt_bytes(int64_t b, char *buf, size_t cap) {
  static const char *const u[] = {"", "Ki", "Mi", "Gi", "Ti"};
  int k = 0;
  double v = (double)b;
  while (v >= 1024 && k < 4) {
    v /= 1024;
    k++;
  }
  if (k == 0 || v >= 100 || v == (double)(int64_t)v)
    snprintf(buf, cap, "%.0f%s", v, u[k]);
  else
    snprintf(buf, cap, "%.1f%s", v, u[k]);
}

/* ---- the API server -----------------------------------------------------*/

static int connect_kube(const kopts *o, gf_kube_config **kc, gf_kube **k) {
  return gf__cli_kube_connect("kubectl gpufrac", o->kubeconfig, o->context, kc,
                              k);
}

/* The API server's URL, for error messages (set once connected). */
static const char *api_server = "the API server";

static json_t *list(gf_kube *k, const char *path, const char *label) {
  gf_kube_list_opts lo = {.limit = PAGE, .label_selector = label};
  json_t *l = NULL;
  gf_diag d = {""};
  if (gf_kube_list_all(k, path, &lo, &l, &d)) {
    fprintf(stderr, "kubectl gpufrac: API server %s: %s\n", api_server, d.msg);
    return NULL;
  }
  return l;
}

static const char *jstr(const json_t *o, const char *a, const char *b) {
  const json_t *x = json_object_get(o, a);
  if (b)
    x = json_object_get(x, b);
  return json_is_string(x) ? json_string_value(x) : "";
}

static const char *annotation(const json_t *obj, const char *key) {
  const json_t *a =
      json_object_get(json_object_get(obj, "metadata"), "annotations");
  const json_t *v = json_object_get(a, key);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

/* 0, or a usage error naming what is not a Kubernetes name. */
static int check_name(const char *what, const char *s, bool dots) {
  if (gf__cli_k8s_name_ok(s, dots))
    return 0;
  fprintf(stderr,
          "kubectl gpufrac: %s '%s' is not a valid Kubernetes name (%s: "
          "lower-case letters, digits, '-'%s)\n",
          what, s, dots ? "a DNS-1123 subdomain" : "a DNS-1123 label",
          dots ? " and '.'" : ", 63 at most");
  return GF_EXIT_USAGE;
}

static const char *ns_of(const kopts *o, gf_kube_config *kc) {
  if (o->ns)
    return o->ns;
  const char *n = gf_kube_config_namespace(kc);
  return n && *n ? n : "default";
}

/* ---- top ----------------------------------------------------------------*/

/* The value of `metric{...gpu="uuid"...}` in a Prometheus text body, or -1
 * when absent. */
static double metric_for(const char *text, const char *metric,
                         const char *uuid) {
  char key[256];
  snprintf(key, sizeof(key), "gpu=\"%s\"", uuid);
  size_t ml = strlen(metric);
  for (const char *p = text; p && *p;) {
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    char line[1024];
    if (len > ml && len < sizeof(line) && strncmp(p, metric, ml) == 0 &&
        p[ml] == '{') {
      const char *close = memchr(p, '}', len);
      snprintf(line, sizeof(line), "%.*s", (int)len, p);
      if (close && strstr(line, key) &&
          strstr(line, key) < line + (close - p)) {
        char *end = NULL;
        errno = 0;
        double v = strtod(line + (close - p) + 1, &end);
        if (end != line + (close - p) + 1 && errno == 0)
          return v;
      }
    }
    p = e ? e + 1 : NULL;
  }
  return -1;
}

/* The agent pod on node and its metrics port (the container port named
 * metrics; 9473 when none is named). */
static const json_t *agent_on(const json_t *agents, const char *node,
                              int *port) {
  size_t i;
  const json_t *p;
  json_array_foreach(json_object_get(agents, "items"), i, p) {
    if (strcmp(jstr(p, "spec", "nodeName"), node) != 0)
      continue;
    *port = 9473;
    size_t ci, pi;
    const json_t *c, *cp;
    json_array_foreach(
        json_object_get(json_object_get(p, "spec"), "containers"), ci, c) {
      json_array_foreach(json_object_get(c, "ports"), pi, cp) {
        if (strcmp(jstr(cp, "name", NULL), "metrics") == 0 &&
            json_is_integer(json_object_get(cp, "containerPort")))
          *port = (int)json_integer_value(json_object_get(cp, "containerPort"));
      }
    }
    return p;
  }
  return NULL;
}

/* What the grants of pods hold on one GPU (uuid). */
typedef struct held {
  int shares, compute;
  int64_t mem;
  bool unlimited; /* a holder with no memory limit */
  bool whole;     /* a holder of the whole GPU (no memory limit, 100%) */
  json_t *holders;
} held;

/* Grants on one GPU that overlap beyond it: more than all its compute or
 * memory, or a whole GPU given beside another grant (two grants of one
 * GPU that the extender must never write; docs/kubectl.md). */
static bool overcommitted(const held *h, int64_t total) {
  return h->compute > 100 || (total > 0 && h->mem > total) ||
         (h->whole && h->shares > 1);
}

static void held_on(const json_t *pods, const char *node, const char *uuid,
                    held *h) {
  memset(h, 0, sizeof(*h));
  h->holders = json_array();
  size_t i;
  const json_t *p;
  json_array_foreach(json_object_get(pods, "items"), i, p) {
    const char *phase = jstr(p, "status", "phase");
    if (strcmp(jstr(p, "spec", "nodeName"), node) != 0 ||
        strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)
      continue;
    const char *gt = annotation(p, GF_GRANT_ANNOTATION);
    gf_grant g;
    gf_diag d = {""};
    if (!gt || gf_grant_parse(gt, strlen(gt), &g, &d))
      continue;
    for (uint32_t c = 0; c < g.ncontainers; c++)
      for (uint32_t k = 0; k < g.containers[c].ngpus; k++) {
        const gf_grant_gpu *gg = &g.containers[c].gpus[k];
        if (strcmp(gg->uuid, uuid) != 0)
          continue;
        h->shares++;
        h->compute += gg->compute_pct;
        h->mem += gg->mem_bytes;
        h->unlimited = h->unlimited || gg->mem_bytes == 0;
        h->whole = h->whole || (gg->mem_bytes == 0 && gg->compute_pct >= 100);
        char who[2 * GF_NAME_MAX + 2];
        snprintf(who, sizeof(who), "%s/%s", jstr(p, "metadata", "namespace"),
                 jstr(p, "metadata", "name"));
        json_array_append_new(h->holders, json_string(who));
      }
  }
}

/* The node's agent's /metrics through the API server's pod proxy (malloc'd),
 * or NULL with a line on stderr saying why memory used is unknown. */
static char *agent_metrics(const kopts *o, gf_kube *k, const json_t *agents,
                           const char *name) {
  int port = 0;
  const json_t *ap = agent_on(agents, name, &port);
  char *text = NULL;
  if (!ap) {
    fprintf(stderr,
            "kubectl gpufrac: node %s: no gpufrac-node pod in %s; memory "
            "used unknown\n",
            name, o->agent_ns);
  } else if (strcmp(jstr(ap, "status", "phase"), "Running") != 0 ||
             !*jstr(ap, "status", "podIP")) {
    /* the API server's proxy has no address to call ("HTTP 400 ...
     * address not allowed"): say what is wrong instead */
    const char *ph = jstr(ap, "status", "phase");
    fprintf(stderr,
            "kubectl gpufrac: node %s: agent pod %s is %s, not running; "
            "memory used unknown (kubectl -n %s describe pod %s)\n",
            name, jstr(ap, "metadata", "name"), *ph ? ph : "without a phase",
            o->agent_ns, jstr(ap, "metadata", "name"));
  } else {
    char mp[1024];
    snprintf(mp, sizeof(mp), "/api/v1/namespaces/%s/pods/%s:%d/proxy/metrics",
             o->agent_ns, jstr(ap, "metadata", "name"), port);
    size_t len = 0;
    gf_diag md = {""};
    if (gf_kube_get_text(k, mp, &text, &len, &md))
      fprintf(stderr, "kubectl gpufrac: node %s: agent metrics: %s\n", name,
              md.msg);
  }
  return text;
}

/* One GPU of node `name` for top: a table row in t and an object in doc
 * (what its pods hold, what the agent's metrics text says it uses), and a
 * warning on stderr when the grants on it overlap beyond the GPU. */
static void top_gpu(table *t, json_t *doc, const json_t *pods, const char *text,
                    const char *name, const gf_inventory_gpu *ig) {
  held h;
  held_on(pods, name, ig->uuid, &h);
  double used =
      text ? metric_for(text, "gpufrac_gpu_memory_used_bytes", ig->uuid) : -1;
  char idx[16], sh[16], cp[16], mu[32], mg[32], mt[32];
  snprintf(idx, sizeof(idx), "%u", ig->index);
  snprintf(sh, sizeof(sh), "%d", h.shares);
  snprintf(cp, sizeof(cp), "%d%%", h.compute);
  if (used >= 0)
    fmt_bytes((int64_t)used, mu, sizeof(mu));
  else
    snprintf(mu, sizeof(mu), "<unknown>");
  if (h.unlimited)
    snprintf(mg, sizeof(mg), "all");
  else
    fmt_bytes(h.mem, mg, sizeof(mg));
  fmt_bytes(ig->mem_bytes, mt, sizeof(mt));
  char *hs = NULL;
  size_t hl = 0;
  FILE *hf = open_memstream(&hs, &hl);
  size_t hi;
  const json_t *hv;
  json_array_foreach(h.holders, hi, hv)
      fprintf(hf, "%s%s", hi ? "," : "", json_string_value(hv));
  fclose(hf);
  json_array_append_new(t->rows,
                        json_pack("[sssssssss]", name, idx, ig->model, sh, cp,
                                  mu, mg, mt, hs && *hs ? hs : "<none>"));
  json_t *row =
      json_pack("{s:s,s:i,s:s,s:s,s:i,s:i,s:I,s:I,s:o}", "node", name, "gpu",
                (int)ig->index, "UUID", ig->uuid, "modelName", ig->model,
                "shares", h.shares, "computeGrantedPercent", h.compute,
                "memoryGrantedBytes", (json_int_t)h.mem, "memoryTotalBytes",
                (json_int_t)ig->mem_bytes, "holders", h.holders);
  json_object_set_new(row, "memoryUsedBytes",
                      used >= 0 ? json_integer((json_int_t)used) : json_null());
  json_object_set_new(row, "memoryUnlimitedHolder", json_boolean(h.unlimited));
  bool over = overcommitted(&h, ig->mem_bytes);
  json_object_set_new(row, "overcommitted", json_boolean(over));
  if (over)
    fprintf(stderr,
            "kubectl gpufrac: node %s GPU %u: grants overlap beyond the "
            "GPU (%d%% compute, %s memory granted of %s%s), held by %s; "
            "delete the later pod so it is placed again\n",
            name, ig->index, h.compute, mg, mt,
            h.whole ? ", one of them the whole GPU" : "",
            hs && *hs ? hs : "<none>");
  free(hs);
  json_array_append_new(doc, row);
}

static int cmd_top(const kopts *o, gf_kube *k, gf_kube_config *kc) {
  char podpath[512];
  if (o->all_ns || !o->ns)
    snprintf(podpath, sizeof(podpath), "/api/v1/pods");
  else
    snprintf(podpath, sizeof(podpath), "/api/v1/namespaces/%s/pods",
             ns_of(o, kc));
  char agentpath[512];
  snprintf(agentpath, sizeof(agentpath), "/api/v1/namespaces/%s/pods",
           o->agent_ns);
  json_t *nodes = list(k, "/api/v1/nodes", NULL);
  json_t *pods = nodes ? list(k, podpath, NULL) : NULL;
  json_t *agents =
      pods ? list(k, agentpath, "app.kubernetes.io/name=gpufrac-node") : NULL;
  if (!agents) {
    json_decref(nodes);
    json_decref(pods);
    return GF_EXIT_FAIL;
  }
  json_t *doc = json_array();
  table t = {9,
             {"NODE", "GPU", "MODEL", "SHARES", "COMPUTE", "MEM-USED",
              "MEM-GRANTED", "MEM-TOTAL", "HOLDERS"},
             json_array()};
  int rc = GF_EXIT_OK;
  size_t i;
  const json_t *n;
  json_array_foreach(json_object_get(nodes, "items"), i, n) {
    const char *name = jstr(n, "metadata", "name");
    const char *it = annotation(n, GF_INVENTORY_ANNOTATION);
    gf_inventory inv;
    gf_diag d = {""};
    if (!it)
      continue; /* not a gpufrac node */
    if (gf_inventory_parse(it, strlen(it), &inv, &d)) {
      fprintf(stderr, "kubectl gpufrac: node %s: %s\n", name, d.msg);
      continue;
    }
    char *text = agent_metrics(o, k, agents, name);
    for (uint32_t g = 0; g < inv.ngpus; g++) {
      const gf_inventory_gpu *ig = &inv.gpus[g];
      top_gpu(&t, doc, pods, text, name, ig);
    }
    free(text);
  }
  if (o->output)
    rc = print_doc(o, doc);
  else if (json_array_size(t.rows))
    table_print(&t);
  else
    fprintf(stderr, "No gpufrac GPUs found (no node has %s).\n",
            GF_INVENTORY_ANNOTATION);
  json_decref(t.rows);
  json_decref(doc);
  json_decref(nodes);
  json_decref(pods);
  json_decref(agents);
  return rc;
}

/* ---- describe pod, why-pending -------------------------------------------*/

/* The pod's events, oldest first (reason, message, count). */
static json_t *pod_events(gf_kube *k, const char *ns, const json_t *pod) {
  char path[512], sel[512];
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", ns);
  snprintf(sel, sizeof(sel), "involvedObject.uid=%s",
           jstr(pod, "metadata", "uid"));
  gf_kube_list_opts lo = {.limit = PAGE, .field_selector = sel};
  json_t *l = NULL;
  gf_diag d = {""};
  json_t *out = json_array();
  if (gf_kube_list_all(k, path, &lo, &l, &d)) {
    fprintf(stderr, "kubectl gpufrac: events: API server %s: %s\n", api_server,
            d.msg);
    return out;
  }
  size_t i;
  const json_t *e;
  json_array_foreach(json_object_get(l, "items"), i, e) {
    json_t *c = json_object_get(e, "count");
    json_array_append_new(
        out, json_pack(
                 "{s:s,s:s,s:s,s:I}", "type", jstr(e, "type", NULL), "reason",
                 jstr(e, "reason", NULL), "message", jstr(e, "message", NULL),
                 "count",
                 (json_int_t)(json_is_integer(c) ? json_integer_value(c) : 1)));
  }
  json_decref(l);
  return out;
}

static json_t *get_pod(gf_kube *k, const char *ns, const char *name) {
  char path[1024];
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
  json_t *p = NULL;
  gf_diag d = {""};
  if (gf_kube_get(k, path, &p, &d)) {
    fprintf(stderr, "kubectl gpufrac: pod %s/%s: API server %s: %s\n", ns, name,
            api_server, d.msg);
    return NULL;
  }
  /* A 200 that is not a Pod (a proxy's page, another object): refused,
   * not printed as an empty pod. */
  const json_t *kind = json_object_get(p, "kind");
  if (!json_is_object(p) ||
      (kind && (!json_is_string(kind) ||
                strcmp(json_string_value(kind), "Pod") != 0)) ||
      !json_is_object(json_object_get(p, "metadata")) ||
      !json_is_object(json_object_get(p, "spec"))) {
    fprintf(stderr,
            "kubectl gpufrac: pod %s/%s: API server %s answered %s%s%s, "
            "not a Pod\n",
            ns, name, api_server, json_is_string(kind) ? "a " : "something",
            json_is_string(kind) ? json_string_value(kind) : "",
            json_is_string(kind) ? "" : " else");
    json_decref(p);
    return NULL;
  }
  return p;
}

/* The pod's request as gpufrac reads it (gpufrac/podreq.h, HAMi's and
 * KAI's words included) into out[cap]; false when there is none to say. */
static bool request_text(const json_t *p, char *out, size_t cap) {
  gf_podreq r;
  gf_diag d = {""};
  if (gf_podreq_read(p, GF_PODREQ_ACCEPT_ALL, &r, &d)) {
    snprintf(out, cap, "refused by gpufrac: %s", d.msg);
    return true;
  }
  if (!r.req.gpu_count)
    return false;
  gf__podreq_text(&r, out, cap);
  return true;
}

/* How describe reads a request, next to a grant it may differ from. */
#define REQUEST_READ                                                           \
  "as the extender would read it now, accepting HAMi's and KAI's names; a "    \
  "bound pod with a grant is booked from its grant, not from this"

/* describe's table of the GPUs a grant gives (describe's "grant" array:
 * container, GPU, UUID, memory, compute). */
static void print_grant_gpus(const json_t *gpus) {
  table t = {
      5, {"  CONTAINER", "GPU", "UUID", "MEMORY", "COMPUTE"}, json_array()};
  size_t i;
  const json_t *x;
  json_array_foreach(gpus, i, x) {
    char c[72], gi[16], m[32], cp[16];
    snprintf(c, sizeof(c), "  %s", jstr(x, "container", NULL));
    snprintf(gi, sizeof(gi), "%d",
             (int)json_integer_value(json_object_get(x, "gpu")));
    int64_t mb = json_integer_value(json_object_get(x, "memoryBytes"));
    if (mb)
      fmt_bytes(mb, m, sizeof(m));
    else
      snprintf(m, sizeof(m), "no limit");
    int cpv = (int)json_integer_value(json_object_get(x, "computePercent"));
    if (cpv)
      snprintf(cp, sizeof(cp), "%d%%", cpv);
    else
      snprintf(cp, sizeof(cp), "none reserved");
    json_array_append_new(
        t.rows, json_pack("[sssss]", c, gi, jstr(x, "UUID", NULL), m, cp));
  }
  table_print(&t);
  json_decref(t.rows);
}

static int cmd_describe(const kopts *o, gf_kube *k, gf_kube_config *kc,
                        const char *name) {
  const char *ns = ns_of(o, kc);
  json_t *p = get_pod(k, ns, name);
  if (!p)
    return GF_EXIT_FAIL;
  json_t *doc = json_pack("{s:s,s:s,s:s,s:s}", "name", name, "namespace", ns,
                          "node", jstr(p, "spec", "nodeName"), "phase",
                          jstr(p, "status", "phase"));
  const char *gt = annotation(p, GF_GRANT_ANNOTATION);
  gf_grant g;
  gf_diag d = {""};
  json_t *gpus = json_array();
  bool has = gt && gf_grant_parse(gt, strlen(gt), &g, &d) == 0;
  if (gt && !has)
    json_object_set_new(doc, "grantError", json_string(d.msg));
  for (uint32_t c = 0; has && c < g.ncontainers; c++)
    for (uint32_t i = 0; i < g.containers[c].ngpus; i++) {
      const gf_grant_gpu *gg = &g.containers[c].gpus[i];
      json_array_append_new(
          gpus, json_pack("{s:s,s:i,s:s,s:I,s:i}", "container",
                          g.containers[c].name, "gpu", (int)gg->index, "UUID",
                          gg->uuid, "memoryBytes", (json_int_t)gg->mem_bytes,
                          "computePercent", (int)gg->compute_pct));
    }
  json_object_set_new(doc, "grant", gpus);
  char req[512];
  bool has_req = request_text(p, req, sizeof(req));
  /* What the extender books: a bound pod's grant when it has one, whatever
   * its request reads as now (docs/scheduler.md, "After a restart"). */
  bool from_grant = gt && jstr(p, "spec", "nodeName")[0];
  json_object_set_new(doc, "bookedFrom",
                      json_string(from_grant ? "grant" : "request"));
  if (has_req) {
    json_object_set_new(doc, "request", json_string(req));
    json_object_set_new(doc, "requestRead", json_string(REQUEST_READ));
  }
  json_t *ev = pod_events(k, ns, p);
  json_object_set_new(doc, "events", ev);
  int rc = GF_EXIT_OK;
  if (o->output) {
    rc = print_doc(o, doc);
  } else {
    printf("Name:       %s\nNamespace:  %s\nNode:       %s\nPhase:      %s\n",
           name, ns,
           jstr(p, "spec", "nodeName")[0] ? jstr(p, "spec", "nodeName")
                                          : "<none>",
           jstr(p, "status", "phase"));
    if (has_req && !from_grant)
      printf("Request:    %s\n", req);
    if (!gt)
      printf("Grant:      <none> (no %s annotation)\n", GF_GRANT_ANNOTATION);
    else if (!has)
      printf("Grant:      unreadable: %s\n", d.msg);
    else
      printf("Grant:      node %s%s\n", g.node,
             from_grant ? ": what the pod holds (the node agent enforces it, "
                          "the extender books it)"
                        : "");
    if (from_grant && gt && !has)
      printf("            the extender books the GPUs it names, whole, or "
             "else every GPU of %s\n",
             jstr(p, "spec", "nodeName"));
    if (json_array_size(gpus))
      print_grant_gpus(gpus);
    if (has_req && from_grant)
      printf("Request:    %s\n            (%s)\n", req, REQUEST_READ);
    printf("Events:\n");
    size_t i;
    const json_t *e;
    if (!json_array_size(ev))
      printf("  <none>\n");
    json_array_foreach(ev, i, e)
        printf("  %s  %s: %s\n", jstr(e, "type", NULL), jstr(e, "reason", NULL),
               jstr(e, "message", NULL));
  }
  json_decref(doc);
  json_decref(p);
  return rc;
}

/* kube-scheduler's "0/3 nodes are available: 1 A, 2 B. preemption: ..."
 * into [{"nodes": 1, "reason": "A"}, ...].  A group starts after ", " (or
 * ": ") with a count and a space; reasons may hold commas themselves. */
static json_t *split_reasons(const char *msg) {
  json_t *out = json_array();
  const char *p = strstr(msg, "nodes are available: ");
  if (!p)
    return out;
  p += strlen("nodes are available: ");
  const char *end = strstr(p, ". preemption:");
  if (!end)
    end = p + strlen(p);
  while (p < end) {
    char *num_end = NULL;
    long cnt = strtol(p, &num_end, 10);
    if (num_end == p || *num_end != ' ')
      break;
    const char *r = num_end + 1;
    const char *q = r;
    const char *next = end;
    while ((q = strstr(q, ", ")) && q < end) {
      const char *s = q + 2;
      char *ne = NULL;
      strtol(s, &ne, 10);
      if (ne != s && *ne == ' ') {
        next = q;
        break;
      }
      q = s;
    }
    size_t rl = (size_t)(next - r);
    if (rl && r[rl - 1] == '.')
      rl--;
    json_t *rs = json_stringn(r, rl);
    json_array_append_new(out, json_pack("{s:I,s:o}", "nodes", (json_int_t)cnt,
                                         "reason", rs ? rs : json_string("")));
    p = next == end ? end : next + 2;
  }
  return out;
}

/* POSTs {Pod, NodeNames} to the extender's /filter; its per-node answer. */
static json_t *ask_extender(const kopts *o, const json_t *nodes,
                            const json_t *pod) {
  if (!nodes)
    return NULL;
  json_t *names = json_array();
  size_t i;
  const json_t *n;
  json_array_foreach(json_object_get(nodes, "items"), i, n)
      json_array_append_new(names, json_string(jstr(n, "metadata", "name")));
  json_t *args = json_pack("{s:O,s:o}", "Pod", pod, "NodeNames", names);
  gf_kube_config *ec = NULL;
  gf_kube *ek = NULL;
  gf_diag d = {""};
  json_t *r = NULL;
  if (gf_kube_config_new_plain(&ec, o->extender, NULL, &d) ||
      gf_kube_new(&ek, ec, NULL, &d) ||
      gf_kube_create(ek, "/filter", args, &r, &d)) {
    fprintf(stderr, "kubectl gpufrac: extender %s: %s\n", o->extender, d.msg);
    r = NULL;
  }
  gf_kube_free(ek);
  gf_kube_config_free(ec);
  json_decref(args);
  if (!r)
    return NULL;
  json_t *per = json_array();
  const char *groups[2] = {"FailedNodes", "FailedAndUnresolvableNodes"};
  for (int g = 0; g < 2; g++) {
    const char *node;
    const json_t *why;
    json_object_foreach(json_object_get(r, groups[g]), node, why)
        json_array_append_new(
            per, json_pack("{s:s,s:s,s:b}", "node", node, "reason",
                           json_is_string(why) ? json_string_value(why) : "",
                           "unresolvable", g == 1));
  }
  json_array_foreach(json_object_get(r, "NodeNames"), i, n)
      json_array_append_new(per, json_pack("{s:s,s:s,s:b}", "node",
                                           json_string_value(n), "reason",
                                           "fits", "unresolvable", 0));
  json_decref(r);
  return per;
}

/* why's table of the extender's verdict on each node (fits, not now,
 * never) with its reason, after a blank line. */
static void print_verdicts(const json_t *per) {
  printf("\n");
  size_t i;
  const json_t *e;
  table t = {3, {"NODE", "VERDICT", "EXTENDER REASON"}, json_array()};
  json_array_foreach(per, i, e) {
    bool fits = strcmp(jstr(e, "reason", NULL), "fits") == 0;
    json_array_append_new(
        t.rows, json_pack("[sss]", jstr(e, "node", NULL),
                          fits ? "fits"
                          : json_is_true(json_object_get(e, "unresolvable"))
                              ? "never"
                              : "not now",
                          fits ? "" : jstr(e, "reason", NULL)));
  }
  table_print(&t);
  json_decref(t.rows);
}

/* How many of the listed nodes run gpufrac's agent: those whose
 * allocatable advertises gpufrac.io/gpu (GF_RES_GPU), not as "0". */
static int count_agent_nodes(const json_t *nodes) {
  int n = 0;
  size_t i;
  const json_t *e;
  json_array_foreach(json_object_get(nodes, "items"), i, e) {
    const json_t *a = json_object_get(
        json_object_get(json_object_get(e, "status"), "allocatable"),
        GF_RES_GPU);
    if (json_is_string(a) && strcmp(json_string_value(a), "0") != 0)
      n++;
  }
  return n;
}

static int cmd_why(const kopts *o, gf_kube *k, gf_kube_config *kc,
                   const char *name) {
  const char *ns = ns_of(o, kc);
  json_t *p = get_pod(k, ns, name);
  if (!p)
    return GF_EXIT_FAIL;
  json_t *doc = json_pack("{s:s,s:s,s:s}", "name", name, "namespace", ns,
                          "node", jstr(p, "spec", "nodeName"));
  json_t *ev = pod_events(k, ns, p);
  const char *last = NULL;
  size_t i;
  const json_t *e;
  json_array_foreach(ev, i, e) {
    if (strcmp(jstr(e, "reason", NULL), "FailedScheduling") == 0)
      last = jstr(e, "message", NULL);
  }
  json_object_set_new(doc, "schedulerMessage", json_string(last ? last : ""));
  json_t *groups = split_reasons(last ? last : "");
  json_object_set_new(doc, "reasons", groups);
  char req[512], hint[1024];
  bool has_req = request_text(p, req, sizeof(req));
  if (has_req)
    json_object_set_new(doc, "request", json_string(req));
  /* What the hint needs besides the message: is the request gpufrac's to
   * read, which nodes run the agent (advertise gpufrac.io/gpu), and with
   * --extender whether any node's memory and compute fit. */
  gf__why_ctx wc = {.scheduler = jstr(p, "spec", "schedulerName"),
                    .agent_nodes = -1,
                    .extender_fits = -1};
  gf_podreq pr;
  gf_diag prd = {""};
  if (gf_podreq_read(p, GF_PODREQ_ACCEPT_ALL, &pr, &prd) == 0)
    wc.req_ok = pr.req.gpu_count > 0;
  wc.words = pr.words;
  json_t *nodes = last || o->extender ? list(k, "/api/v1/nodes", NULL) : NULL;
  if (nodes)
    wc.agent_nodes = count_agent_nodes(nodes);
  json_t *per = o->extender ? ask_extender(o, nodes, p) : NULL;
  json_decref(nodes);
  if (per) {
    json_object_set_new(doc, "extender", per);
    wc.extender_fits = 0;
    json_array_foreach(per, i, e) {
      /* fits, or held back only by the slots (src/sched/sched.c says
       * "device-plugin slots" then): the GPUs have the room */
      const char *why = jstr(e, "reason", NULL);
      if (strcmp(why, "fits") == 0 || strstr(why, "device-plugin slots"))
        wc.extender_fits++;
    }
  }
  gf__why_kind hk = gf__why_hint(last, &wc, hint, sizeof(hint));
  if (hk)
    json_object_set_new(doc, "hint", json_string(hint));
  /* --extender given and not answered: said on stderr, exit 1 */
  int rc = o->extender && !per ? GF_EXIT_FAIL : GF_EXIT_OK;
  if (o->output) {
    int prc = print_doc(o, doc);
    if (prc)
      rc = prc;
  } else if (jstr(p, "spec", "nodeName")[0]) {
    printf("pod %s/%s is not pending: bound to %s\n", ns, name,
           jstr(p, "spec", "nodeName"));
  } else {
    if (!last)
      printf("pod %s/%s: no FailedScheduling event yet\n", ns, name);
    else if (!json_array_size(groups))
      /* not in kube-scheduler's "N nodes are available: ..." form: its
       * words as they are */
      printf("kube-scheduler: %s\n", last);
    else {
      table t = {2, {"NODES", "REASON"}, json_array()};
      json_array_foreach(groups, i, e) {
        char c[24];
        snprintf(c, sizeof(c), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(e, "nodes")));
        json_array_append_new(t.rows,
                              json_pack("[ss]", c, jstr(e, "reason", NULL)));
      }
      table_print(&t);
      json_decref(t.rows);
    }
    if (has_req)
      printf("request: %s\n", req);
    if (per)
      print_verdicts(per);
    if (hk)
      printf("\nhint: %s\n", hint);
  }
  json_decref(ev);
  json_decref(doc);
  json_decref(p);
  return rc;
}

/* ---- the command --------------------------------------------------------*/

static const gf__opt_cmd kubectl_cmd = {
    .prog = "kubectl gpufrac",
    .usage = "usage: kubectl gpufrac top [-A | -n NS] [-o json|yaml]\n"
             "       kubectl gpufrac describe pod NAME [-n NS] [-o json|yaml]\n"
             "       kubectl gpufrac why-pending POD [-n NS] [--extender URL]\n"
             "                                   [-o json|yaml]\n"
             "       kubectl gpufrac doctor [--namespace NS] [-o json]\n"
             "       kubectl gpufrac --version\n"
             "  (or: gpufrac kubectl ...)\n"
             "\n"
             "gpufrac's GPU shares as the API server and the node agents see "
             "them\n(docs/kubectl.md).\n"
             "\n",
    .mixed = true,
    .unknown = "flag",
};

/* The flags into o and up to three operands into pos; -1 to go on, else
 * the exit code. */
static int kubectl_parse(kopts *o, const char **pos, int *npos, int argc,
                         char **argv) {
  const gf__opt flags[] = {
      GF__OPT_STRING("kubeconfig", "PATH",
                     "kubeconfig (default $KUBECONFIG, then\n~/.kube/config)",
                     &o->kubeconfig),
      GF__OPT_STRING("context", "NAME", "kubeconfig context (default current)",
                     &o->context),
      GF__OPT_SHORT_STRING('n', "namespace", "NS",
                           "the pods' namespace (default the context's,\n"
                           "then default); top: only pods there",
                           &o->ns),
      GF__OPT_SHORT_FLAG('A', "all-namespaces",
                         "top: pods of every namespace (default)", &o->all_ns),
      GF__OPT_SHORT_STRING('o', "output", "FMT",
                           "json or yaml instead of columns", &o->output),
      GF__OPT_STRING("agent-namespace", "NS",
                     "where the node agents run (default\ngpufrac-system)",
                     &o->agent_ns),
      GF__OPT_STRING("extender", "URL",
                     "why-pending: also ask the extender's /filter\n"
                     "at URL (its urlPrefix) for each node's reason",
                     &o->extender),
      GF__OPT_END(),
  };
  gf__opt_cmd c = kubectl_cmd;
  c.opts = flags;
  gf__opt_iter it;
  gf__opt_iter_init(&it, &c, argc, argv);
  const char *v;
  int id;
  while ((id = gf__opt_next(&it, &v)) == GF__OPT_OPERAND) {
    if (*npos == 3)
      return gf__opt_usage_error(&c, "unexpected argument '%s'", v);
    pos[(*npos)++] = v;
  }
  if (id < 0)
    return it.exit;
  /* what is after "--" is operands too */
  for (int i = it.rest; i < argc; i++) {
    if (*npos == 3)
      return gf__opt_usage_error(&c, "unexpected argument '%s'", argv[i]);
    pos[(*npos)++] = argv[i];
  }
  if (o->output && strcmp(o->output, "json") && strcmp(o->output, "yaml")) {
    fprintf(stderr,
            "kubectl gpufrac: -o %s: the formats are json and yaml (the "
            "default is columns)\n",
            o->output);
    return GF_EXIT_USAGE;
  }
  const char *sub = pos[0];
  bool ok =
      sub && ((strcmp(sub, "top") == 0 && *npos == 1) ||
              (strcmp(sub, "describe") == 0 && *npos == 3 &&
               (strcmp(pos[1], "pod") == 0 || strcmp(pos[1], "pods") == 0 ||
                strcmp(pos[1], "po") == 0)) ||
              (strcmp(sub, "why-pending") == 0 && *npos == 2));
  if (!ok) {
    gf__opt_help(&c, stderr);
    return GF_EXIT_USAGE;
  }
  return -1;
}

int cmd_kubectl(int argc, char **argv) {
  if (argc == 2 &&
      (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0)) {
    printf("kubectl gpufrac %s\n", GF_VERSION);
    return GF_EXIT_OK;
  }
  if (argc > 1 && strcmp(argv[1], "doctor") == 0) {
    char self[] = "kubectl-doctor"; /* cmd_doctor names itself so */
    argv[1] = self;
    return cmd_doctor(argc - 1, argv + 1);
  }
  kopts o = {.agent_ns = "gpufrac-system"};
  const char *pos[3] = {NULL, NULL, NULL};
  int npos = 0;
  int rc = kubectl_parse(&o, pos, &npos, argc, argv);
  if (rc >= 0)
    return rc;
  const char *sub = pos[0], *name = pos[npos - 1];
  /* names go into API paths: checked before any URL is built */
  if ((o.ns && (rc = check_name("namespace", o.ns, false))) ||
      (rc = check_name("agent namespace", o.agent_ns, false)) ||
      (strcmp(sub, "top") != 0 && (rc = check_name("pod", name, true))))
    return rc;
  if (o.extender) {
    /* the URL is checked before any request, as the names are */
    gf_kube_config *ec = NULL;
    gf_diag ed = {""};
    if (gf_kube_config_new_plain(&ec, o.extender, NULL, &ed)) {
      fprintf(stderr, "kubectl gpufrac: --extender '%s': %s\n", o.extender,
              ed.msg);
      return GF_EXIT_USAGE;
    }
    gf_kube_config_free(ec);
  }
  gf_kube_config *kc = NULL;
  gf_kube *k = NULL;
  rc = connect_kube(&o, &kc, &k);
  if (rc)
    return rc;
  api_server = gf_kube_config_server(kc);
  if ((rc = check_name("namespace", ns_of(&o, kc), false))) {
    gf_kube_free(k);
    gf_kube_config_free(kc);
    return rc;
  }
  if (strcmp(sub, "top") == 0)
    rc = cmd_top(&o, k, kc);
  else if (strcmp(sub, "describe") == 0)
    rc = cmd_describe(&o, k, kc, name);
  else
    rc = cmd_why(&o, k, kc, name);
  api_server = "the API server";
  gf_kube_free(k);
  gf_kube_config_free(kc);
  return rc;
}
