/* gpufrac cache: the node-local weight cache (docs/modelcache.md) from the
 * command line: list, fetch, verify and evict models in a cache directory,
 * write a source's manifest, and declare a prefetch (a ConfigMap the node
 * agents act on). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "alloc.h"
#include "cli.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/kube.h"
#include "gpufrac/modelcache.h"
#include "gpufrac/modelcache_prefetch.h"
#include "gpufrac/node.h"
#include "gpufrac/quantity.h"
#include "parse_options.h"

enum {
  OPT_DIR = 1,
  OPT_BUDGET,
  OPT_SOURCE,
  OPT_PARALLEL,
  OPT_RETRIES,
  OPT_STALL,
  OPT_DEADLINE,
  OPT_MIN_RATE,
  OPT_NODES,
  OPT_SELECTOR,
  OPT_NAMES,
  OPT_KUBECONFIG,
  OPT_CONTEXT,
  OPT_NAMESPACE,
  OPT_HOLDER,
  OPT_HF_ENDPOINT,
  OPT_HF_TOKEN,
  OPT_CA_FILE,
};

static const gf__opt cache_opts[] = {
    GF__OPT_STRING_ID("dir", "DIR",
                      "the cache (default " GF_NODE_CACHE_ROOT ")", OPT_DIR),
    GF__OPT_STRING_ID("budget", "BYTES",
                      "byte budget, a Kubernetes quantity (\"100Gi\"); "
                      "default half of\nDIR's filesystem",
                      OPT_BUDGET),
    GF__OPT_STRING_ID("source", "URL", "where the model is", OPT_SOURCE),
    GF__OPT_STRING_ID("parallel", "N", "files fetched at once (default 4)",
                      OPT_PARALLEL),
    GF__OPT_STRING_ID("retries", "N",
                      "tries in a row without progress per file after\n"
                      "the first (default 5; bytes received reset it)",
                      OPT_RETRIES),
    GF__OPT_STRING_ID("stall-timeout", "S",
                      "a try that receives nothing for S seconds fails "
                      "(default 30)",
                      OPT_STALL),
    GF__OPT_STRING_ID("deadline", "S",
                      "the fetch fails when not done after S seconds "
                      "(default 7200;\n0: none); its parts stay to resume",
                      OPT_DEADLINE),
    GF__OPT_STRING_ID("min-rate", "BYTES",
                      "the fetch fails when it averages under BYTES/s after "
                      "its\nfirst 60 s (default 1000000; 0: none)",
                      OPT_MIN_RATE),
    GF__OPT_STRING_ID("nodes", "N",
                      "prefetch: N nodes that carry a gpufrac inventory",
                      OPT_NODES),
    GF__OPT_STRING_ID("node-selector", "K=V[,K=V]",
                      "prefetch: the nodes with these labels", OPT_SELECTOR),
    GF__OPT_STRING_ID("node-names", "A[,B]", "prefetch: these nodes",
                      OPT_NAMES),
    GF__OPT_STRING_ID("kubeconfig", "FILE",
                      "prefetch: write the ConfigMap through this API server",
                      OPT_KUBECONFIG),
    GF__OPT_STRING_ID("context", "NAME", "the kubeconfig context", OPT_CONTEXT),
    GF__OPT_STRING_ID("namespace", "NS",
                      "the agents' namespace (default gpufrac-system)",
                      OPT_NAMESPACE),
    GF__OPT_STRING_ID("holder", "UID",
                      "unpin: the pin holder (default every holder)",
                      OPT_HOLDER),
    GF__OPT_STRING_ID("hf-endpoint", "URL",
                      "fetch: the hub an hf:// source is resolved at "
                      "(default\n" GF_NODE_CACHE_HF_ENDPOINT ")",
                      OPT_HF_ENDPOINT),
    GF__OPT_STRING_ID("hf-token-file", "FILE",
                      "fetch: the hub token (one line), sent to the hub's "
                      "host only",
                      OPT_HF_TOKEN),
    GF__OPT_STRING_ID("ca-file", "FILE",
                      "fetch: the CA bundle (PEM) servers are checked against",
                      OPT_CA_FILE),
    GF__OPT_END(),
};

static const gf__opt_cmd cache_cmd = {
    .prog = "gpufrac cache",
    .usage =
        "usage: gpufrac cache [--dir DIR] [--budget BYTES] ls\n"
        "       gpufrac cache [--dir DIR] [--budget BYTES] fetch "
        "NAME@sha256:HEX --source URL\n"
        "       gpufrac cache [--dir DIR] [--budget BYTES] fetch "
        "NAME[@sha256:HEX]\n"
        "             --source hf://ORG/REPO[@REVISION] [--hf-endpoint URL]\n"
        "             [--hf-token-file FILE] [--ca-file FILE]\n"
        "       gpufrac cache [--dir DIR] verify\n"
        "       gpufrac cache [--dir DIR] evict NAME@sha256:HEX\n"
        "       gpufrac cache [--dir DIR] unpin NAME@sha256:HEX [--holder "
        "UID]\n"
        "       gpufrac cache manifest SRCDIR\n"
        "       gpufrac cache prefetch NAME@sha256:HEX --source URL\n"
        "             (--nodes N | --node-selector K=V[,K=V] | --node-names "
        "A[,B])\n"
        "             [--kubeconfig FILE [--context NAME]] [--namespace NS]\n\n"
        "The node-local weight cache (docs/modelcache.md): models named "
        "NAME@sha256:HEX,\nHEX the manifest digest, kept under DIR within a "
        "byte budget.\n\n"
        "  ls        the cached models, most recently used first: digest, "
        "state,\n            bytes, pins, name (read only: works while the "
        "agent runs);\n            fetches on disk too: \"fetching\" with "
        "the bytes so far while the\n            directory's holder runs, "
        "\"stopped\" (parts kept) when none does\n"
        "  fetch     fetch a model from URL (http://, https:// or file:// "
        "base holding\n            gpufrac.manifest and the files) into DIR, "
        "verifying every file;\n            or a Hugging Face repository "
        "(hf://): its manifest is made from\n            the hub's file "
        "list, NAME@sha256:HEX printed to stderr\n"
        "  verify    re-hash every cached model's files; a model that fails "
        "is removed\n            (exit 1 when any failed)\n"
        "  evict     remove a model (refused while a running pod pins it)\n"
        "  unpin     drop the pins on a model (of one holder, a pod or claim "
        "uid, with\n            --holder): for pins of pods gone while no "
        "agent ran (the agent\n            drops those of pods it sees gone "
        "by itself)\n"
        "            fetch, verify and evict lock DIR for the operation: "
        "refused\n            (naming the holder's pid) while the node agent "
        "holds it\n"
        "  manifest  print SRCDIR's gpufrac.manifest (to publish it as a "
        "source);\n            its digest goes to stderr\n"
        "  prefetch  write the prefetch ConfigMap (label "
        "gpufrac.io/model-prefetch) the\n            node agents act on; "
        "--nodes N picks N nodes that carry a gpufrac\n            inventory, "
        "those already holding the model first. Without\n            "
        "--kubeconfig it prints the ConfigMap (JSON) instead, for --node-"
        "names\n            and --node-selector\n\n",
    .opts = cache_opts,
    .mixed = true,
};

static int bad_usage(const char *what) {
  fprintf(stderr, "gpufrac cache: %s\n", what);
  gf__opt_help(&cache_cmd, stderr);
  return GF_EXIT_USAGE;
}

/* True when s is well-formed UTF-8 (no overlong forms, no surrogates). */
static bool utf8_ok(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    unsigned c = *p;
    int n = c < 0x80                ? 0
            : c >= 0xc2 && c < 0xe0 ? 1
            : (c & 0xf0) == 0xe0    ? 2
            : c >= 0xf0 && c < 0xf5 ? 3
                                    : -1;
    if (n < 0)
      return false;
    for (int i = 1; i <= n; i++)
      if ((p[i] & 0xc0) != 0x80)
        return false;
    if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0) ||
        (c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90))
      return false;
    p += n + 1;
  }
  return true;
}

