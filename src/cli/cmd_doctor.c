/*
 * `gpufrac doctor` and `kubectl gpufrac doctor`: is gpufrac installed and
 * working on this cluster?  Each check reads the API server (GET and LIST
 * only, with kubectl's credentials) and prints PASS, FAIL or SKIP with what
 * it saw and, for a failure, the fix in one sentence (docs/install.md,
 * "Check the install").  Exit 1 when a check fails.
 *
 *   agents        every node a gpufrac-node DaemonSet selects runs its
 *                 agent (Running and Ready) and the agent publishes (the
 *                 gpufrac.io/inventory annotation; a DRA pool: its
 *                 ResourceSlices)
 *   driver        the NVIDIA driver each agent read (the inventory's
 *                 "driver"), as far as the agent can tell
 *   scheduler     the scheduler path: the kube-scheduler configuration the
 *                 chart rendered names a profile and the extender, whose
 *                 Service answers at that address, lies inside the
 *                 cluster's service range and has a ready endpoint
 *   dra           DRA in use: resource.k8s.io/v1 served and gpufrac's
 *                 DeviceClasses present
 *   networkpolicy the extender's NetworkPolicy admits the scheduler (the
 *                 chart's kube-scheduler pods, or the control-plane nodes'
 *                 addresses)
 *   grants        no pod holds a grant in a container that asks no
 *                 gpufrac.io/gpu (kubelet never gave it the GPU)
 *   placeholders  no autoscaler placeholder pending longer than
 *                 --stuck-after
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/kube.h"
#include "parse_options.h"

#define PAGE 500

typedef struct dopts {
  const char *kubeconfig, *context, *ns, *output, *stuck_after;
  int64_t stuck_s;
} dopts;

typedef struct doctor {
  const dopts *o;
  gf_kube *k;
  json_t *checks; /* [{name, status, message, fix}] */
  int failed;
} doctor;

/* ---- reading the API server --------------------------------------------*/

static const char *js(const json_t *o, const char *a, const char *b) {
  const json_t *x = json_object_get(o, a);
  if (b)
    x = json_object_get(x, b);
  return json_is_string(x) ? json_string_value(x) : "";
}

static const json_t *jpath(const json_t *o, const char *const *keys) {
  for (; o && *keys; keys++)
    o = json_object_get(o, *keys);
  return o;
}

/* The List at path (every page), or NULL: *status the HTTP status (404:
 * the resource is not served), msg the error. */
static json_t *dlist(doctor *dr, const char *path, const char *label,
                     long *status, gf_diag *d) {
  gf_kube_list_opts lo = {.limit = PAGE, .label_selector = label};
  json_t *l = NULL;
  *status = 200;
  if (gf_kube_list_all(dr->k, path, &lo, &l, d)) {
    *status = gf_kube_last_status(dr->k);
    return NULL;
  }
  return l;
}

static json_t *items(json_t *list) {
  json_t *i = json_object_get(list, "items");
  return json_is_array(i) ? i : NULL;
}

/* The object at path; NULL with *status 404 when there is none. */
static json_t *dget(doctor *dr, const char *path, long *status, gf_diag *d) {
  json_t *o = NULL;
  *status = 200;
  if (gf_kube_get(dr->k, path, &o, d)) {
    *status = gf_kube_last_status(dr->k);
    return NULL;
  }
  return o;
}

/* ---- results ------------------------------------------------------------*/

