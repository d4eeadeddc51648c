/* libFuzzer target: the DRA claim reader and the checks of prepare.  Each
 * input is a ResourceClaim's JSON text; when it parses, it is prepared on a
 * pool of two GPUs (gpu-0 shared, 80 GiB; gpu-1 exclusive) in node n1,
 * next to one claim already prepared (16 GiB and 50 cores of gpu-0).
 * Invariants: a refusal leaves no files; an accepted claim keeps gpu-0's
 * sums within 80 GiB and 100 cores, never names gpu-1 twice beside the
 * other claim, and unprepare takes it back to the one claim. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpufrac/error.h"
#include "node_dra.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define GiB (1ll << 30)
static gf_node_dra_state *st;
static char dir[64];

static void cleanup(void) {
  gf__node_dra_state_free(st);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
}

static void start(void) {
  snprintf(dir, sizeof dir, "/tmp/gffuzzdraXXXXXX");
  if (!mkdtemp(dir))
    abort();
  static gf_node_gpus g;
  g.ngpus = 2;
  for (uint32_t i = 0; i < 2; i++) {
    gf_node_gpu *x = &g.gpus[i];
    x->index = i;
    snprintf(x->uuid, sizeof x->uuid, "GPU-00000000-1111-2222-3333-%012u", i);
    x->mem_bytes = 80 * GiB;
    x->healthy = true;
    x->mode = i ? GF_NODE_MODE_EXCLUSIVE : GF_NODE_MODE_SHARED;
  }
  char sd[128], cd[128];
  snprintf(sd, sizeof sd, "%s/state", dir);
  snprintf(cd, sizeof cd, "%s/cdi", dir);
  gf_node_dra_opts o = {.node = "n1", .state_dir = sd, .cdi_dir = cd};
  gf_diag d = {""};
  if (gf__node_dra_state_open(&st, &o, &g, &d))
    abort();
  gf_node_dra_claim c;
  memset(&c, 0, sizeof c);
  snprintf(c.ns, sizeof c.ns, "ns");
  snprintf(c.name, sizeof c.name, "base");
  snprintf(c.uid, sizeof c.uid, "base-uid");
  c.nresults = 1;
  gf_node_dra_result *r = &c.results[0];
  snprintf(r->request, sizeof r->request, "r");
  snprintf(r->pool, sizeof r->pool, "n1");
  snprintf(r->device, sizeof r->device, "gpu-0");
  snprintf(r->share_id, sizeof r->share_id, "s");
  r->has_memory = r->has_cores = true;
  r->memory = 16 * GiB;
  r->cores = 50;
  gf_node_dra_prepared p;
  if (gf__node_dra_prepare(st, &c, &p, &d))
    abort();
  atexit(cleanup);
}

static bool exists(const char *uid) {
  char p[512];
  struct stat s;
  snprintf(p, sizeof p, "%s/state/pods/%s", dir, uid);
  if (stat(p, &s) == 0)
    return true;
  snprintf(p, sizeof p, "%s/cdi/gpufrac.io-%s_claim.json", dir, uid);
  return stat(p, &s) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!st)
    start();
  gf_node_dra_claim *c = malloc(sizeof *c);
  gf_node_dra_prepared *p = malloc(sizeof *p);
  if (!c || !p)
    abort();
  gf_diag d = {""};
  if (gf__node_dra_claim_parse((const char *)data, size, GF_NODE_DRA_DRIVER, c,
                               &d) != 0)
    goto out;
  if (!d.msg[0] && c->nresults == 0)
    abort(); /* success means results */
  if (strcmp(c->uid, "base-uid") == 0)
    goto out; /* the prepared claim answers as itself */
  int rc = gf__node_dra_prepare(st, c, p, &d);
  if (rc) {
    if (gf__node_dra_state_count(st) != 1 ||
        (gf_node_safe_name(c->uid) && exists(c->uid)))
      abort(); /* a refusal changes nothing */
    goto out;
  }
  int64_t mem = 16 * GiB, cores = 50;
  for (uint32_t i = 0; i < p->claim.nresults; i++) {
    const gf_node_dra_result *r = &p->claim.results[i];
    if (strcmp(r->device, "gpu-0") == 0) {
      mem += r->has_memory ? r->memory : 80 * GiB;
      cores += r->has_cores ? r->cores : 100;
    } else if (strcmp(r->device, "gpu-1") != 0) {
      abort(); /* only the pool's devices */
    }
  }
  if (mem > 80 * GiB || cores > 100)
    abort();
  if (gf__node_dra_unprepare(st, c->uid, &d) ||
      gf__node_dra_state_count(st) != 1 || exists(c->uid))
    abort();
out:
  free(c);
  free(p);
  return 0;
}