/* --node-selector's form: K=V[,K=V], each K non-empty. */
static bool selector_ok(const char *s) {
  for (const char *p = s;;) {
    const char *end = strchr(p, ','), *eq = strchr(p, '=');
    if (!end)
      end = p + strlen(p);
    if (!eq || eq >= end || eq == p)
      return false;
    if (!*end)
      return true;
    p = end + 1;
  }
}

/* What is wrong with --source (a usage message), or NULL: what every node
 * agent would refuse is refused here, by the same check, before a
 * ConfigMap is written or the cache is opened (fetch and prefetch alike:
 * exit 2). */
static const char *source_bad(const char *source) {
  static char msg[GF_DIAG_MAX + 16];
  gf_diag sd = {""};
  if (gf_node_cache_source_check(source, &sd)) {
    snprintf(msg, sizeof(msg), "--source %s", sd.msg);
    return msg;
  }
  return NULL;
}

/* What is wrong with prefetch's options (a usage message), or NULL. */
static const char *prefetch_bad(const char *source, int64_t nodes,
                                const char *selector, const char *names,
                                const char *ns, const char *kubeconfig,
                                const char *context) {
  if (!source)
    return "prefetch needs --source URL";
  if ((nodes ? 1 : 0) + (selector ? 1 : 0) + (names ? 1 : 0) != 1)
    return "prefetch needs exactly one of --nodes, --node-selector, "
           "--node-names";
  if (context && !kubeconfig)
    return "--context needs --kubeconfig";
  if (names && !utf8_ok(names))
    return "--node-names: not UTF-8";
  if (selector && !utf8_ok(selector))
    return "--node-selector: not UTF-8";
  if (!utf8_ok(source))
    return "--source: not UTF-8";
  if (!utf8_ok(ns))
    return "--namespace: not UTF-8";
  if (selector && !selector_ok(selector))
    return "--node-selector: want K=V[,K=V]";
  return source_bad(source);
}