static void result(doctor *dr, const char *name, const char *status,
                   const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void result(doctor *dr, const char *name, const char *status,
                   const char *fix, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  json_t *c = json_pack("{s:s,s:s,s:s}", "check", name, "status", status,
                        "message", msg);
  if (fix)
    json_object_set_new(c, "fix", json_string(fix));
  json_array_append_new(dr->checks, c);
  if (strcmp(status, "fail") == 0)
    dr->failed++;
}

#define PASS(dr, name, ...) result(dr, name, "pass", NULL, __VA_ARGS__)
#define SKIP(dr, name, ...) result(dr, name, "skip", NULL, __VA_ARGS__)
#define FAIL(dr, name, fix, ...) result(dr, name, "fail", fix, __VA_ARGS__)

/* ---- helpers on objects -------------------------------------------------*/

static bool pod_ready(const json_t *p) {
  if (strcmp(js(p, "status", "phase"), "Running") != 0)
    return false;
  size_t i;
  const json_t *c;
  json_array_foreach(
      json_object_get(json_object_get(p, "status"), "conditions"), i, c) {
    if (strcmp(js(c, "type", NULL), "Ready") == 0)
      return strcmp(js(c, "status", NULL), "True") == 0;
  }
  return false;
}

/* "k=v,k2=v2" of a matchLabels-like object into buf; false if it does not
 * fit. */
static bool selector_of(const json_t *labels, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = '\0';
  const char *k;
  const json_t *v;
  json_object_foreach((json_t *)labels, k, v) {
    int w = snprintf(buf + n, cap - n, "%s%s=%s", n ? "," : "", k,
                     json_is_string(v) ? json_string_value(v) : "");
    if (w < 0 || (size_t)w >= cap - n)
      return false;
    n += (size_t)w;
  }
  return true;
}

/* matchLabels (all of them) found in labels. */
static bool labels_match(const json_t *match, const json_t *labels) {
  const char *k;
  const json_t *v;
  json_object_foreach((json_t *)match, k, v) {
    const json_t *have = json_object_get(labels, k);
    if (!json_is_string(have) || !json_is_string(v) ||
        strcmp(json_string_value(have), json_string_value(v)) != 0)
      return false;
  }
  return true;
}

static bool argv_has(const json_t *argv, const char *a, const char *next) {
  size_t i;
  const json_t *x;
  json_array_foreach(argv, i, x) {
    if (!json_is_string(x) || strcmp(json_string_value(x), a) != 0)
      continue;
    if (!next)
      return true;
    const json_t *n = json_array_get(argv, i + 1);
    if (json_is_string(n) && strcmp(json_string_value(n), next) == 0)
      return true;
  }
  return false;
}

static const json_t *first_container(const json_t *podspec) {
  return json_array_get(json_object_get(podspec, "containers"), 0);
}

/* ---- agents and driver --------------------------------------------------*/

typedef struct agent_scan {
  int nodes, bad, drivers;
  char first_bad[1024], fix[512], driver[96], nodriver[256];
} agent_scan;

static bool slices_on(const json_t *slices, const char *node) {
  size_t i;
  const json_t *s;
  json_array_foreach(slices, i, s) {
    if (strcmp(js(s, "spec", "nodeName"), node) == 0 &&
        strcmp(js(s, "spec", "driver"), "gpu.gpufrac.io") == 0)
      return true;
  }
  return false;
}

/* One node a DaemonSet selects: its agent pod, what it publishes. */
static void agent_node(doctor *dr, agent_scan *a, const json_t *ds,
                       const json_t *n, const json_t *pods,
                       const json_t *slices, bool dra) {
  const char *node = js(n, "metadata", "name");
  const char *dsn = js(ds, "metadata", "name");
  const json_t *agent = NULL;
  size_t i;
  const json_t *p;
  a->nodes++;
  json_array_foreach(pods, i, p) {
    if (strcmp(js(p, "spec", "nodeName"), node) == 0)
      agent = p;
  }
  char why[512] = "", fixbuf[512] = "";
  /* why and its fix are this node's; the check reports the first bad
   * node's pair (both naming the same pod) */
  char *fix = fixbuf;
  size_t fixcap = sizeof(fixbuf);
  if (!agent) {
    snprintf(why, sizeof(why), "node %s: no pod of DaemonSet %s on it", node,
             dsn);
    snprintf(fix, fixcap,
             "kubectl -n %s describe daemonset %s: its events say why (a "
             "taint the pool does not tolerate, a nodeSelector shared with "
             "another pool)",
             dr->o->ns, dsn);
  } else if (!pod_ready(agent)) {
    snprintf(why, sizeof(why),
             "node %s: agent pod %s is %s, not Running and "
             "Ready",
             node, js(agent, "metadata", "name"), js(agent, "status", "phase"));
    snprintf(fix, fixcap,
             "kubectl -n %s describe pod %s and kubectl -n %s logs %s say "
             "why (image pull, no NVIDIA driver on the node, kubelet's "
             "device-plugin directory not at nodeAgent.hostPaths)",
             dr->o->ns, js(agent, "metadata", "name"), dr->o->ns,
             js(agent, "metadata", "name"));
  } else {
    const json_t *an =
        json_object_get(json_object_get(n, "metadata"), "annotations");
    const char *inv = js(an, GF_INVENTORY_ANNOTATION, NULL);
    gf_inventory parsed;
    gf_diag d = {""};
    if (dra && !slices_on(slices, node)) {
      snprintf(why, sizeof(why),
               "node %s: the DRA agent publishes no "
               "ResourceSlice of driver gpu.gpufrac.io",
               node);
    } else if (!dra && !*inv) {
      snprintf(why, sizeof(why),
               "node %s: no %s annotation (the agent runs "
               "but publishes nothing)",
               node, GF_INVENTORY_ANNOTATION);
    } else if (!dra && gf_inventory_parse(inv, strlen(inv), &parsed, &d)) {
      snprintf(why, sizeof(why), "node %s: %.400s", node, d.msg);
    }
    if (*why)
      snprintf(fix, fixcap,
               "kubectl -n %s logs %s says why the agent cannot publish (its "
               "RBAC, the node admission policy, NVML)",
               dr->o->ns, js(agent, "metadata", "name"));
    json_t *doc = *inv ? json_loads(inv, 0, NULL) : NULL;
    const char *drv = js(doc, "driver", NULL);
    if (*drv) {
      a->drivers++;
      snprintf(a->driver, sizeof(a->driver), "%s", drv);
    } else if (!dra && !a->nodriver[0]) {
      snprintf(a->nodriver, sizeof(a->nodriver), "%s", node);
    }
    json_decref(doc);
  }
  if (*why && a->bad++ == 0) {
    snprintf(a->first_bad, sizeof(a->first_bad), "%s", why);
    snprintf(a->fix, sizeof(a->fix), "%s", fix);
  }
}

static void check_agents(doctor *dr) {
  char path[512];
  long st;
  gf_diag d = {""};
  snprintf(path, sizeof(path), "/apis/apps/v1/namespaces/%s/daemonsets",
           dr->o->ns);
  json_t *dss = dlist(dr, path, NULL, &st, &d);
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", dr->o->ns);
  json_t *pods =
      dss ? dlist(dr, path, "app.kubernetes.io/name=gpufrac-node", &st, &d)
          : NULL;
  json_t *slices =
      pods ? dlist(dr, "/apis/resource.k8s.io/v1/resourceslices", NULL, &st, &d)
           : NULL;
  if (!pods) {
    FAIL(dr, "agents", "check the kubeconfig's credentials and --namespace",
         "cannot list the agents: %s", d.msg);
    json_decref(dss);
    return;
  }
  agent_scan a = {0};
  int ndaemonsets = 0;
  size_t i;
  const json_t *ds;
  json_array_foreach(items(dss), i, ds) {
    const json_t *tmpl = jpath(ds, (const char *[]){"spec", "template", NULL});
    const json_t *c = first_container(json_object_get(tmpl, "spec"));
    if (!argv_has(json_object_get(c, "command"), "gpufrac", NULL) ||
        !argv_has(json_object_get(c, "command"), "node", NULL))
      continue; /* not a gpufrac node agent */
    ndaemonsets++;
    bool dra = argv_has(json_object_get(c, "command"), "--mode", "dra");
    char sel[1024];
    if (!selector_of(
            json_object_get(json_object_get(tmpl, "spec"), "nodeSelector"), sel,
            sizeof(sel)))
      continue;
    json_t *nodes = dlist(dr, "/api/v1/nodes", *sel ? sel : NULL, &st, &d);
    size_t j;
    const json_t *n;
    json_array_foreach(items(nodes), j, n)
        agent_node(dr, &a, ds, n, items(pods), items(slices), dra);
    json_decref(nodes);
  }
  if (!ndaemonsets)
    FAIL(dr, "agents",
         "install the chart into this namespace, or name its namespace with "
         "--namespace",
         "no gpufrac-node DaemonSet in namespace %s", dr->o->ns);
  else if (!a.nodes)
    FAIL(dr, "agents",
         "label your GPU nodes as a pool's nodeSelector says (the default "
         "pool: kubectl label node NODE gpufrac.io/enabled=true)",
         "no node carries the labels of a pool's nodeSelector (%d "
         "DaemonSet(s))",
         ndaemonsets);
  else if (a.bad)
    FAIL(dr, "agents", a.fix,
         "%d of %d labelled node(s) without a working "
         "agent; %s",
         a.bad, a.nodes, a.first_bad);
  else
    PASS(dr, "agents",
         "%d labelled node(s), each with its agent running and "
         "publishing",
         a.nodes);
  if (a.nodriver[0])
    FAIL(dr, "driver",
         "install the NVIDIA driver on the node and restart the agent pod "
         "(docs/install.md, Node prerequisites)",
         "node %s: the agent read no NVIDIA driver version", a.nodriver);
  else if (a.drivers)
    PASS(dr, "driver",
         "NVIDIA driver %s read by the agents; the container "
         "toolkit's CDI setup is not visible to them (docs/install.md, Node "
         "prerequisites)",
         a.driver);
  else
    SKIP(dr, "driver", "no agent published its driver");
  json_decref(dss);
  json_decref(pods);
  json_decref(slices);
}

/* ---- the scheduler path -------------------------------------------------*/

/* The value after `key:` on the first line of yaml holding it (leading
 * "- " and quotes dropped) into buf; false if none. */
static bool yaml_value_of(const char *yaml, const char *key, char *buf,
                          size_t cap) {
  size_t kl = strlen(key);
  for (const char *p = yaml; p && *p;) {
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    const char *q = p;
    while (q < p + len && (*q == ' ' || *q == '-'))
      q++;
    if ((size_t)(p + len - q) > kl && strncmp(q, key, kl) == 0 &&
        q[kl] == ':' && *p != '#') {
      q += kl + 1;
      while (q < p + len && *q == ' ')
        q++;
      size_t vl = (size_t)(p + len - q);
      const char *hash = memchr(q, '#', vl);
      if (hash)
        vl = (size_t)(hash - q);
      while (vl && (q[vl - 1] == ' ' || q[vl - 1] == '\r'))
        vl--;
      if (vl >= 2 && (*q == '"' || *q == '\'') && q[vl - 1] == *q) {
        q++;
        vl -= 2;
      }
      snprintf(buf, cap, "%.*s", (int)vl, q);
      return vl > 0;
    }
    p = e ? e + 1 : NULL;
  }
  return false;
}

/* "http://HOST:PORT/..." into host and port; false when not that form. */
static bool url_host_port(const char *url, char *host, size_t cap, int *port) {
  const char *p = strstr(url, "://");
  if (!p)
    return false;
  p += 3;
  size_t hl = strcspn(p, ":/");
  if (!hl || hl >= cap)
    return false;
  snprintf(host, cap, "%.*s", (int)hl, p);
  *port = strncmp(url, "https", 5) == 0 ? 443 : 80;
  if (p[hl] == ':') {
    char *end = NULL;
    long v = strtol(p + hl + 1, &end, 10);
    if (end == p + hl + 1 || v < 1 || v > 65535)
      return false;
    *port = (int)v;
  }
  return true;
}

static bool ipv4(const char *s, uint32_t *out) {
  unsigned a, b, c, d;
  char tail;
  if (sscanf(s, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) != 4 || a > 255 ||
      b > 255 || c > 255 || d > 255)
    return false;
  *out = (a << 24) | (b << 16) | (c << 8) | d;
  return true;
}

/* ip inside "A.B.C.D/N". */
static bool in_cidr(uint32_t ip, const char *cidr) {
  char net[32];
  const char *slash = strchr(cidr, '/');
  uint32_t base;
  if (!slash || (size_t)(slash - cidr) >= sizeof(net))
    return false;
  snprintf(net, sizeof(net), "%.*s", (int)(slash - cidr), cidr);
  char *end = NULL;
  long bits = strtol(slash + 1, &end, 10);
  if (!ipv4(net, &base) || *end || bits < 0 || bits > 32)
    return false;
  uint32_t mask = bits == 0 ? 0 : 0xffffffffu << (32 - bits);
  return (ip & mask) == (base & mask);
}

/* A Lease renewed within the last two minutes: its holder into who. */
static bool lease_held(doctor *dr, const char *ns, const char *name, char *who,
                       size_t cap) {
  char path[512];
  long st;
  gf_diag d = {""};
  snprintf(path, sizeof(path),
           "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", ns, name);
  json_t *l = dget(dr, path, &st, &d);
  int64_t renew = 0;
  bool ok = l && *js(l, "spec", "holderIdentity") &&
            gf_kube_time_parse(js(l, "spec", "renewTime"), &renew) == 0 &&
            (int64_t)time(NULL) - renew / 1000000 < 120;
  if (ok)
    snprintf(who, cap, "%s", js(l, "spec", "holderIdentity"));
  json_decref(l);
  return ok;
}

typedef struct sched_path {
  bool deployment; /* the chart's kube-scheduler; else the control plane's */
  char config[16384], profile[128], url[512], cm[128];
} sched_path;

/* The kube-scheduler configuration the chart rendered.  false: none. */
static bool find_config(doctor *dr, sched_path *sp) {
  char path[512];
  long st;
  gf_diag d = {""};
  snprintf(path, sizeof(path),
           "/apis/apps/v1/namespaces/%s/deployments/gpufrac-kube-scheduler",
           dr->o->ns);
  json_t *dep = dget(dr, path, &st, &d);
  const char *key = "kube-scheduler-config.yaml";
  char keybuf[256];
  snprintf(sp->cm, sizeof(sp->cm), "gpufrac-kube-scheduler-config");
  if (dep) {
    sp->deployment = true;
    const json_t *spec =
        jpath(dep, (const char *[]){"spec", "template", "spec", NULL});
    size_t i;
    const json_t *v, *a;
    json_array_foreach(json_object_get(spec, "volumes"), i, v) {
      if (strcmp(js(v, "name", NULL), "config") == 0)
        snprintf(sp->cm, sizeof(sp->cm), "%s", js(v, "configMap", "name"));
    }
    json_array_foreach(json_object_get(first_container(spec), "command"), i,
                       a) {
      const char *s = json_string_value(a);
      if (s && strncmp(s, "--config=", 9) == 0) {
        const char *b = strrchr(s, '/');
        snprintf(keybuf, sizeof(keybuf), "%s", b ? b + 1 : s + 9);
        key = keybuf;
      }
    }
    json_decref(dep);
  }
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps/%s", dr->o->ns,
           sp->cm);
  json_t *cm = dget(dr, path, &st, &d);
  const char *text = js(json_object_get(cm, "data"), key, NULL);
  snprintf(sp->config, sizeof(sp->config), "%s", text);
  json_decref(cm);
  if (!*sp->config)
    return false;
  if (!yaml_value_of(sp->config, "schedulerName", sp->profile,
                     sizeof(sp->profile)))
    snprintf(sp->profile, sizeof(sp->profile), "default-scheduler");
  if (!yaml_value_of(sp->config, "urlPrefix", sp->url, sizeof(sp->url)))
    sp->url[0] = '\0';
  return true;
}

