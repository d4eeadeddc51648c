/*
 * gpufrac scheduler: serve the kube-scheduler extender over HTTP until
 * SIGINT or SIGTERM.
 *
 * With an API server (--kubeconfig, or in a cluster) the extender binds
 * through it, its model is fed by node and pod informers, /readyz turns 200
 * once both have listed, and a Lease decides which replica binds
 * (sched_kube.h).  With --no-kube the model stays empty unless nodes come
 * in full with each request (nodeCacheCapable false), /readyz answers 503,
 * and /bind refuses with an Error that says so.
 */
#include <jansson.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gpufrac/error.h"
#include "gpufrac/quantity.h"
#include "gpufrac/sched.h"
#include "gpufrac/sched_dra.h"
#include "gpufrac/sched_kube.h"
#include "parse_options.h"

typedef struct opts {
  char listen[128];
  char policy[128];
  int64_t threads;
  int64_t max_body;
  char kubeconfig[4096];
  char lease[512];
  bool no_kube;
  char health_listen[128];
  int64_t request_timeout_ms;
  int64_t per_ip;
  int64_t conn_max;
  char tls_cert[4096];
  char tls_key[4096];
  char tls_ca[4096];
  bool guard_off;          /* --guard off */
  int64_t guard_settle_ms; /* --guard-settle; 0: the default */
  unsigned accept;         /* --accept */
  bool accept_set;
  int64_t guard_cap_ms;                    /* --guard-cap; 0: the default */
  int64_t guard_cap_max_ms;                /* --guard-cap-max; 0: the default */
  int64_t guard_fetch_bps, guard_load_bps; /* --guard-*-rate; 0: default */
  int dra;                /* --dra: 0 off, 1 score, 2 allocate */
  int defrag;             /* --defrag: GF_SCHED_KUBE_DEFRAG_* */
  int64_t defrag_hold_ms; /* --defrag-hold; 0: the default */
  bool preempt_evict_off; /* --preempt-evict off (or --no-kube) */
  bool preempt_evict_on;  /* --preempt-evict on, given */
  bool autoscale;         /* --autoscale-placeholders on */
  int64_t as_after_ms;    /* --autoscale-after; 0: the default */
  char as_resource[256];  /* --autoscale-resource; "": the default */
  char as_ns[254];        /* --autoscale-namespace */
  char as_pclass[254];    /* --autoscale-priority-class */
  char as_types[4096];    /* --autoscale-node-types; "": none */
  char as_given[64];      /* the first other --autoscale-* given; "": none */
  bool as_switch;         /* --autoscale-placeholders given (on or off) */
  int64_t filter_top;     /* --filter-top; 0: every fitting node */
  int64_t bind_qps;       /* --bind-qps; 0: no limit */
  int64_t bind_burst;     /* --bind-burst; 0: 2 x bind_qps */
  int64_t dra_pass_max;   /* --dra-pass-max; 0: GF_DRA_PASS_MAX */
} opts;

/* Which options the command line set (the config file does not override
 * them). */
enum {
  SET_LISTEN,
  SET_POLICY,
  SET_THREADS,
  SET_KUBECONFIG,
  SET_LEASE,
  SET_HEALTH,
  SET_TIMEOUT,
  SET_PER_IP,
  SET_CONN_MAX,
  SET_CERT,
  SET_KEY,
  SET_CA,
  SET_FILTER_TOP,
  NSET
};

/* The string options: flag, config key, field, which. */
typedef struct str_opt {
  const char *flag, *key;
  size_t off, cap;
  int which;
} str_opt;
#define STR_OPT(flag, key, field, which)                                       \
  { flag, key, offsetof(opts, field), sizeof(((opts *)0)->field), which }
static const str_opt str_opts[] = {
    STR_OPT("--health-listen", "healthListen", health_listen, SET_HEALTH),
    STR_OPT("--tls-cert", "tlsCertFile", tls_cert, SET_CERT),
    STR_OPT("--tls-key", "tlsKeyFile", tls_key, SET_KEY),
    STR_OPT("--tls-client-ca", "tlsClientCAFile", tls_ca, SET_CA),
};
#define NSTR_OPTS (sizeof(str_opts) / sizeof(str_opts[0]))

static int copy_opt(char *dst, size_t cap, const char *v, const char *what) {
  if (strlen(v) >= cap) {
    fprintf(stderr, "gpufrac scheduler: %s too long\n", what);
    return GF_EXIT_USAGE;
  }
  memcpy(dst, v, strlen(v) + 1);
  return 0;
}