/* What is wrong with the options of ls, fetch, verify, evict and unpin (a
 * usage message), or NULL. */
static const char *local_bad(const char *sub, const char *source,
                             const char *holder) {
  if (!strcmp(sub, "fetch") && !source)
    return "fetch needs --source URL";
  const char *why = !strcmp(sub, "fetch") ? source_bad(source) : NULL;
  if (why)
    return why;
  if (holder && strcmp(sub, "unpin"))
    return "--holder is for unpin";
  if (strcmp(sub, "ls") && strcmp(sub, "fetch") && strcmp(sub, "verify") &&
      strcmp(sub, "evict") && strcmp(sub, "unpin"))
    return "unknown subcommand";
  return NULL;
}

/* source with its scheme in lower case (case-insensitive: HTTPS:// is
 * https://) through buf[cap]; source itself when too long (refused). */
static const char *scheme_lower(const char *source, char *buf, size_t cap) {
  if (!source || strlen(source) >= cap)
    return source;
  snprintf(buf, cap, "%s", source);
  gf_node_cache_scheme_lower(buf);
  return buf;
}

/* The last line the cache logged, so a failure it logged already is not
 * printed a second time from the error it returns. */
static char g_last_log[2048];

static void log_line(void *user, const char *line) {
  (void)user;
  fprintf(stderr, "gpufrac cache: %s\n", line);
  snprintf(g_last_log, sizeof(g_last_log), "%s", line);
}

/* Prints msg unless the cache's last log line already said it. */
static void print_failure(const char *msg) {
  if (!msg[0] || !strstr(g_last_log, msg))
    fprintf(stderr, "gpufrac cache: %s\n", msg);
}

/* Whether another process holds DIR's lock (the agent, a fetch). */
static bool dir_held(const char *dir) {
  char p[4200];
  snprintf(p, sizeof(p), "%s/lock", dir ? dir : GF_NODE_CACHE_ROOT);
  int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return false;
  bool held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return held;
}