/* ip inside one of the cluster's ServiceCIDRs (true when none are
 * listed: the API is older); the ranges into ranges. */
static bool in_service_range(doctor *dr, uint32_t ip, char *ranges,
                             size_t cap) {
  long st;
  gf_diag d = {""};
  json_t *cidrs =
      dlist(dr, "/apis/networking.k8s.io/v1/servicecidrs", NULL, &st, &d);
  bool inside = !cidrs || !json_array_size(items(cidrs));
  size_t rl = 0, i;
  const json_t *sc, *c;
  json_array_foreach(items(cidrs), i, sc) {
    size_t j;
    json_array_foreach(json_object_get(json_object_get(sc, "spec"), "cidrs"), j,
                       c) {
      const char *s = json_string_value(c);
      if (!s || strchr(s, ':'))
        continue;
      inside = inside || in_cidr(ip, s);
      int w = snprintf(ranges + rl, cap - rl, "%s%s", rl ? ", " : "", s);
      if (w > 0 && (size_t)w < cap - rl)
        rl += (size_t)w;
    }
  }
  json_decref(cidrs);
  return inside;
}

/* The Service at the urlPrefix's address: inside the service range, with
 * a ready endpoint.  Empty why when reachable. */
static void extender_reachable(doctor *dr, const sched_path *sp, char *why,
                               size_t cap, const char **fix) {
  char host[256], path[512];
  int port = 0;
  long st;
  gf_diag d = {""};
  uint32_t ip = 0;
  why[0] = '\0';
  *fix = "set the extender's address in the kube-scheduler configuration "
         "(helm upgrade, extender.service.clusterIP)";
  if (!url_host_port(sp->url, host, sizeof(host), &port)) {
    snprintf(why, cap, "urlPrefix '%s' is not http(s)://HOST:PORT/...",
             sp->url);
    return;
  }
  char ranges[256] = "";
  bool inside =
      !ipv4(host, &ip) || in_service_range(dr, ip, ranges, sizeof(ranges));
  if (!inside) {
    snprintf(why, cap,
             "the extender's address %s is outside the service "
             "range (%s)",
             host, ranges);
    *fix = "set extender.service.clusterIP to a free address inside the "
           "service range and helm upgrade";
    return;
  }
  snprintf(path, sizeof(path),
           "/api/v1/namespaces/%s/services/gpufrac-scheduler", dr->o->ns);
  json_t *svc = dget(dr, path, &st, &d);
  if (!svc) {
    snprintf(why, cap, "no Service gpufrac-scheduler in %s: %s", dr->o->ns,
             d.msg);
    *fix = "helm upgrade the release: its Service was not created (a "
           "clusterIP outside the service range is refused)";
    return;
  }
  const char *cip = js(svc, "spec", "clusterIP");
  bool is_ip = ipv4(host, &ip);
  bool port_ok = false;
  size_t i;
  const json_t *p;
  json_array_foreach(json_object_get(json_object_get(svc, "spec"), "ports"), i,
                     p) {
    if (json_integer_value(json_object_get(p, "port")) == port)
      port_ok = true;
  }
  if (is_ip && strcmp(host, cip) != 0)
    snprintf(why, cap, "urlPrefix names %s, Service gpufrac-scheduler is %s",
             host, cip);
  else if (!is_ip && strncmp(host, "gpufrac-scheduler.", 18) != 0)
    snprintf(why, cap, "urlPrefix host %s is not Service gpufrac-scheduler",
             host);
  else if (!port_ok)
    snprintf(why, cap,
             "urlPrefix port %d is not a port of Service "
             "gpufrac-scheduler",
             port);
  json_decref(svc);
  if (*why)
    return;
  snprintf(path, sizeof(path),
           "/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices", dr->o->ns);
  json_t *eps =
      dlist(dr, path, "kubernetes.io/service-name=gpufrac-scheduler", &st, &d);
  bool ready = false;
  const json_t *s, *e;
  json_array_foreach(items(eps), i, s) {
    size_t j;
    json_array_foreach(json_object_get(s, "endpoints"), j, e) {
      if (json_is_true(jpath(e, (const char *[]){"conditions", "ready", NULL})))
        ready = true;
    }
  }
  json_decref(eps);
  if (!ready) {
    snprintf(why, cap,
             "Service gpufrac-scheduler has no ready endpoint (no "
             "extender pod is Ready and leading)");
    static char buf[256];
    snprintf(buf, sizeof(buf),
             "kubectl -n %s logs deploy/gpufrac-scheduler says why the "
             "extender is not ready or not leading",
             dr->o->ns);
    *fix = buf;
  }
}