static int read_config(const char *path, opts *o, const bool *set) {
  json_error_t je;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    fprintf(stderr, "gpufrac scheduler: %s:%d:%d: %s\n", path, je.line,
            je.column, je.text);
    return GF_EXIT_USAGE;
  }
  int rc = 0;
  const char *key;
  json_t *v;
  if (!json_is_object(root)) {
    fprintf(stderr, "gpufrac scheduler: %s: not a JSON object\n", path);
    rc = GF_EXIT_USAGE;
    goto out;
  }
  json_object_foreach(root, key, v) {
    const str_opt *so = NULL;
    for (size_t k = 0; k < NSTR_OPTS; k++)
      if (strcmp(key, str_opts[k].key) == 0)
        so = &str_opts[k];
    if (so && json_is_string(v)) {
      if (!set[so->which])
        rc = copy_opt((char *)o + so->off, so->cap, json_string_value(v),
                      so->key);
    } else if (strcmp(key, "requestTimeoutMs") == 0 && json_is_integer(v) &&
               json_integer_value(v) >= 100 &&
               json_integer_value(v) <= 600000) {
      if (!set[SET_TIMEOUT])
        o->request_timeout_ms = (int64_t)json_integer_value(v);
    } else if (strcmp(key, "maxConns") == 0 && json_is_integer(v) &&
               json_integer_value(v) >= 16 && json_integer_value(v) <= 65536) {
      if (!set[SET_CONN_MAX])
        o->conn_max = (int64_t)json_integer_value(v);
    } else if (strcmp(key, "maxConnsPerIP") == 0 && json_is_integer(v) &&
               json_integer_value(v) >= 1 && json_integer_value(v) <= 1024) {
      if (!set[SET_PER_IP])
        o->per_ip = (int64_t)json_integer_value(v);
    } else if (strcmp(key, "filterTop") == 0 && json_is_integer(v) &&
               json_integer_value(v) >= 0 &&
               json_integer_value(v) <= GF_SCHED_FILTER_TOP_MAX) {
      if (!set[SET_FILTER_TOP])
        o->filter_top = (int64_t)json_integer_value(v);
    } else if (strcmp(key, "listen") == 0 && json_is_string(v)) {
      if (!set[SET_LISTEN])
        rc = copy_opt(o->listen, sizeof(o->listen), json_string_value(v),
                      "listen");
    } else if (strcmp(key, "accept") == 0 && json_is_string(v)) {
      gf_diag ad = {""};
      unsigned acc = 0;
      if (gf_sched_accept_parse(json_string_value(v), &acc, &ad)) {
        fprintf(stderr, "gpufrac scheduler: config accept: %s\n", ad.msg);
        rc = GF_EXIT_USAGE;
      } else if (!o->accept_set) {
        o->accept = acc;
      }
    } else if (strcmp(key, "policy") == 0 && json_is_string(v)) {
      if (!set[SET_POLICY])
        rc = copy_opt(o->policy, sizeof(o->policy), json_string_value(v),
                      "policy");
    } else if (strcmp(key, "threads") == 0 && json_is_integer(v) &&
               json_integer_value(v) >= 1 && json_integer_value(v) <= 256) {
      if (!set[SET_THREADS])
        o->threads = (int64_t)json_integer_value(v);
    } else if (strcmp(key, "maxBodyBytes") == 0 && json_is_integer(v) &&
               json_integer_value(v) >= 1024 &&
               json_integer_value(v) <= (1 << 30)) {
      o->max_body = (int64_t)json_integer_value(v);
    } else if (strcmp(key, "kubeconfig") == 0 && json_is_string(v)) {
      if (!set[SET_KUBECONFIG] && !o->no_kube)
        rc = copy_opt(o->kubeconfig, sizeof(o->kubeconfig),
                      json_string_value(v), "kubeconfig");
    } else if (strcmp(key, "lease") == 0 && json_is_string(v)) {
      if (!set[SET_LEASE])
        rc =
            copy_opt(o->lease, sizeof(o->lease), json_string_value(v), "lease");
    } else {
      fprintf(stderr, "gpufrac scheduler: %s: unknown key or bad value '%s'\n",
              path, key);
      rc = GF_EXIT_USAGE;
    }
    if (rc)
      break;
  }
out:
  json_decref(root);
  return rc;
}

/* A DNS-1123 label (a namespace) or subdomain (a Lease name). */
static bool dns_ok(const char *s, size_t len, size_t max) {
  if (len == 0 || len > max)
    return false;
  for (size_t i = 0; i < len; i++) {
    char c = s[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && !(c == '-' || (c == '.' && max > 63)))
      return false;
    if (!alnum && (i == 0 || i + 1 == len))
      return false;
  }
  return true;
}

/* Splits "NS/NAME" in place into lease (NS) and *name; exit 2 if bad. */
static int parse_lease(char *lease, const char **name) {
  char *slash = strchr(lease, '/');
  if (!slash || !dns_ok(lease, (size_t)(slash - lease), 63) ||
      !dns_ok(slash + 1, strlen(slash + 1), 253)) {
    fprintf(stderr,
            "gpufrac scheduler: --lease '%s': want NAMESPACE/NAME, both "
            "lower-case DNS names (e.g. " GF_SCHED_KUBE_LEASE_NS
            "/" GF_SCHED_KUBE_LEASE_NAME ")\n",
            lease);
    return GF_EXIT_USAGE;
  }
  *slash = '\0';
  *name = slash + 1;
  return 0;
}

/* The API server configuration: --kubeconfig, else in-cluster when
 * KUBERNETES_SERVICE_HOST is set, else an error saying what to pass. */
static int kube_config(const opts *o, gf_kube_config **out) {
  gf_diag d = {""};
  if (o->kubeconfig[0]) {
    if (gf_kube_config_from_kubeconfig(out, o->kubeconfig, NULL, &d)) {
      fprintf(stderr, "gpufrac scheduler: --kubeconfig: %s\n", d.msg);
      return GF_EXIT_USAGE;
    }
    return 0;
  }
  const char *host = getenv("KUBERNETES_SERVICE_HOST");
  if (!host || !*host) {
    fprintf(stderr,
            "gpufrac scheduler: no Kubernetes API server: pass --kubeconfig "
            "PATH, run in a cluster (KUBERNETES_SERVICE_HOST set), or pass "
            "--no-kube to serve without one (no binding, /readyz 503)\n");
    return GF_EXIT_USAGE;
  }
  if (gf_kube_config_in_cluster(out, NULL, &d)) {
    fprintf(stderr, "gpufrac scheduler: in-cluster configuration: %s\n", d.msg);
    return GF_EXIT_FAIL;
  }
  return 0;
}

/* A duration: digits and a unit, ms, s, m or h ("500ms", "90s", "2m"), from
 * 1 ms to 7 days, into *ms; false when v is not one. */
static bool duration_ms(const char *v, int64_t *ms) {
  static const struct {
    const char *unit;
    int64_t ms;
  } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
  size_t nd = strspn(v, "0123456789");
  const char *u = v + nd;
  int64_t mult = 0;
  for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
    if (strcmp(u, units[i].unit) == 0)
      mult = units[i].ms;
  int64_t n = 0;
  bool ok = nd > 0 && nd <= 9 && mult > 0;
  for (size_t i = 0; ok && i < nd; i++)
    n = n * 10 + (v[i] - '0');
  if (!ok || n == 0 || n * mult > 7 * 24 * 3600000LL)
    return false;
  *ms = n * mult;
  return true;
}