/* deadline_s and min_rate: < 0 unset (the library's default), 0 none. */
/* fetch's hub and TLS options (hf:// sources). */
typedef struct src_opts {
  const char *hf_endpoint, *hf_token_file, *ca_file;
} src_opts;

static int open_cache(const char *dir, const char *sub, uint64_t budget,
                      unsigned parallel, unsigned retries, long stall_s,
                      long deadline_s, int64_t min_rate, const src_opts *so,
                      gf_node_cache **c) {
  char owner[64];
  snprintf(owner, sizeof(owner), "gpufrac cache %s", sub);
  /* ls reads without the directory's lock (the agent may hold it); the
   * others hold it for the one operation */
  gf_node_cache_opts o = {.root = dir,
                          .read_only = !strcmp(sub, "ls"),
                          .lock_owner = owner,
                          .budget = budget,
                          .parallel = parallel,
                          .retries = retries,
                          .stall_timeout_s = stall_s,
                          .deadline_s = deadline_s < 0    ? 0
                                        : deadline_s == 0 ? -1
                                                          : deadline_s,
                          .min_rate = min_rate < 0    ? 0
                                      : min_rate == 0 ? -1
                                                      : min_rate,
                          .hf_endpoint = so->hf_endpoint,
                          .hf_token_file = so->hf_token_file,
                          .ca_file = so->ca_file,
                          .hf_endpoint_name = "--hf-endpoint",
                          .hf_token_file_name = "--hf-token-file",
                          .log = log_line};
  gf_diag d = {""};
  if (gf_node_cache_open(&o, c, &d)) {
    fprintf(stderr, "gpufrac cache: %s\n", d.msg);
    return GF_EXIT_FAIL;
  }
  return GF_EXIT_OK;
}

static int do_ls(gf_node_cache *c, bool held) {
  gf_node_cache_entry *l = NULL;
  size_t n = 0;
  if (gf_node_cache_list(c, &l, &n)) {
    fprintf(stderr, "gpufrac cache: out of memory\n");
    return GF_EXIT_FAIL;
  }
  gf_node_cache_stats s;
  gf_node_cache_stats_get(c, &s);
  printf("%-71s %-8s %14s %4s  %s\n", "DIGEST", "STATE", "BYTES", "PINS",
         "NAME");
  for (size_t i = 0; i < n; i++) {
    if (l[i].state == GF_NODE_CACHE_READY) {
      printf("sha256:%s %-8s %14" PRIu64 " %4u  %s\n", l[i].hex, "ready",
             l[i].bytes, l[i].pins, l[i].name);
      continue;
    }
    /* a fetch on disk: the bytes so far of the manifest's */
    printf("sha256:%s %-8s %14" PRIu64 " %4u  %s (%" PRIu64 " of %" PRIu64
           " bytes, %.0f%%)\n",
           l[i].hex, held ? "fetching" : "stopped", l[i].bytes, l[i].pins,
           l[i].name, l[i].have, l[i].bytes,
           l[i].bytes ? 100.0 * (double)l[i].have / (double)l[i].bytes : 100.0);
  }
  printf("%" PRIu64 " models, %" PRIu64 " fetches on disk, %" PRIu64 " bytes",
         s.models, s.fetching, s.used);
  if (s.budget)
    printf(" of a %" PRIu64 "-byte budget", s.budget);
  printf("\n");
  gf__free(l);
  return GF_EXIT_OK;
}

static void report_bad(void *user, const char *hex, const char *name,
                       const char *why) {
  (void)user;
  printf("sha256:%s %s: FAILED: %s\n", hex, name, why);
}