static void check_scheduler(doctor *dr) {
  static sched_path sp;
  memset(&sp, 0, sizeof(sp));
  char why[1024], who[256];
  const char *fix = NULL;
  if (!find_config(dr, &sp)) {
    char path[512];
    long st;
    gf_diag d = {""};
    snprintf(path, sizeof(path),
             "/apis/apps/v1/namespaces/%s/deployments/gpufrac-scheduler",
             dr->o->ns);
    json_t *ext = dget(dr, path, &st, &d);
    const json_t *c = first_container(
        jpath(ext, (const char *[]){"spec", "template", "spec", NULL}));
    bool mode2 = argv_has(json_object_get(c, "args"), "--dra", "allocate");
    json_decref(ext);
    if (mode2)
      SKIP(dr, "scheduler",
           "DRA mode 2 (the extender allocates claims): no "
           "kube-scheduler profile is needed");
    else
      FAIL(dr, "scheduler",
           "helm upgrade with scheduler.mode deployment (gpufrac's own "
           "kube-scheduler), or give your kube-scheduler the chart's "
           "configuration (scheduler.mode controlPlane)",
           "no kube-scheduler configuration of gpufrac in %s (neither "
           "Deployment gpufrac-kube-scheduler's ConfigMap nor ConfigMap "
           "gpufrac-kube-scheduler-config)",
           dr->o->ns);
    return;
  }
  if (!sp.url[0]) {
    FAIL(dr, "scheduler",
         "restore the extenders entry (helm upgrade renders it again)",
         "ConfigMap %s: profile %s calls no extender (no urlPrefix)", sp.cm,
         sp.profile);
    return;
  }
  if (sp.deployment &&
      !lease_held(dr, dr->o->ns, "gpufrac-kube-scheduler", who, sizeof(who))) {
    char fix2[256];
    snprintf(fix2, sizeof(fix2),
             "kubectl -n %s describe deployment gpufrac-kube-scheduler and "
             "its pods' logs say why none leads",
             dr->o->ns);
    FAIL(dr, "scheduler", fix2,
         "no kube-scheduler of profile %s holds Lease %s/gpufrac-kube-"
         "scheduler (none running)",
         sp.profile, dr->o->ns);
    return;
  }
  extender_reachable(dr, &sp, why, sizeof(why), &fix);
  if (*why)
    FAIL(dr, "scheduler", fix, "profile %s: %s", sp.profile, why);
  else
    PASS(dr, "scheduler",
         "profile %s (%s) calls the extender at %s; it has a "
         "ready endpoint%s",
         sp.profile,
         sp.deployment ? "gpufrac's kube-scheduler"
                       : "ConfigMap gpufrac-kube-scheduler-config for the "
                         "control plane's kube-scheduler",
         sp.url,
         sp.deployment ? ""
                       : "; that your kube-scheduler runs with it is not "
                         "visible from the API server");
}

