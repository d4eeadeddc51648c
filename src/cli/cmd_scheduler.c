/*
 * gpufrac scheduler: serve the kube-scheduler extender over HTTP until
 * SIGINT or SIGTERM.
 *
 * This build has no Kubernetes API client wired in, so the model stays
 * empty unless nodes come in full with each request (nodeCacheCapable
 * false), /readyz answers 503, and /bind refuses with an Error that says so.
 */
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gpufrac/error.h"
#include "gpufrac/quantity.h"
#include "gpufrac/sched.h"

static void usage(FILE *fp) {
  fprintf(fp,
          "usage: gpufrac scheduler [--listen ADDR:PORT] [--config FILE]\n"
          "                         [--policy NAME[:k=v...]] [--threads N]\n"
          "\n"
          "Serves the kube-scheduler extender: POST /filter, /prioritize,\n"
          "/bind; GET /healthz, /readyz, /metrics (docs/scheduler.md).\n"
          "\n"
          "  --listen ADDR:PORT  address to serve on (default 0.0.0.0:8888)\n"
          "  --config FILE       JSON: {\"listen\": ..., \"policy\": ...,\n"
          "                      \"threads\": N, \"maxBodyBytes\": N}; flags\n"
          "                      given on the command line win\n"
          "  --policy P          placement policy (default gpufrac)\n"
          "  --threads N         HTTP worker threads (default 4)\n"
          "\n"
          "No Kubernetes API client is configured in this build: /bind\n"
          "answers with an Error saying so and /readyz stays 503.\n");
}

typedef struct opts {
  char listen[128];
  char policy[128];
  int64_t threads;
  int64_t max_body;
} opts;

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
    if (strcmp(key, "listen") == 0 && json_is_string(v)) {
      if (!set[0])
        rc = copy_opt(o->listen, sizeof(o->listen), json_string_value(v),
                      "listen");
    } else if (strcmp(key, "policy") == 0 && json_is_string(v)) {
      if (!set[1])
        rc = copy_opt(o->policy, sizeof(o->policy), json_string_value(v),
                      "policy");
    } else if (strcmp(key, "threads") == 0 && json_is_integer(v) &&
               json_integer_value(v) >= 1 && json_integer_value(v) <= 256) {
      if (!set[2])
        o->threads = (int64_t)json_integer_value(v);
    } else if (strcmp(key, "maxBodyBytes") == 0 && json_is_integer(v) &&
               json_integer_value(v) >= 1024 &&
               json_integer_value(v) <= (1 << 30)) {
      o->max_body = (int64_t)json_integer_value(v);
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

int cmd_scheduler(int argc, char **argv) {
  opts o = {"0.0.0.0:8888", "gpufrac", 4, 0};
  const char *config = NULL;
  bool set[3] = {false, false, false};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return GF_EXIT_OK;
    }
    if (i + 1 >= argc) {
      fprintf(stderr,
              "gpufrac scheduler: unknown option or missing value "
              "'%s'\n",
              a);
      usage(stderr);
      return GF_EXIT_USAGE;
    }
    const char *v = argv[++i];
    int rc = 0;
    if (strcmp(a, "--listen") == 0) {
      rc = copy_opt(o.listen, sizeof(o.listen), v, "--listen");
      set[0] = true;
    } else if (strcmp(a, "--policy") == 0) {
      rc = copy_opt(o.policy, sizeof(o.policy), v, "--policy");
      set[1] = true;
    } else if (strcmp(a, "--threads") == 0) {
      gf_diag d = {""};
      if (gf_parse_int64(v, 1, 256, &o.threads, &d)) {
        fprintf(stderr, "gpufrac scheduler: --threads: %s\n", d.msg);
        return GF_EXIT_USAGE;
      }
      set[2] = true;
    } else if (strcmp(a, "--config") == 0) {
      config = v;
    } else {
      fprintf(stderr, "gpufrac scheduler: unknown option '%s'\n", a);
      usage(stderr);
      return GF_EXIT_USAGE;
    }
    if (rc)
      return rc;
  }
  if (config) {
    int rc = read_config(config, &o, set);
    if (rc)
      return rc;
  }

  gf_sched_config cfg = {
      .policy = o.policy, .binder = NULL, .max_body = (size_t)o.max_body};
  gf_sched *s = NULL;
  gf_diag d = {""};
  if (gf_sched_new(&cfg, &s, &d)) {
    fprintf(stderr, "gpufrac scheduler: %s\n", d.msg);
    return GF_EXIT_USAGE;
  }
  /* Block the signals in every thread (the HTTP pool inherits the mask),
   * then wait for them here. */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  gf_sched_server *srv = NULL;
  if (gf_sched_server_start(s, o.listen, (unsigned)o.threads, &srv, &d)) {
    fprintf(stderr, "gpufrac scheduler: %s\n", d.msg);
    gf_sched_free(s);
    return GF_EXIT_FAIL;
  }
  fprintf(stderr,
          "gpufrac scheduler: serving on port %u (policy %s)\n"
          "gpufrac scheduler: no Kubernetes API client configured: /bind "
          "will refuse and /readyz stays 503\n",
          (unsigned)gf_sched_server_port(srv), o.policy);
  int sig = 0;
  sigwait(&sigs, &sig);
  fprintf(stderr, "gpufrac scheduler: signal %d, stopping\n", sig);
  gf_sched_server_stop(srv);
  gf_sched_free(s);
  return GF_EXIT_OK;
}