static int do_manifest(const char *dir) {
  char *text = NULL;
  size_t len = 0;
  gf_diag d = {""};
  if (gf_node_cache_manifest_build(dir, &text, &len, &d)) {
    fprintf(stderr, "gpufrac cache: %s\n", d.msg);
    return GF_EXIT_FAIL;
  }
  char hex[GF_NODE_CACHE_HEX];
  gf_node_cache_sha256_hex(text, len, hex);
  fwrite(text, 1, len, stdout);
  fprintf(stderr, "sha256:%s\n", hex);
  gf__free(text);
  return GF_EXIT_OK;
}

/* Resolves --nodes N into names from the Node list, then creates or
 * replaces the ConfigMap (or prints it without a kubeconfig). */
static int do_prefetch(gf_node_prefetch *p, const char *hex,
                       const char *kubeconfig, const char *context,
                       const char *ns) {
  gf_diag d = {""};
  gf_kube_config *cfg = NULL;
  gf_kube *k = NULL;
  json_t *cm = NULL, *list = NULL;
  int ex = GF_EXIT_FAIL;
  if (!kubeconfig) {
    if (p->nodes) {
      fprintf(stderr, "gpufrac cache: --nodes needs --kubeconfig (the node "
                      "list picks them)\n");
      return GF_EXIT_USAGE;
    }
    cm = gf_node_prefetch_configmap(p, ns);
    if (!cm)
      goto oom;
    json_dumpf(cm, stdout, JSON_INDENT(2));
    printf("\n");
    json_decref(cm);
    return GF_EXIT_OK;
  }
  if (gf_kube_config_from_kubeconfig(&cfg, kubeconfig, context, &d) ||
      gf_kube_new(&k, cfg, NULL, &d))
    goto fail;
  if (p->nodes) {
    if (gf_kube_list_all(k, "/api/v1/nodes", NULL, &list, &d))
      goto fail;
    uint32_t got =
        gf_node_prefetch_pick(list, hex, p->nodes, p->names, sizeof(p->names));
    if (got == 0) {
      fprintf(stderr, "gpufrac cache: no schedulable node carries a gpufrac "
                      "inventory\n");
      goto out;
    }
    if (got < p->nodes)
      fprintf(stderr,
              "gpufrac cache: only %u of the %u nodes asked for "
              "carry a gpufrac inventory\n",
              got, p->nodes);
  }
  cm = gf_node_prefetch_configmap(p, ns);
  if (!cm)
    goto oom;
  const char *name = json_string_value(
      json_object_get(json_object_get(cm, "metadata"), "name"));
  char path[1024];
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps", ns);
  int rc = gf_kube_create(k, path, cm, NULL, &d);
  if (rc == GF_EEXIST || (rc && gf_kube_last_status(k) == 409)) {
    json_t *old = NULL;
    char one[1400];
    snprintf(one, sizeof(one), "%s/%s", path, name);
    rc = gf_kube_get(k, one, &old, &d);
    if (!rc) {
      json_object_set(
          json_object_get(cm, "metadata"), "resourceVersion",
          json_object_get(json_object_get(old, "metadata"), "resourceVersion"));
      rc = gf_kube_replace(k, one, cm, NULL, &d);
    }
    json_decref(old);
  }
  if (rc)
    goto fail;
  printf("configmap %s/%s: %s on %s\n", ns, name, p->model,
         p->names[0] ? p->names : p->selector);
  ex = GF_EXIT_OK;
  goto out;
oom:
  gf_diag_set(&d, GF_ENOMEM, "out of memory");
fail:
  fprintf(stderr, "gpufrac cache: %s\n", d.msg);
out:
  json_decref(cm);
  json_decref(list);
  gf_kube_free(k);
  gf_kube_config_free(cfg);
  return ex;
}

/* The model operand of fetch, evict, unpin and prefetch into name and hex:
 * NAME@sha256:HEX, or NAME alone for a fetch from an hf:// source (the
 * hub's file list names the digest; hex is then "").  Nonzero (said on
 * stderr) when malformed. */