/* ---- DRA ----------------------------------------------------------------*/

static void check_dra(doctor *dr) {
  char path[512];
  long st;
  gf_diag d = {""};
  snprintf(path, sizeof(path), "/apis/apps/v1/namespaces/%s/daemonsets",
           dr->o->ns);
  json_t *dss = dlist(dr, path, NULL, &st, &d);
  bool used = false;
  size_t i;
  const json_t *ds;
  json_array_foreach(items(dss), i, ds) {
    const json_t *c = first_container(
        jpath(ds, (const char *[]){"spec", "template", "spec", NULL}));
    used = used || argv_has(json_object_get(c, "command"), "--mode", "dra");
  }
  json_decref(dss);
  snprintf(path, sizeof(path),
           "/apis/apps/v1/namespaces/%s/deployments/gpufrac-scheduler",
           dr->o->ns);
  json_t *ext = dget(dr, path, &st, &d);
  const json_t *args = json_object_get(
      first_container(
          jpath(ext, (const char *[]){"spec", "template", "spec", NULL})),
      "args");
  used = used || argv_has(args, "--dra", "score") ||
         argv_has(args, "--dra", "allocate");
  json_decref(ext);
  if (!used) {
    SKIP(dr, "dra", "not used (no pool in mode dra, extender.dra off)");
    return;
  }
  json_t *v = dget(dr, "/apis/resource.k8s.io/v1", &st, &d);
  json_decref(v);
  if (!v) {
    FAIL(dr, "dra",
         "use Kubernetes 1.34 or later, where resource.k8s.io/v1 is served "
         "by default, or turn DRA off (extender.dra off, no dra pool)",
         "the API server does not serve resource.k8s.io/v1 (HTTP %ld)", st);
    return;
  }
  static const char *const classes[] = {
      "gpu.gpufrac.io", "whole.gpu.gpufrac.io", "mig.gpu.gpufrac.io"};
  for (size_t k = 0; k < sizeof(classes) / sizeof(classes[0]); k++) {
    snprintf(path, sizeof(path), "/apis/resource.k8s.io/v1/deviceclasses/%s",
             classes[k]);
    json_t *dc = dget(dr, path, &st, &d);
    json_decref(dc);
    if (!dc) {
      FAIL(dr, "dra",
           "helm upgrade the release (a pool in mode dra installs the "
           "DeviceClasses), or kubectl apply -f deploy/dra/deviceclasses.yaml",
           "DeviceClass %s is missing (HTTP %ld)", classes[k], st);
      return;
    }
  }
  PASS(dr, "dra",
       "resource.k8s.io/v1 served; DeviceClasses gpu.gpufrac.io, "
       "whole.gpu.gpufrac.io and mig.gpu.gpufrac.io present");
}