/* duration_ms, or exit 2 with a message naming flag. */
static int parse_duration(const char *flag, const char *v, int64_t *ms) {
  if (duration_ms(v, ms))
    return 0;
  fprintf(stderr,
          "gpufrac scheduler: %s '%s': want a duration from 1ms to 7 days "
          "such as 500ms, 90s, 2m or 1h\n",
          flag, v);
  return GF_EXIT_USAGE;
}

enum {
  OPT_LISTEN = 1,
  OPT_CONFIG,
  OPT_POLICY,
  OPT_THREADS,
  OPT_ACCEPT,
  OPT_FILTER_TOP,
  OPT_BIND_QPS,
  OPT_BIND_BURST,
  OPT_KUBECONFIG,
  OPT_NO_KUBE,
  OPT_LEASE,
  OPT_STR, /* one of str_opts */
  OPT_TIMEOUT,
  OPT_PER_IP,
  OPT_MAX_CONNS,
  OPT_GUARD,
  OPT_DEFRAG,
  OPT_DEFRAG_HOLD,
  OPT_PREEMPT_EVICT,
  OPT_GUARD_SETTLE,
  OPT_GUARD_CAP,
  OPT_GUARD_CAP_MAX,
  OPT_GUARD_FETCH_RATE,
  OPT_GUARD_LOAD_RATE,
  OPT_DRA,
  OPT_AUTOSCALE,
  OPT_AS_AFTER,
  OPT_AS_RESOURCE,
  OPT_AS_NS,
  OPT_AS_PCLASS,
  OPT_AS_TYPES,
  OPT_DRA_PASS_MAX,
};