static int model_arg(const char *sub, const char *source, const char *arg,
                     char name[GF_NODE_CACHE_NAME_MAX],
                     char hex[GF_NODE_CACHE_HEX]) {
  gf_diag d = {""};
  bool bare = !strcmp(sub, "fetch") && source && !strncmp(source, "hf://", 5) &&
              !strchr(arg, '@');
  hex[0] = '\0';
  if (bare &&
      (strlen(arg) >= GF_NODE_CACHE_NAME_MAX || !gf_node_safe_name(arg))) {
    fprintf(stderr, "gpufrac cache: model '%s': not a valid name\n", arg);
    return 1;
  }
  if (bare) {
    snprintf(name, GF_NODE_CACHE_NAME_MAX, "%s", arg);
  } else if (gf_node_cache_ref_parse(arg, name, GF_NODE_CACHE_NAME_MAX, hex,
                                     &d)) {
    fprintf(stderr, "gpufrac cache: %s\n", d.msg);
    return 1;
  }
  return 0;
}

/* fetch: the model's directory on stdout; for an hf:// source also
 * NAME@sha256:HEX (what a pod names) on stderr. */
static int do_fetch(gf_node_cache *c, const char *name, const char *hex,
                    const char *source) {
  gf_diag d = {""};
  char got[GF_NODE_CACHE_HEX], path[4096];
  if (gf_node_cache_fetch_source(c, name, hex, source, got, &d)) {
    print_failure(d.msg);
    return GF_EXIT_FAIL;
  }
  gf_node_cache_path(c, got, path, sizeof(path));
  if (!strncmp(source, "hf://", 5))
    fprintf(stderr, "%s@sha256:%s\n", name, got);
  printf("%s\n", path);
  return GF_EXIT_OK;
}

