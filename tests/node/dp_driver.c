/*
 * dp_driver: runs the device plugin (devplugin.h) with made-up
 * devices and a test allocator, for tests/node/fake_kubelet.py.
 *
 *   dp_driver DIR KUBELET_SOCK ENDPOINT GPUS SLOTS [--preferred]
 *             [--extra ID]... [--idle-ms N] [--preface-ms N]
 *
 * Devices: "GPU-<g as 8 digits>-0000-4000-8000-<g as 12 digits>::<k>" for
 * g < GPUS, k < SLOTS, NUMA node g % 2; then each --extra ID (no NUMA).
 * Prints "ready" once serving, then reads commands from stdin, one a line:
 *   unhealthy ID | healthy ID   mark a device; answers "ok" or "error"
 *   regs                        answers gf__dp_registrations()
 *   waiting                     answers how many Allocates wait now
 *   release                     lets every waiting Allocate go on
 *   quit                        stops the plugin and exits 0
 * The allocator answers CUDA_VISIBLE_DEVICES = the GPU part of the first
 * id, GPUFRAC_DEVICE_IDS = the ids joined by ',', a read-only mount of
 * /run/gpufrac/<gpu>/shim.conf at /etc/gpufrac/shim.conf, the device node
 * /dev/nvidia0 "rw", the CDI device "gpufrac.io/gpu=<gpu>" and the
 * annotation gpufrac.io/slots = the number of ids.  It fails with
 * GF_ESTATE and a sentence for an id containing "bad".  For an id
 * containing "wait" it first waits, as the agent's Allocate waits for its
 * pod, until `release` (then answers as above) or until the plugin stops
 * (the cancel callback; then it fails with GF_ESTATE).  Log lines go to
 * stderr.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devplugin.h"
#include "gpufrac/error.h"

static gf_dp_device devs[GF_DP_MAX_DEVICES];
static size_t ndevs;

static pthread_mutex_t wait_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wait_cv = PTHREAD_COND_INITIALIZER;
static unsigned waiting, released; /* released: `release` commands seen */
static bool cancelled;

static void cancel(void *user) {
  (void)user;
  pthread_mutex_lock(&wait_mu);
  cancelled = true;
  pthread_cond_broadcast(&wait_cv);
  pthread_mutex_unlock(&wait_mu);
}

/* Waits for the next `release` or the cancel; false when cancelled. */
static bool wait_release(void) {
  pthread_mutex_lock(&wait_mu);
  unsigned seen = released;
  waiting++;
  while (released == seen && !cancelled)
    pthread_cond_wait(&wait_cv, &wait_mu);
  waiting--;
  bool ok = !cancelled;
  pthread_mutex_unlock(&wait_mu);
  return ok;
}

static void log_line(void *user, const char *msg) {
  (void)user;
  fprintf(stderr, "dp_driver: %s\n", msg);
}

static void put(char *dst, const char *src) {
  snprintf(dst, GF_DP_STR_MAX, "%s", src);
}

static int allocate(void *user, const char *const *ids, size_t nids,
                    gf_dp_container_answer *out, gf_diag *d) {
  (void)user;
  for (size_t i = 0; i < nids; i++)
    if (strstr(ids[i], "bad"))
      return gf_diag_set(
          d, GF_ESTATE, "device %s is broken: refusing to hand it out", ids[i]);
  for (size_t i = 0; i < nids; i++)
    if (strstr(ids[i], "wait") && !wait_release())
      return gf_diag_set(d, GF_ESTATE, "stopped while %s waited", ids[i]);
  char gpu[GF_DP_ID_MAX];
  const char *sep = strstr(ids[0], "::");
  int glen = sep ? (int)(sep - ids[0]) : (int)strlen(ids[0]);
  snprintf(gpu, sizeof gpu, "%.*s", glen, ids[0]);
  char joined[GF_DP_STR_MAX] = "";
  size_t at = 0;
  for (size_t i = 0; i < nids && at < sizeof joined; i++) {
    int n =
        snprintf(joined + at, sizeof joined - at, "%s%s", i ? "," : "", ids[i]);
    if (n < 0)
      break;
    at += (size_t)n;
  }
  out->nenv = 2;
  put(out->env[0].key, "CUDA_VISIBLE_DEVICES");
  put(out->env[0].value, gpu);
  put(out->env[1].key, "GPUFRAC_DEVICE_IDS");
  put(out->env[1].value, joined);
  out->nmounts = 1;
  put(out->mounts[0].container_path, "/etc/gpufrac/shim.conf");
  snprintf(out->mounts[0].host_path, GF_DP_STR_MAX, "/run/gpufrac/%s/shim.conf",
           gpu);
  out->mounts[0].read_only = true;
  out->ndevnodes = 1;
  put(out->devnodes[0].container_path, "/dev/nvidia0");
  put(out->devnodes[0].host_path, "/dev/nvidia0");
  snprintf(out->devnodes[0].permissions, sizeof out->devnodes[0].permissions,
           "rw");
  out->ncdi = 1;
  snprintf(out->cdi[0], GF_DP_STR_MAX, "gpufrac.io/gpu=%s", gpu);
  out->nannotations = 1;
  put(out->annotations[0].key, "gpufrac.io/slots");
  snprintf(out->annotations[0].value, GF_DP_STR_MAX, "%zu", nids);
  return 0;
}