static const gf__opt sched_opts[] = {
    GF__OPT_STRING_ID("listen", "ADDR:PORT",
                      "address to serve on (default 0.0.0.0:8888)", OPT_LISTEN),
    GF__OPT_STRING_ID("config", "FILE",
                      "JSON: {\"listen\": ..., \"policy\": ...,\n"
                      "\"threads\": N, \"maxBodyBytes\": N,\n"
                      "\"kubeconfig\": PATH, \"lease\": \"NS/NAME\"};\n"
                      "flags given on the command line win",
                      OPT_CONFIG),
    GF__OPT_STRING_ID("policy", "P", "placement policy (default gpufrac)",
                      OPT_POLICY),
    GF__OPT_STRING_ID("threads", "N", "HTTP worker threads (default 4)",
                      OPT_THREADS),
    GF__OPT_STRING_ID("accept", "LIST",
                      "also read HAMi's (hami) and KAI's (kai) GPU\n"
                      "request names, comma-separated (default none;\n"
                      "docs/migrating.md); config key \"accept\"",
                      OPT_ACCEPT),
    GF__OPT_STRING_ID("filter-top", "N",
                      "/filter keeps only the N nodes the policy\n"
                      "scores best for a GPU pod (default 0: every\n"
                      "node that fits; 1 to 64).  With 1,\n"
                      "kube-scheduler skips scoring and /prioritize\n"
                      "(one round trip a pod; its own soft\n"
                      "preferences no longer weigh in for GPU pods;\n"
                      "docs/scheduler.md); config key \"filterTop\"",
                      OPT_FILTER_TOP),
    GF__OPT_STRING_ID("bind-qps", "N",
                      "at most N Binding writes a second (default 0:\n"
                      "no limit), a client limit like\n"
                      "kube-scheduler's clientConnection qps",
                      OPT_BIND_QPS),
    GF__OPT_STRING_ID("bind-burst", "N",
                      "... in bursts of at most N (default 2 x\n"
                      "--bind-qps, as kube-scheduler's burst)",
                      OPT_BIND_BURST),
    GF__OPT_STRING_ID(
        "kubeconfig", "PATH",
        "API server from a kubeconfig (current\n"
        "context); default: in-cluster when\n"
        "KUBERNETES_SERVICE_HOST is set (POD_NAMESPACE\n"
        "and POD_NAME set: the leader labels its Pod\n" GF_SCHED_KUBE_ROLE_LABEL
        "=leader, for its Service)",
        OPT_KUBECONFIG),
    GF__OPT_FLAG_ID("no-kube",
                    "no API server: /bind refuses, /readyz stays\n"
                    "503 (for trying the protocol locally)",
                    OPT_NO_KUBE),
    GF__OPT_STRING_ID(
        "lease", "NS/NAME",
        "Lease for leader election (default\n" GF_SCHED_KUBE_LEASE_NS
        "/" GF_SCHED_KUBE_LEASE_NAME ")",
        OPT_LEASE),
    GF__OPT_STRING_ID("health-listen", "A:P",
                      "a second, plain-HTTP listener for /healthz,\n"
                      "/readyz, /leaderz, /metrics only (probes stay\n"
                      "answered when the main one is busy or TLS)",
                      OPT_STR),
    GF__OPT_STRING_ID("request-timeout-ms", "N",
                      "a whole request (TLS handshake, headers,\n"
                      "body) must arrive within N ms (default 10000)",
                      OPT_TIMEOUT),
    GF__OPT_STRING_ID("max-conns-per-ip", "N",
                      "connections one client address may hold\n"
                      "(default 64)",
                      OPT_PER_IP),
    GF__OPT_STRING_ID("max-conns", "N",
                      "connections kept in all (default 1024); past\n"
                      "either limit a new connection sheds the one\n"
                      "waiting longest (docs/scheduler.md)",
                      OPT_MAX_CONNS),
    GF__OPT_STRING_ID("tls-cert", "FILE",
                      "serve HTTPS with this PEM certificate (and\n"
                      "--tls-key; a mounted Secret)",
                      OPT_STR),
    GF__OPT_STRING_ID("tls-key", "FILE", "the certificate's PEM key", OPT_STR),
    GF__OPT_STRING_ID("tls-client-ca", "FILE",
                      "require a client certificate signed by this\n"
                      "PEM CA (kube-scheduler's tlsConfig certFile)",
                      OPT_STR),
    GF__OPT_STRING_ID("guard", "on|off",
                      "the disruption guard (default on): while it\n"
                      "leads, the extender marks GPU-share pods that\n"
                      "are bound and not yet Ready do-not-disrupt\n"
                      "(Karpenter) and not safe-to-evict (Cluster\n"
                      "Autoscaler), never over a user's own value",
                      OPT_GUARD),
    GF__OPT_STRING_ID("guard-settle", "DUR",
                      "... until Ready this long (default 2m)",
                      OPT_GUARD_SETTLE),
    GF__OPT_STRING_ID("guard-cap", "DUR",
                      "... or at most this long (default 30m);\n"
                      "DUR: 500ms, 90s, 2m, 1h; a pod annotated\n"
                      "gpufrac.io/protect: always has no cap",
                      OPT_GUARD_CAP),
    GF__OPT_STRING_ID("guard-cap-max", "DUR",
                      "a pod loading a model of known size: a window\n"
                      "from its size and the fetch and load rates,\n"
                      "at least the cap, at most this (default 24h)",
                      OPT_GUARD_CAP_MAX),
    GF__OPT_STRING_ID("guard-fetch-rate", "BYTES",
                      "... the fetch rate (bytes/s) until measured\n"
                      "(default 50M)",
                      OPT_GUARD_FETCH_RATE),
    GF__OPT_STRING_ID("guard-load-rate", "BYTES",
                      "... the load rate (bytes/s) until measured\n"
                      "(default 200M)",
                      OPT_GUARD_LOAD_RATE),
    GF__OPT_STRING_ID("defrag", "MODE",
                      "defragmentation (docs/scheduler.md): off\n"
                      "(default); dry-run: log and count the share pods\n"
                      "it would move so a pending whole-GPU pod gets a\n"
                      "GPU; on: evict them (deploy/defrag/ grants it);\n"
                      "with --dra allocate, gated pods too (docs/dra.md)",
                      OPT_DEFRAG),
    GF__OPT_STRING_ID("defrag-hold", "DUR",
                      "how long a GPU defragmentation or the\n"
                      "extender's own preemption freed is held for its\n"
                      "pod (default 5m; 10s to 1h)",
                      OPT_DEFRAG_HOLD),
    GF__OPT_STRING_ID("preempt-evict", "on|off",
                      "preempt for a pod refused for GPU memory alone,\n"
                      "which kube-scheduler's preemption never does\n"
                      "(default on): evict the preempt verb's victims\n"
                      "and hold the GPU for --defrag-hold",
                      OPT_PREEMPT_EVICT),
    GF__OPT_STRING_ID("dra", "MODE",
                      "the DRA path (docs/dra.md): off (default);\n"
                      "score: watch ResourceSlices and ResourceClaims\n"
                      "and score nodes for pods with claims (mode 1);\n"
                      "allocate: also place pods gated\n" GF_DRA_GATE
                      ": write their claims'\n"
                      "allocations and lift the gate (mode 2)",
                      OPT_DRA),
    GF__OPT_STRING_ID("autoscale-placeholders", "on|off",
                      "the autoscaler bridge (default off;\n"
                      "docs/autoscaling.md): while it leads, the\n"
                      "extender packs GPU-share pods unschedulable\n"
                      "for --autoscale-after into whole GPUs and\n"
                      "makes placeholder pods asking for them, which\n"
                      "a cluster autoscaler acts on",
                      OPT_AUTOSCALE),
    GF__OPT_STRING_ID("autoscale-after", "DUR",
                      "... unschedulable this long (default 1m)", OPT_AS_AFTER),
    GF__OPT_STRING_ID("autoscale-resource", "NAME",
                      "what placeholders ask (default nvidia.com/gpu)",
                      OPT_AS_RESOURCE),
    GF__OPT_STRING_ID("autoscale-namespace", "NS",
                      "where they live (default gpufrac-system)", OPT_AS_NS),
    GF__OPT_STRING_ID("autoscale-priority-class", "NAME",
                      "their PriorityClass (default\n"
                      "gpufrac-placeholder, deploy/autoscale/autoscale.yaml)",
                      OPT_AS_PCLASS),
    GF__OPT_STRING_ID("autoscale-node-types", "LIST",
                      "the node types the autoscaler buys,\n"
                      "NAME:GPUS:GPU_MEM:CPU:MEMORY[:MODEL],...: each\n"
                      "placeholder asks one whole node of the smallest\n"
                      "type its packed pods fit, pinned to it by\n"
                      "node.kubernetes.io/instance-type (docs/autoscaling.md)",
                      OPT_AS_TYPES),
    GF__OPT_STRING_ID("dra-pass-max", "N",
                      "mode 2: pods placed in one pass before their\n"
                      "claims are checked and their gates lifted\n"
                      "(default 128; 1 to 100000)",
                      OPT_DRA_PASS_MAX),
    GF__OPT_END(),
};

static const gf__opt_cmd sched_cmd = {
    .prog = "gpufrac scheduler",
    .usage = "usage: gpufrac scheduler [options]\n"
             "\n"
             "Serves the kube-scheduler extender: POST /filter, /prioritize,\n"
             "/bind, /preempt; GET /healthz, /readyz, /metrics\n"
             "(docs/scheduler.md).\n"
             "\n",
    .footer =
        "\nconfig file keys: listen, policy, threads, maxBodyBytes, "
        "kubeconfig, lease,\naccept, filterTop, healthListen, "
        "requestTimeoutMs, maxConnsPerIP,\nmaxConns, tlsCertFile, tlsKeyFile, "
        "tlsClientCAFile\n",
    .opts = sched_opts,
};

/* "on" or "off" into *on; exit 2 naming the flag otherwise. */
static int on_off(const char *a, const char *v, bool *on) {
  if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
    fprintf(stderr, "gpufrac scheduler: %s '%s': want on or off\n", a, v);
    return GF_EXIT_USAGE;
  }
  *on = strcmp(v, "on") == 0;
  return 0;
}

/* An integer option in lo..hi; exit 2 naming the flag otherwise. */
static int int_opt(const char *a, const char *v, int64_t lo, int64_t hi,
                   int64_t *out) {
  gf_diag d = {""};
  if (gf_parse_int64(v, lo, hi, out, &d)) {
    fprintf(stderr, "gpufrac scheduler: %s: %s\n", a, d.msg);
    return GF_EXIT_USAGE;
  }
  return 0;
}