/* ---- NetworkPolicy -------------------------------------------------------*/

/* Does rule (an ingress entry) admit pods labelled `labels` of the
 * policy's namespace on port? */
static bool rule_admits_pod(const json_t *rule, const json_t *labels,
                            int port) {
  bool port_ok = !json_array_size(json_object_get(rule, "ports"));
  size_t i;
  const json_t *p, *f;
  json_array_foreach(json_object_get(rule, "ports"), i, p) {
    const json_t *pv = json_object_get(p, "port");
    port_ok = port_ok || !pv || json_integer_value(pv) == port;
  }
  if (!port_ok)
    return false;
  if (!json_array_size(json_object_get(rule, "from")))
    return true; /* from everywhere */
  json_array_foreach(json_object_get(rule, "from"), i, f) {
    const json_t *ps = json_object_get(f, "podSelector");
    if (ps && !json_object_get(f, "namespaceSelector") &&
        !json_object_get(ps, "matchExpressions") &&
        labels_match(json_object_get(ps, "matchLabels"), labels))
      return true;
  }
  return false;
}

static bool rule_admits_ip(const json_t *rule, uint32_t ip) {
  size_t i;
  const json_t *f;
  json_array_foreach(json_object_get(rule, "from"), i, f) {
    const char *cidr = js(f, "ipBlock", "cidr");
    if (*cidr && in_cidr(ip, cidr))
      return true;
  }
  return false;
}

static int extender_port(doctor *dr) {
  char path[512];
  long st;
  gf_diag d = {""};
  snprintf(path, sizeof(path),
           "/api/v1/namespaces/%s/services/gpufrac-scheduler", dr->o->ns);
  json_t *svc = dget(dr, path, &st, &d);
  const json_t *p =
      json_array_get(json_object_get(json_object_get(svc, "spec"), "ports"), 0);
  int port = p ? (int)json_integer_value(json_object_get(p, "targetPort")) : 0;
  if (!port && p)
    port = (int)json_integer_value(json_object_get(p, "port"));
  json_decref(svc);
  return port ? port : 8888;
}

/* The control-plane nodes' InternalIPs the policy does not admit: the
 * first into bad; how many seen into *seen. */
static void control_plane_ips(doctor *dr, const json_t *ingress, int port,
                              int *seen, char *bad, size_t cap) {
  long st;
  gf_diag d = {""};
  json_t *nodes = dlist(dr, "/api/v1/nodes",
                        "node-role.kubernetes.io/control-plane", &st, &d);
  size_t i, j, r;
  const json_t *n, *a, *rule;
  json_t *none = json_object(); /* a hostNetwork caller has no labels */
  json_array_foreach(items(nodes), i, n) {
    json_array_foreach(
        json_object_get(json_object_get(n, "status"), "addresses"), j, a) {
      uint32_t ip;
      if (strcmp(js(a, "type", NULL), "InternalIP") != 0 ||
          !ipv4(js(a, "address", NULL), &ip))
        continue;
      (*seen)++;
      bool ok = false;
      json_array_foreach(ingress, r, rule) {
        ok =
            ok || rule_admits_pod(rule, none, port) || rule_admits_ip(rule, ip);
      }
      if (!ok && !*bad)
        snprintf(bad, cap, "%s (%s)", js(a, "address", NULL),
                 js(n, "metadata", "name"));
    }
  }
  json_decref(none);
  json_decref(nodes);
}

static void check_networkpolicy(doctor *dr) {
  char path[512];
  long st;
  gf_diag d = {""};
  snprintf(path, sizeof(path),
           "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies/"
           "gpufrac-scheduler",
           dr->o->ns);
  json_t *np = dget(dr, path, &st, &d);
  if (!np) {
    SKIP(dr, "networkpolicy",
         "no NetworkPolicy gpufrac-scheduler: the "
         "extender's port is open to every pod");
    return;
  }
  int port = extender_port(dr);
  const json_t *ingress =
      json_object_get(json_object_get(np, "spec"), "ingress");
  snprintf(path, sizeof(path),
           "/apis/apps/v1/namespaces/%s/deployments/gpufrac-kube-scheduler",
           dr->o->ns);
  json_t *dep = dget(dr, path, &st, &d);
  if (dep) {
    const json_t *labels = jpath(
        dep, (const char *[]){"spec", "template", "metadata", "labels", NULL});
    bool ok = false;
    size_t i;
    const json_t *rule;
    json_array_foreach(ingress, i, rule) ok =
        ok || rule_admits_pod(rule, labels, port);
    if (ok)
      PASS(dr, "networkpolicy",
           "NetworkPolicy gpufrac-scheduler admits "
           "gpufrac's kube-scheduler pods on port %d",
           port);
    else
      FAIL(dr, "networkpolicy",
           "helm upgrade the release: the chart's policy admits its "
           "kube-scheduler pods by their label",
           "NetworkPolicy gpufrac-scheduler does not admit gpufrac's "
           "kube-scheduler pods on port %d: every GPU pod stays Pending",
           port);
  } else {
    int seen = 0;
    char bad[256] = "";
    control_plane_ips(dr, ingress, port, &seen, bad, sizeof(bad));
    if (*bad)
      FAIL(dr, "networkpolicy",
           "add the control-plane nodes' addresses to "
           "extender.networkPolicy.schedulerCIDRs and helm upgrade",
           "NetworkPolicy gpufrac-scheduler does not admit control-plane "
           "node %s on port %d",
           bad, port);
    else if (seen)
      PASS(dr, "networkpolicy",
           "NetworkPolicy gpufrac-scheduler admits the "
           "%d control-plane address(es) on port %d",
           seen, port);
    else
      SKIP(dr, "networkpolicy",
           "no control-plane node visible: cannot tell "
           "whether the policy admits your kube-scheduler");
  }
  json_decref(dep);
  json_decref(np);
}