static int mark(gf_dp *dp, const char *id, bool healthy) {
  for (size_t i = 0; i < ndevs; i++)
    if (strcmp(devs[i].id, id) == 0) {
      devs[i].healthy = healthy;
      return gf__dp_set_devices(dp, devs, ndevs);
    }
  return GF_ENOTFOUND;
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: dp_driver DIR KUBELET_SOCK ENDPOINT GPUS SLOTS "
                    "[--preferred] [--extra ID]... [--idle-ms N] "
                    "[--preface-ms N]\n");
    return 2;
  }
  long gpus = strtol(argv[4], NULL, 10), slots = strtol(argv[5], NULL, 10);
  if (gpus < 0 || slots < 1 || gpus * slots > GF_DP_MAX_DEVICES - 16) {
    fprintf(stderr, "dp_driver: bad GPUS or SLOTS\n");
    return 2;
  }
  for (long g = 0; g < gpus; g++)
    for (long k = 0; k < slots; k++) {
      gf_dp_device *v = &devs[ndevs++];
      snprintf(v->id, sizeof v->id, "GPU-%08ld-0000-4000-8000-%012ld::%ld", g,
               g, k);
      v->healthy = true;
      v->numa_node = (int32_t)(g % 2);
    }
  gf_dp_opts o = {.plugin_dir = argv[1],
                  .kubelet_socket = argv[2],
                  .endpoint = argv[3],
                  .allocate = allocate,
                  .cancel = cancel,
                  .log = log_line};
  for (int i = 6; i < argc; i++) {
    if (strcmp(argv[i], "--preferred") == 0) {
      o.preferred_allocation = true;
    } else if (strcmp(argv[i], "--idle-ms") == 0 && i + 1 < argc) {
      o.idle_timeout_ms = (int)strtol(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--preface-ms") == 0 && i + 1 < argc) {
      o.preface_timeout_ms = (int)strtol(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--extra") == 0 && i + 1 < argc &&
               ndevs < GF_DP_MAX_DEVICES) {
      gf_dp_device *v = &devs[ndevs++];
      snprintf(v->id, sizeof v->id, "%s", argv[++i]);
      v->healthy = true;
      v->numa_node = -1;
    } else {
      fprintf(stderr, "dp_driver: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  gf_dp *dp;
  gf_diag d = {{0}};
  if (gf__dp_start(&dp, &o, devs, ndevs, &d)) {
    fprintf(stderr, "dp_driver: %s\n", d.msg);
    return 1;
  }
  printf("ready\n");
  fflush(stdout);
  char line[256];
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\r\n")] = '\0';
    if (strcmp(line, "quit") == 0)
      break;
    if (strcmp(line, "regs") == 0) {
      printf("%llu\n", (unsigned long long)gf__dp_registrations(dp));
    } else if (strcmp(line, "waiting") == 0) {
      pthread_mutex_lock(&wait_mu);
      printf("%u\n", waiting);
      pthread_mutex_unlock(&wait_mu);
    } else if (strcmp(line, "release") == 0) {
      pthread_mutex_lock(&wait_mu);
      released++;
      pthread_cond_broadcast(&wait_cv);
      pthread_mutex_unlock(&wait_mu);
      printf("ok\n");
    } else if (strncmp(line, "unhealthy ", 10) == 0)
      printf("%s\n", mark(dp, line + 10, false) ? "error" : "ok");
    else if (strncmp(line, "healthy ", 8) == 0)
      printf("%s\n", mark(dp, line + 8, true) ? "error" : "ok");
    else
      printf("error\n");
    fflush(stdout);
  }
  gf__dp_stop(dp);
  gf__dp_free(dp);
  return 0;
}