/* --defrag-hold DUR into *ms: 10 s (a defragmentation pass) to 1 h. */
static int defrag_hold(const char *flag, const char *v, int64_t *ms) {
  if (duration_ms(v, ms) && *ms >= 10000 && *ms <= 3600000)
    return 0;
  fprintf(stderr,
          "gpufrac scheduler: %s '%s': want a duration from 10s to 1h such "
          "as 90s or 5m (the hold must "
          "outlast a defragmentation pass, 10 s; while it lasts the freed "
          "GPU is kept from every pod of no higher priority)\n",
          flag, v);
  return GF_EXIT_USAGE;
}

/* --defrag off|dry-run|on into *mode (GF_SCHED_KUBE_DEFRAG_*). */
static int defrag_mode(const char *v, int *mode) {
  static const char *dm[] = {"off", "dry-run", "on"};
  for (int k = 0; k < 3; k++)
    if (strcmp(v, dm[k]) == 0) {
      *mode = k;
      return 0;
    }
  fprintf(stderr, "gpufrac scheduler: --defrag '%s': want off, dry-run or on\n",
          v);
  return GF_EXIT_USAGE;
}

/* The binder: --threads API clients, --bind-qps.  0 or the exit code. */
static int make_binder(const opts *o, gf_kube_config *kc,
                       gf_sched_kube_binder **kb) {
  gf_diag d = {""};
  if (gf_sched_kube_binder_new(kc, NULL, (unsigned)o->threads, kb, &d) ||
      gf_sched_kube_binder_limit(*kb, (double)o->bind_qps,
                                 (unsigned)o->bind_burst, &d)) {
    fprintf(stderr, "gpufrac scheduler: %s\n", d.msg);
    return GF_EXIT_FAIL;
  }
  return 0;
}

/* --dra off|score|allocate into *mode (0, 1, 2). */
static int dra_mode(const char *v, int *mode) {
  static const char *modes[] = {"off", "score", "allocate"};
  *mode = -1;
  for (int k = 0; k < 3; k++)
    if (strcmp(v, modes[k]) == 0)
      *mode = k;
  if (*mode < 0) {
    fprintf(stderr,
            "gpufrac scheduler: --dra '%s': want off, score or allocate\n", v);
    return GF_EXIT_USAGE;
  }
  return 0;
}

/* The disruption guard's options (--guard*). */
static int guard_value(opts *o, int id, const char *a, const char *v) {
  switch (id) {
  case OPT_GUARD: {
    bool on = true;
    int rc = on_off(a, v, &on);
    o->guard_off = !on;
    return rc;
  }
  case OPT_GUARD_SETTLE:
    return parse_duration(a, v, &o->guard_settle_ms);
  case OPT_GUARD_CAP:
    return parse_duration(a, v, &o->guard_cap_ms);
  case OPT_GUARD_CAP_MAX:
    return parse_duration(a, v, &o->guard_cap_max_ms);
  case OPT_GUARD_FETCH_RATE:
  case OPT_GUARD_LOAD_RATE: {
    int64_t *dst =
        id == OPT_GUARD_FETCH_RATE ? &o->guard_fetch_bps : &o->guard_load_bps;
    if (gf_quantity_bytes(v, dst, NULL) || *dst <= 0) {
      fprintf(stderr,
              "gpufrac scheduler: %s '%s': want bytes per second above 0 "
              "(a quantity such as 100M or 1Gi)\n",
              a, v);
      return GF_EXIT_USAGE;
    }
    return 0;
  }
  default:
    break;
  }
  return GF_EXIT_USAGE; /* not reached */
}

/* The guard's options of o into ko. */
/* The autoscaler bridge's options (docs/autoscaling.md). */
static void autoscale_kube_opts(gf_sched_kube_opts *ko, const opts *o) {
  ko->autoscale = o->autoscale;
  ko->autoscale_after_ms = o->as_after_ms;
  ko->autoscale_resource = o->as_resource[0] ? o->as_resource : NULL;
  ko->autoscale_ns = o->as_ns[0] ? o->as_ns : NULL;
  ko->autoscale_priority_class = o->as_pclass[0] ? o->as_pclass : NULL;
  ko->autoscale_node_types = o->as_types[0] ? o->as_types : NULL;
}

static void guard_kube_opts(gf_sched_kube_opts *ko, const opts *o) {
  /* and defragmentation's and the extender's own preemption's */
  ko->defrag = o->defrag;
  ko->defrag_hold_ms = o->defrag_hold_ms;
  ko->preempt_evict = !o->preempt_evict_off;
  ko->guard_off = o->guard_off;
  ko->guard_settle_ms = o->guard_settle_ms;
  ko->guard_cap_ms = o->guard_cap_ms;
  ko->guard_cap_max_ms = o->guard_cap_max_ms;
  ko->guard_fetch_bps = o->guard_fetch_bps;
  ko->guard_load_bps = o->guard_load_bps;
}

/* One option's value into o; 0 or the exit code. */
/* The autoscaler bridge's options (--autoscale-*), each checked as the
 * bridge will read it (a bad one is a usage error, exit 2, not a failed
 * start); o->as_given names the first given other than
 * --autoscale-placeholders (refused without that switch: see validate). */
static int as_value(opts *o, int id, const char *a, const char *v) {
  int rc;
  if (id != OPT_AUTOSCALE && !o->as_given[0])
    snprintf(o->as_given, sizeof(o->as_given), "%s", a);
  switch (id) {
  case OPT_AUTOSCALE:
    o->as_switch = true;
    return on_off(a, v, &o->autoscale);
  case OPT_AS_AFTER:
    return parse_duration(a, v, &o->as_after_ms);
  case OPT_AS_RESOURCE:
    rc = copy_opt(o->as_resource, sizeof(o->as_resource), v, a);
    break;
  case OPT_AS_NS:
    rc = copy_opt(o->as_ns, sizeof(o->as_ns), v, a);
    break;
  case OPT_AS_PCLASS:
    rc = copy_opt(o->as_pclass, sizeof(o->as_pclass), v, a);
    break;
  default: /* OPT_AS_TYPES */
    rc = copy_opt(o->as_types, sizeof(o->as_types), v, a);
    break;
  }
  gf_sched_kube_opts ko = {0};
  gf_diag d = {""};
  autoscale_kube_opts(&ko, o);
  if (!rc && gf_sched_autoscale_check(&ko, &d)) {
    fprintf(stderr, "gpufrac scheduler: %s: %s\n", a, d.msg);
    rc = GF_EXIT_USAGE;
  }
  return rc;
}