/* ---- pods ---------------------------------------------------------------*/

/* Does container `name` of pod p ask for gpufrac.io/gpu? */
static bool asks_slot(const json_t *p, const char *name) {
  const json_t *spec = json_object_get(p, "spec");
  static const char *const lists[] = {"containers", "initContainers"};
  for (int l = 0; l < 2; l++) {
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(spec, lists[l]), i, c) {
      if (strcmp(js(c, "name", NULL), name) != 0)
        continue;
      const json_t *r = json_object_get(c, "resources");
      return json_object_get(json_object_get(r, "limits"), "gpufrac.io/gpu") ||
             json_object_get(json_object_get(r, "requests"), "gpufrac.io/gpu");
    }
  }
  return false;
}

static void check_grants(doctor *dr, const json_t *pods) {
  int granted = 0, bad = 0;
  char first[512] = "";
  size_t i;
  const json_t *p;
  json_array_foreach(pods, i, p) {
    const char *phase = js(p, "status", "phase");
    const json_t *an =
        json_object_get(json_object_get(p, "metadata"), "annotations");
    const char *gt = js(an, GF_GRANT_ANNOTATION, NULL);
    if (!*gt || strcmp(phase, "Succeeded") == 0 ||
        strcmp(phase, "Failed") == 0 ||
        json_array_size(
            jpath(p, (const char *[]){"spec", "resourceClaims", NULL})))
      continue; /* DRA pods get their devices from their claims */
    gf_grant g;
    gf_diag d = {""};
    if (gf_grant_parse(gt, strlen(gt), &g, &d))
      continue;
    granted++;
    for (uint32_t c = 0; c < g.ncontainers; c++) {
      if (g.containers[c].ngpus == 0 || asks_slot(p, g.containers[c].name))
        continue;
      if (bad++ == 0)
        snprintf(first, sizeof(first),
                 "pod %s/%s: container %s holds a grant but asks no "
                 "gpufrac.io/gpu, so kubelet never gave it the GPU",
                 js(p, "metadata", "namespace"), js(p, "metadata", "name"),
                 g.containers[c].name);
    }
  }
  if (bad)
    FAIL(dr, "grants",
         "add gpufrac.io/gpu: 1 to the container's limits (the chart's "
         "admission policy does it: admissionPolicy.enabled) and recreate "
         "the pod",
         "%d container(s) granted a GPU share run without it; %s", bad, first);
  else
    PASS(dr, "grants",
         "%d granted pod(s), every granted container asks "
         "gpufrac.io/gpu",
         granted);
}

static void check_placeholders(doctor *dr, const json_t *pods) {
  int n = 0, stuck = 0;
  char first[512] = "";
  int64_t now = (int64_t)time(NULL);
  size_t i;
  const json_t *p;
  json_array_foreach(pods, i, p) {
    const json_t *labels =
        json_object_get(json_object_get(p, "metadata"), "labels");
    if (strcmp(js(labels, "gpufrac.io/placeholder", NULL), "true") != 0)
      continue;
    n++;
    int64_t created = 0;
    if (*js(p, "spec", "nodeName") ||
        gf_kube_time_parse(js(p, "metadata", "creationTimestamp"), &created))
      continue;
    int64_t age = now - created / 1000000;
    if (age < dr->o->stuck_s)
      continue;
    if (stuck++ == 0)
      snprintf(first, sizeof(first),
               "placeholder %s/%s has been Pending %" PRId64 " s",
               js(p, "metadata", "namespace"), js(p, "metadata", "name"), age);
  }
  if (stuck)
    FAIL(dr, "placeholders",
         "check that the cluster autoscaler runs and that a node group offers "
         "extender.autoscale.resource (docs/autoscaling.md); its events on "
         "the placeholder say why it buys no node",
         "%d placeholder(s) Pending longer than %s; %s", stuck,
         dr->o->stuck_after, first);
  else
    PASS(dr, "placeholders", "%d placeholder(s), none Pending longer than %s",
         n, dr->o->stuck_after);
}

/* ---- the command ----------------------------------------------------------*/

static int connect(const dopts *o, gf_kube_config **kc, gf_kube **k) {
  return gf__cli_kube_connect("gpufrac doctor", o->kubeconfig, o->context, kc,
                              k);
}

/* The API server answers, and in its own words: GET /version is a JSON
 * object with gitVersion.  Anything else makes every later check's verdict
 * meaningless, so it is the one failure reported. */