int cmd_cache(int argc, char **argv) {
  const char *dir = NULL, *source = NULL, *kubeconfig = NULL, *context = NULL,
             *ns = GF_NODE_PREFETCH_NAMESPACE, *selector = NULL, *names = NULL,
             *holder = NULL;
  src_opts so = {NULL, NULL, NULL};
  uint64_t budget = 0;
  int64_t nodes = 0, parallel = 0, retries = 0, stall = 0;
  int64_t deadline = -1, min_rate = -1; /* unset */
  const char *pos[3] = {NULL, NULL, NULL};
  int npos = 0;
  gf_diag d = {""};
  gf__opt_iter it;
  gf__opt_iter_init(&it, &cache_cmd, argc, argv);
  const char *v;
  int id;
  while ((id = gf__opt_next(&it, &v)) > 0) {
    int64_t q = 0;
    if (id == GF__OPT_OPERAND) {
      if (npos == 3)
        return bad_usage("too many arguments");
      pos[npos++] = v;
    } else if (id == OPT_DIR) {
      dir = v;
    } else if (id == OPT_BUDGET) {
      if (gf_quantity_bytes(v, &q, &d) || q < 0)
        return bad_usage("--budget: not a byte quantity");
      budget = (uint64_t)q;
    } else if (id == OPT_SOURCE) {
      source = v;
    } else if (id == OPT_PARALLEL) {
      if (gf_parse_int64(v, 1, 64, &parallel, &d))
        return bad_usage("--parallel: not an integer in 1..64");
    } else if (id == OPT_RETRIES) {
      if (gf_parse_int64(v, 1, 100, &retries, &d))
        return bad_usage("--retries: not an integer in 1..100");
    } else if (id == OPT_STALL) {
      if (gf_parse_int64(v, 1, 3600, &stall, &d))
        return bad_usage("--stall-timeout: not seconds in 1..3600");
    } else if (id == OPT_DEADLINE) {
      if (gf_parse_int64(v, 0, 7 * 86400, &deadline, &d))
        return bad_usage("--deadline: not seconds in 0..604800");
    } else if (id == OPT_MIN_RATE) {
      if (gf_quantity_bytes(v, &min_rate, &d) || min_rate < 0)
        return bad_usage("--min-rate: not a byte quantity");
    } else if (id == OPT_NODES) {
      if (gf_parse_int64(v, 1, 100000, &nodes, &d))
        return bad_usage("--nodes: not an integer in 1..100000");
    } else if (id == OPT_SELECTOR) {
      selector = v;
    } else if (id == OPT_NAMES) {
      names = v;
    } else if (id == OPT_KUBECONFIG) {
      kubeconfig = v;
    } else if (id == OPT_CONTEXT) {
      context = v;
    } else if (id == OPT_HOLDER) {
      holder = v;
    } else if (id == OPT_HF_ENDPOINT) {
      so.hf_endpoint = v;
    } else if (id == OPT_HF_TOKEN) {
      so.hf_token_file = v;
    } else if (id == OPT_CA_FILE) {
      so.ca_file = v;
    } else {
      ns = v;
    }
  }
  if (id < 0)
    return it.exit;
  for (int i = it.rest; i < argc; i++) { /* after "--": operands */
    if (npos == 3)
      return bad_usage("too many arguments");
    pos[npos++] = argv[i];
  }
  if (npos == 0)
    return bad_usage("no subcommand");
  char lower[4096];
  source = scheme_lower(source, lower, sizeof(lower));
  const char *sub = pos[0];
  if (!strcmp(sub, "manifest")) {
    if (npos != 2)
      return bad_usage("manifest takes one directory");
    return do_manifest(pos[1]);
  }
  char name[GF_NODE_CACHE_NAME_MAX], hex[GF_NODE_CACHE_HEX];
  bool has_ref = !strcmp(sub, "fetch") || !strcmp(sub, "evict") ||
                 !strcmp(sub, "prefetch") || !strcmp(sub, "unpin");
  if (has_ref) {
    if (npos != 2)
      return bad_usage("give one model, NAME@sha256:HEX");
    if (model_arg(sub, source, pos[1], name, hex))
      return GF_EXIT_USAGE;
  } else if (npos != 1) {
    return bad_usage("too many arguments");
  }
  if (!strcmp(sub, "prefetch")) {
    const char *bad =
        prefetch_bad(source, nodes, selector, names, ns, kubeconfig, context);
    if (bad)
      return bad_usage(bad);
    gf_node_prefetch p;
    gf_node_prefetch_init(&p);
    snprintf(p.model, sizeof(p.model), "%s", pos[1]);
    snprintf(p.source, sizeof(p.source), "%.2047s", source);
    if (selector)
      snprintf(p.selector, sizeof(p.selector), "%s", selector);
    if (names)
      snprintf(p.names, sizeof(p.names), "%s", names);
    p.nodes = (uint32_t)nodes;
    return do_prefetch(&p, hex, kubeconfig, context, ns);
  }
  const char *lbad = local_bad(sub, source, holder);
  if (lbad)
    return bad_usage(lbad);
  bool held = !strcmp(sub, "ls") && dir_held(dir);
  gf_node_cache *c = NULL;
  int ex = open_cache(dir, sub, budget, (unsigned)parallel, (unsigned)retries,
                      (long)stall, (long)deadline, min_rate, &so, &c);
  if (ex)
    return ex;
  if (!strcmp(sub, "ls")) {
    ex = do_ls(c, held);
  } else if (!strcmp(sub, "unpin")) {
    int k = gf_node_cache_unpin(c, hex, holder);
    printf("%d pins dropped\n", k);
    ex = k > 0 ? GF_EXIT_OK : GF_EXIT_FAIL;
  } else if (!strcmp(sub, "fetch")) {
    ex = do_fetch(c, name, hex, source);
  } else if (!strcmp(sub, "verify")) {
    int bad = gf_node_cache_verify(c, report_bad, NULL);
    if (bad < 0)
      fprintf(stderr, "gpufrac cache: %s\n", gf_strerror(bad));
    else
      printf("%d models failed verification\n", bad);
    ex = bad == 0 ? GF_EXIT_OK : GF_EXIT_FAIL;
  } else {
    if (gf_node_cache_evict(c, hex, &d)) {
      print_failure(d.msg);
      ex = GF_EXIT_FAIL;
    }
  }
  gf_node_cache_free(c);
  return ex;
}