static int sched_value(opts *o, const char **config, bool *set, int id,
                       const char *a, const char *v) {
  switch (id) {
  case OPT_LISTEN:
    set[SET_LISTEN] = true;
    return copy_opt(o->listen, sizeof(o->listen), v, a);
  case OPT_POLICY:
    set[SET_POLICY] = true;
    return copy_opt(o->policy, sizeof(o->policy), v, a);
  case OPT_ACCEPT: {
    gf_diag d = {""};
    if (gf_sched_accept_parse(v, &o->accept, &d)) {
      fprintf(stderr, "gpufrac scheduler: %s\n", d.msg);
      return GF_EXIT_USAGE;
    }
    o->accept_set = true;
    return 0;
  }
  case OPT_THREADS:
    set[SET_THREADS] = true;
    return int_opt(a, v, 1, 256, &o->threads);
  case OPT_FILTER_TOP:
    set[SET_FILTER_TOP] = true;
    return int_opt(a, v, 0, GF_SCHED_FILTER_TOP_MAX, &o->filter_top);
  case OPT_BIND_QPS:
    return int_opt(a, v, 0, 100000, &o->bind_qps);
  case OPT_BIND_BURST:
    return int_opt(a, v, 0, 200000, &o->bind_burst);
  case OPT_KUBECONFIG:
    if (!*v) {
      fprintf(stderr, "gpufrac scheduler: --kubeconfig: empty path\n");
      return GF_EXIT_USAGE;
    }
    set[SET_KUBECONFIG] = true;
    return copy_opt(o->kubeconfig, sizeof(o->kubeconfig), v, a);
  case OPT_NO_KUBE:
    o->no_kube = true;
    return 0;
  case OPT_LEASE:
    set[SET_LEASE] = true;
    return copy_opt(o->lease, sizeof(o->lease), v, a);
  case OPT_CONFIG:
    *config = v;
    return 0;
  case OPT_GUARD:
  case OPT_GUARD_SETTLE:
  case OPT_GUARD_CAP:
  case OPT_GUARD_CAP_MAX:
  case OPT_GUARD_FETCH_RATE:
  case OPT_GUARD_LOAD_RATE:
    return guard_value(o, id, a, v);
  case OPT_DEFRAG:
    return defrag_mode(v, &o->defrag);
  case OPT_DEFRAG_HOLD:
    return defrag_hold(a, v, &o->defrag_hold_ms);
  case OPT_PREEMPT_EVICT: {
    bool on = true;
    int rc = on_off(a, v, &on);
    o->preempt_evict_off = !on;
    o->preempt_evict_on = on;
    return rc;
  }
  case OPT_DRA:
    return dra_mode(v, &o->dra);
  case OPT_AUTOSCALE:
  case OPT_AS_AFTER:
  case OPT_AS_RESOURCE:
  case OPT_AS_NS:
  case OPT_AS_PCLASS:
  case OPT_AS_TYPES:
    return as_value(o, id, a, v);
  case OPT_TIMEOUT:
    set[SET_TIMEOUT] = true;
    return int_opt(a, v, 100, 600000, &o->request_timeout_ms);
  case OPT_PER_IP:
    set[SET_PER_IP] = true;
    return int_opt(a, v, 1, 1024, &o->per_ip);
  case OPT_MAX_CONNS:
    set[SET_CONN_MAX] = true;
    return int_opt(a, v, 16, 65536, &o->conn_max);
  case OPT_DRA_PASS_MAX:
    return int_opt(a, v, 1, 100000, &o->dra_pass_max);
  default: /* OPT_STR */
    for (size_t k = 0; k < NSTR_OPTS; k++) {
      const str_opt *so = &str_opts[k];
      if (strcmp(a, so->flag) != 0)
        continue;
      if (!*v) {
        fprintf(stderr, "gpufrac scheduler: %s: empty value\n", a);
        return GF_EXIT_USAGE;
      }
      set[so->which] = true;
      return copy_opt((char *)o + so->off, so->cap, v, a);
    }
    return GF_EXIT_USAGE; /* not reached: every OPT_STR is in str_opts */
  }
}