static bool check_api_server(doctor *dr, const char *server) {
  long st;
  gf_diag d = {""};
  json_t *v = dget(dr, "/version", &st, &d);
  const char *gv = js(v, "gitVersion", NULL);
  bool ok = v && json_is_object(v) && *gv;
  if (ok)
    PASS(dr, "api-server", "%s answers, Kubernetes %s", server, gv);
  else
    FAIL(dr, "api-server",
         "check the kubeconfig's server and context (--kubeconfig, "
         "--context) and that the API server is reachable from here: "
         "kubectl version says the same",
         "API server %s: %s", server,
         v ? "GET /version: the answer is not Kubernetes' version object"
           : d.msg);
  json_decref(v);
  return ok;
}

static void print_checks(const doctor *dr) {
  size_t i;
  const json_t *c;
  json_array_foreach(dr->checks, i, c) {
    const char *st = js(c, "status", NULL);
    printf("%-4s  %-13s %s\n",
           strcmp(st, "pass") == 0   ? "PASS"
           : strcmp(st, "fail") == 0 ? "FAIL"
                                     : "SKIP",
           js(c, "check", NULL), js(c, "message", NULL));
    if (*js(c, "fix", NULL))
      printf("      %-13s fix: %s\n", "", js(c, "fix", NULL));
  }
  if (dr->failed)
    printf("\n%d check(s) failed.\n", dr->failed);
  else
    printf("\nAll checks passed.\n");
}

/* "90", "90s", "10m", "2h" in seconds; -1 when not that form. */
static int64_t seconds_of(const char *s) {
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (end == s || v < 0 || v > 100000000)
    return -1;
  if (!*end || strcmp(end, "s") == 0)
    return v;
  if (strcmp(end, "m") == 0)
    return v * 60;
  if (strcmp(end, "h") == 0)
    return v * 3600;
  return -1;
}

static const gf__opt_cmd doctor_cmd = {
    .prog = "gpufrac doctor",
    .usage = "usage: gpufrac doctor [--namespace NS] [--kubeconfig PATH] "
             "[--context NAME]\n"
             "                      [--stuck-after DURATION] [-o json]\n"
             "  (or: kubectl gpufrac doctor ...)\n"
             "\n"
             "Checks a gpufrac install through the API server: the agents on "
             "every\nlabelled node, the scheduler path, DRA, the "
             "NetworkPolicy, pods holding a\ngrant without their GPU, stuck "
             "placeholders.  Each check prints PASS, FAIL\nor SKIP and, when "
             "it fails, the fix.  Exit 1 when a check fails\n"
             "(docs/install.md, \"Check the install\").\n"
             "\n",
};

int cmd_doctor(int argc, char **argv) {
  dopts o = {.ns = "gpufrac-system", .stuck_after = "10m"};
  const gf__opt flags[] = {
      GF__OPT_SHORT_STRING('n', "namespace", "NS",
                           "the release's namespace (default gpufrac-system)",
                           &o.ns),
      GF__OPT_STRING("kubeconfig", "PATH",
                     "kubeconfig (default $KUBECONFIG, then\n~/.kube/config)",
                     &o.kubeconfig),
      GF__OPT_STRING("context", "NAME", "kubeconfig context (default current)",
                     &o.context),
      GF__OPT_STRING("stuck-after", "DURATION",
                     "a placeholder Pending this long is stuck\n(90s, 10m, "
                     "2h; default 10m)",
                     &o.stuck_after),
      GF__OPT_SHORT_STRING('o', "output", "FMT",
                           "json: the checks as a JSON array", &o.output),
      GF__OPT_END(),
  };
  gf__opt_cmd c = doctor_cmd;
  c.opts = flags;
  if (argc > 0 && strcmp(argv[0], "kubectl-doctor") == 0)
    c.prog = "kubectl gpufrac doctor";
  int rc = GF_EXIT_OK;
  int rest = gf__opt_parse(&c, argc, argv, &rc);
  if (rest < 0)
    return rc;
  if (rest < argc)
    return gf__opt_usage_error(&c, "unexpected argument '%s'", argv[rest]);
  if (o.output && strcmp(o.output, "json") != 0)
    return gf__opt_usage_error(&c,
                               "-o %s: the format is json (the default "
                               "is lines)",
                               o.output);
  if ((o.stuck_s = seconds_of(o.stuck_after)) < 0)
    return gf__opt_usage_error(&c,
                               "--stuck-after %s: a duration such as "
                               "90s, 10m or 2h",
                               o.stuck_after);
  if (!gf__cli_k8s_name_ok(o.ns, false))
    return gf__opt_usage_error(&c,
                               "--namespace '%s': not a DNS-1123 label "
                               "(a-z, 0-9 and '-', at most 63)",
                               o.ns);
  gf_kube_config *kc = NULL;
  gf_kube *k = NULL;
  if ((rc = connect(&o, &kc, &k)))
    return rc;
  doctor dr = {.o = &o, .k = k, .checks = json_array()};
  if (!check_api_server(&dr, gf_kube_config_server(kc)))
    goto report;
  check_agents(&dr);
  check_scheduler(&dr);
  check_dra(&dr);
  check_networkpolicy(&dr);
  long st;
  gf_diag d = {""};
  json_t *pods = dlist(&dr, "/api/v1/pods", NULL, &st, &d);
  if (pods) {
    check_grants(&dr, items(pods));
    check_placeholders(&dr, items(pods));
  } else {
    FAIL(&dr, "grants",
         "check the kubeconfig's credentials (list pods in "
         "every namespace)",
         "cannot list pods: %s", d.msg);
  }
  json_decref(pods);
report:
  if (o.output) {
    char *s = json_dumps(dr.checks, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    printf("%s\n", s ? s : "[]");
    free(s);
  } else {
    print_checks(&dr);
  }
  rc = dr.failed ? GF_EXIT_FAIL : GF_EXIT_OK;
  json_decref(dr.checks);
  gf_kube_free(k);
  gf_kube_config_free(kc);
  return rc;
}