/* Parses argv into o; returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, opts *o, const char **config,
                      bool *set) {
  gf__opt_iter it;
  gf__opt_iter_init(&it, &sched_cmd, argc, argv);
  const char *v;
  int id;
  while ((id = gf__opt_next(&it, &v)) > 0) {
    char a[64];
    snprintf(a, sizeof(a), "--%s", it.opt->name);
    int rc = sched_value(o, config, set, id, a, v);
    if (rc)
      return rc;
  }
  if (id < 0)
    return it.exit;
  if (o->no_kube && o->dra) {
    fprintf(stderr, "gpufrac scheduler: --no-kube excludes --dra\n");
    return GF_EXIT_USAGE;
  }
  if (o->dra_pass_max && o->dra != 2) {
    fprintf(stderr, "gpufrac scheduler: --dra-pass-max needs --dra "
                    "allocate (only mode 2 places pods)\n");
    return GF_EXIT_USAGE;
  }
  /* Without the switch the bridge is off and the option would be ignored
   * unseen; "off" given is taken as meant (one flag turns the bridge off,
   * its settings kept, as the e2e tests and deployments do). */
  if (o->as_given[0] && !o->as_switch) {
    fprintf(stderr,
            "gpufrac scheduler: %s needs --autoscale-placeholders on (the "
            "bridge is off by default: it would be ignored; give "
            "--autoscale-placeholders off to keep it with the bridge off)\n",
            o->as_given);
    return GF_EXIT_USAGE;
  }
  if (o->no_kube && o->autoscale) {
    fprintf(stderr, "gpufrac scheduler: --no-kube excludes "
                    "--autoscale-placeholders on (placeholders are pods "
                    "made through the API server)\n");
    return GF_EXIT_USAGE;
  }
  if (o->no_kube && o->preempt_evict_on) {
    fprintf(stderr, "gpufrac scheduler: --no-kube excludes --preempt-evict "
                    "on (it evicts through the API server; without "
                    "--preempt-evict, --no-kube turns it off)\n");
    return GF_EXIT_USAGE;
  }
  if (o->no_kube && o->defrag_hold_ms) {
    fprintf(stderr, "gpufrac scheduler: --no-kube excludes --defrag-hold "
                    "(nothing is evicted, so nothing is held)\n");
    return GF_EXIT_USAGE;
  }
  if (o->no_kube)
    o->preempt_evict_off = true; /* the default on needs the API server */
  if (o->defrag_hold_ms && !o->defrag && o->preempt_evict_off) {
    fprintf(stderr, "gpufrac scheduler: --defrag-hold needs --defrag on "
                    "(or dry-run) or --preempt-evict on: with both off "
                    "nothing is held\n");
    return GF_EXIT_USAGE;
  }
  if (o->no_kube && o->defrag) {
    fprintf(stderr, "gpufrac scheduler: --no-kube excludes --defrag (it "
                    "needs the pods' owners, budgets and evictions)\n");
    return GF_EXIT_USAGE;
  }
  if (o->accept & GF_SCHED_ACCEPT_HAMI && o->autoscale &&
      strcmp(o->as_resource[0] ? o->as_resource : "nvidia.com/gpu",
             "nvidia.com/gpu") == 0) {
    /* HAMi's nvidia.com/gpu means GPUs wanted to the extender: it would
     * take the placeholders for HAMi pods and book them. */
    fprintf(stderr, "gpufrac scheduler: --accept hami reads nvidia.com/gpu "
                    "as a GPU request, so placeholders cannot ask for it: "
                    "give --autoscale-resource another resource the "
                    "autoscaler knows\n");
    return GF_EXIT_USAGE;
  }
  if (o->no_kube && (set[SET_KUBECONFIG] || set[SET_LEASE])) {
    fprintf(stderr, "gpufrac scheduler: --no-kube excludes %s\n",
            set[SET_KUBECONFIG] ? "--kubeconfig" : "--lease");
    return GF_EXIT_USAGE;
  }
  return -1;
}

/* The DRA feed's view of leadership: the extender's (it starts a follower
 * under an election and leads once the Lease is won). */
static bool dra_leader(void *u) {
  gf_sched *const *s = u;
  return *s && gf_sched_is_leader(*s);
}

/* The DRA feed (--dra), leading when the extender *s does: 0 or the exit
 * status, said on stderr. */
static int make_dra(const opts *o, gf_kube_config *kc, gf_sched **s,
                    gf_sched_dra **out) {
  gf_sched_dra_opts dopt = {.policy = o->policy,
                            .allocate = o->dra == 2,
                            .pass_max = (long)o->dra_pass_max,
                            .is_leader = dra_leader,
                            .leader_user = s,
                            .defrag = o->defrag};
  gf_diag d = {""};
  if (gf_sched_dra_new(kc, NULL, &dopt, out, &d)) {
    fprintf(stderr, "gpufrac scheduler: %s\n", d.msg);
    return GF_EXIT_FAIL;
  }
  if (o->autoscale)
    gf_sched_dra_autoscale(*out); /* the bridge reads claim-only pods */
  return 0;
}

/* Frees the DRA feed, unlinked from the bridge first (its pass may read
 * the feed). */
static void free_dra(gf_sched_dra *dra) {
  gf_sched_dra_autoscale(NULL);
  gf_sched_dra_free(dra);
}

/* /metrics: the kube feed's lines, then the DRA feed's. */
typedef struct metrics_both {
  gf_sched_kube *kube;
  gf_sched_dra *dra;
} metrics_both;

static size_t both_metrics(void *u, char *buf, size_t cap) {
  metrics_both *m = u;
  size_t n = gf_sched_kube_metrics(m->kube, buf, cap);
  return n + gf_sched_dra_metrics(m->dra, buf + n, cap - n);
}

static int dra_score(void *u, const json_t *pod, const char *node,
                     int64_t *score) {
  return gf_sched_dra_score(u, pod, node, score);
}

int cmd_scheduler(int argc, char **argv) {
  opts o;
  memset(&o, 0, sizeof(o));
  snprintf(o.listen, sizeof(o.listen), "0.0.0.0:8888");
  snprintf(o.policy, sizeof(o.policy), "gpufrac");
  o.threads = 4;
  const char *config = NULL;
  bool set[NSET] = {false};
  int rc = parse_args(argc, argv, &o, &config, set);
  if (rc >= 0)
    return rc;
  /* Request bodies and replies run to megabytes.  glibc raises its mmap
   * threshold to the size of the last mmap'd block freed, after which such
   * buffers come from the heaps of the worker threads and stay in the RSS
   * once freed (hundreds of MB after a burst of large requests, measured:
   * docs/scheduler.md).  A fixed threshold keeps them mmap'd, so freeing
   * one returns it to the kernel. */
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  if (config && (rc = read_config(config, &o, set)))
    return rc;
  const char *lease_name = NULL;
  if (!o.no_kube && o.lease[0] && (rc = parse_lease(o.lease, &lease_name)))
    return rc;
  if (!o.tls_cert[0] != !o.tls_key[0] || (o.tls_ca[0] && !o.tls_cert[0])) {
    fprintf(stderr, "gpufrac scheduler: %s\n",
            o.tls_ca[0] && !o.tls_cert[0] && !o.tls_key[0]
                ? "--tls-client-ca needs --tls-cert and --tls-key"
                : "--tls-cert and --tls-key go together");
    return GF_EXIT_USAGE;
  }

  gf_kube_config *kc = NULL;
  gf_sched_kube_binder *kb = NULL;
  gf_sched_kube *feed = NULL;
  gf_sched_dra *dra = NULL;
  gf_sched *s = NULL;
  gf_sched_server *srv = NULL;
  gf_diag d = {""};
  /* A bad policy is a usage error whatever the API server: check it before
   * looking for one (the extender proper is made once the binder is). */
  gf_sched_config probe = {.policy = o.policy};
  if (gf_sched_new(&probe, &s, &d)) {
    fprintf(stderr, "gpufrac scheduler: %s\n", d.msg);
    return GF_EXIT_USAGE;
  }
  gf_sched_free(s);
  s = NULL;
  if (!o.no_kube) {
    if ((rc = kube_config(&o, &kc)))
      return rc;
    if ((rc = make_binder(&o, kc, &kb)))
      goto out;
  }
  if (kc && o.dra && (rc = make_dra(&o, kc, &s, &dra)))
    goto out;
  gf_sched_config cfg = {.policy = o.policy,
                         .binder = gf_sched_kube_binder_get(kb),
                         .max_body = (size_t)o.max_body,
                         .accept = o.accept,
                         .filter_top = (uint32_t)o.filter_top,
                         .dra_score = dra ? dra_score : NULL,
                         .dra_user = dra};
  if (gf_sched_new(&cfg, &s, &d)) {
    fprintf(stderr, "gpufrac scheduler: %s\n", d.msg);
    rc = GF_EXIT_USAGE;
    goto out;
  }
  if (kc) {
    /* this replica's Pod (downward API), labelled when it leads */
    const char *pod_ns = getenv("POD_NAMESPACE"), *pod = getenv("POD_NAME");
    bool own = pod_ns && *pod_ns && pod && *pod;
    gf_sched_kube_opts ko = {.lease_ns = o.lease[0] ? o.lease : NULL,
                             .lease_name = lease_name,
                             .pod_ns = own ? pod_ns : NULL,
                             .pod_name = own ? pod : NULL};
    guard_kube_opts(&ko, &o);
    autoscale_kube_opts(&ko, &o);
    if (gf_sched_kube_new(s, kc, NULL, &ko, &feed, &d)) {
      fprintf(stderr, "gpufrac scheduler: %s\n", d.msg);
      rc = GF_EXIT_FAIL;
      goto out;
    }
    gf_sched_dra_set_budgets(dra, gf_sched_kube_budgets(feed));
    /* the guard's protection rides in the Binding: one write per pod */
    gf_sched_kube_binder_annotate(kb, gf_sched_kube_bind_annotate, feed);
    static metrics_both mb;
    mb = (metrics_both){.kube = feed, .dra = dra};
    gf_sched_set_metrics_hook(s, both_metrics, &mb);
  }
  /* Block the signals in every thread (the HTTP pool and the informers
   * inherit the mask), then wait for them here. */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  gf_sched_server_opts so = {.listen = o.listen,
                             .threads = (unsigned)o.threads,
                             .per_ip_max = (unsigned)o.per_ip,
                             .conn_max = (unsigned)o.conn_max,
                             .request_timeout_ms =
                                 (unsigned)o.request_timeout_ms,
                             .health_listen = o.health_listen,
                             .tls_cert = o.tls_cert[0] ? o.tls_cert : NULL,
                             .tls_key = o.tls_key[0] ? o.tls_key : NULL,
                             .tls_client_ca = o.tls_ca[0] ? o.tls_ca : NULL};
  if (gf_sched_server_start_opts(s, &so, &srv, &d)) {
    fprintf(stderr, "gpufrac scheduler: %s\n", d.msg);
    rc = GF_EXIT_FAIL;
    goto out;
  }
  if (feed && gf_sched_kube_start(feed, &d)) {
    fprintf(stderr, "gpufrac scheduler: %s\n", d.msg);
    rc = GF_EXIT_FAIL;
    goto out;
  }
  if (dra && gf_sched_dra_start(dra, &d)) {
    fprintf(stderr, "gpufrac scheduler: %s\n", d.msg);
    rc = GF_EXIT_FAIL;
    goto out;
  }
  if (dra)
    fprintf(stderr, "gpufrac scheduler: DRA path on (%s)\n",
            o.dra == 2 ? "scoring, and allocating gated pods" : "scoring");
  if (kc)
    fprintf(stderr,
            "gpufrac scheduler: serving on port %u (policy %s), API server "
            "%s, lease %s/%s\n",
            (unsigned)gf_sched_server_port(srv), o.policy,
            gf_kube_config_server(kc),
            o.lease[0] ? o.lease : GF_SCHED_KUBE_LEASE_NS,
            lease_name ? lease_name : GF_SCHED_KUBE_LEASE_NAME);
  else
    fprintf(stderr,
            "gpufrac scheduler: serving on port %u (policy %s)\n"
            "gpufrac scheduler: --no-kube: no Kubernetes API client: /bind "
            "will refuse and /readyz stays 503\n",
            (unsigned)gf_sched_server_port(srv), o.policy);
  if (gf_sched_server_health_port(srv))
    fprintf(stderr, "gpufrac scheduler: health listener on port %u\n",
            (unsigned)gf_sched_server_health_port(srv));
  if (so.tls_cert)
    fprintf(stderr, "gpufrac scheduler: HTTPS%s\n",
            so.tls_client_ca ? ", client certificates required" : "");
  int sig = 0;
  sigwait(&sigs, &sig);
  fprintf(stderr, "gpufrac scheduler: signal %d, stopping\n", sig);
  rc = GF_EXIT_OK;
out:
  /* The server first, so binds in flight finish while we still lead; then
   * the feed, which releases the Lease. */
  if (srv)
    gf_sched_server_free(srv);
  free_dra(dra); /* before s: its placer asks s who leads */
  gf_sched_kube_free(feed);
  gf_sched_free(s);
  gf_sched_kube_binder_free(kb);
  gf_kube_config_free(kc);
  return rc;
}
