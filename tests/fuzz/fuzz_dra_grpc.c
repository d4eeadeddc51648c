/* libFuzzer target: the DRA plugin's gRPC server (registration and the
 * DRA service) never crashes and keeps serving, whatever a client sends.
 * One plugin runs for the session (sockets in a temporary directory) with
 * callbacks that answer from the claim's name.  Byte 0 of an input picks
 * what the rest is:
 *   0: raw bytes after the HTTP/2 preface on the DRA socket;
 *   1: the body of GetInfo, 2: of NotifyRegistrationStatus,
 *   3: of NodePrepareResources, 4: of NodeUnprepareResources, 5: an
 *      unknown method.
 * Every call must get a gRPC status; a status 0 answer of the DRA service
 * must decode as its response with one entry per claim asked; afterwards
 * GetInfo must still answer status 0 with the driver's name. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dra/v1/api.pb-c.h"
#include "draplugin.h"
#include "fuzz_h2.h"
#include "gpufrac/error.h"
#include "h2grpc.h"
#include "pluginregistration/v1/api.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static gf_drap *pl;
static char dir[64], reg[160], dra[160];

static const char *const paths[] = {
    "/pluginregistration.Registration/GetInfo",
    "/pluginregistration.Registration/NotifyRegistrationStatus",
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/Nope"};

static int prepare(void *user, const char *ns, const char *name,
                   const char *uid, gf_drap_answer *a, gf_diag *d) {
  (void)user;
  if (name[0] == 'x')
    return gf_diag_set(d, GF_ENOFIT, "claim %s/%s (%s) does not fit", ns, name,
                       uid);
  a->n = strlen(name) % 3;
  for (size_t i = 0; i < a->n; i++) {
    snprintf(a->dev[i].request, sizeof a->dev[i].request, "r%zu", i);
    snprintf(a->dev[i].pool, sizeof a->dev[i].pool, "n1");
    snprintf(a->dev[i].device, sizeof a->dev[i].device, "gpu-%zu", i);
    snprintf(a->dev[i].share_id, sizeof a->dev[i].share_id, "%s", i ? "" : uid);
    snprintf(a->dev[i].cdi_id, sizeof a->dev[i].cdi_id, "gpufrac.io/gpu=%s",
             uid);
  }
  return 0;
}

static int unprepare(void *user, const char *ns, const char *name,
                     const char *uid, gf_diag *d) {
  (void)user;
  (void)uid;
  return name[0] == 'x'
             ? gf_diag_set(d, GF_EIO, "cannot remove %s/%s", ns, name)
             : 0;
}

static void stop_plugin(void) {
  gf__drap_stop(pl);
  gf__drap_free(pl);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
}

static void start_plugin(void) {
  snprintf(dir, sizeof dir, "/tmp/gffuzzXXXXXX");
  if (!mkdtemp(dir))
    abort();
  char rd[96], pd[96];
  snprintf(rd, sizeof rd, "%s/reg", dir);
  snprintf(pd, sizeof pd, "%s/plug", dir);
  snprintf(reg, sizeof reg, "%s/gpu.gpufrac.io-reg.sock", rd);
  snprintf(dra, sizeof dra, "%s/dra.sock", pd);
  gf_drap_opts o = {.driver = "gpu.gpufrac.io",
                    .registry_dir = rd,
                    .plugin_dir = pd,
                    .prepare = prepare,
                    .unprepare = unprepare};
  gf_diag d = {{0}};
  if (gf__drap_start(&pl, &o, &d)) {
    fprintf(stderr, "%s\n", d.msg);
    abort();
  }
  atexit(stop_plugin);
}

/* A status 0 answer of the DRA service: its response, one entry per
 * claim of the request. */
static void check_answer(int m, const uint8_t *req, size_t len,
                         const uint8_t *resp, size_t rlen) {
  if (m == 2) {
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest *q =
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__unpack(
            NULL, len, req);
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse *r =
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__unpack(
            NULL, rlen, resp);
    if (!q || !r || r->n_claims != q->n_claims)
      abort();
    k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__free_unpacked(
        q, NULL);
    k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked(
        r, NULL);
  } else if (m == 3) {
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest *q =
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__unpack(
            NULL, len, req);
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse *r =
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__unpack(
            NULL, rlen, resp);
    if (!q || !r || r->n_claims != q->n_claims)
      abort();
    k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__free_unpacked(
        q, NULL);
    k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__free_unpacked(
        r, NULL);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!pl)
    start_plugin();
  if (size < 1)
    return 0;
  int status;
  char msg[GF_DIAG_MAX];
  uint8_t *resp = NULL;
  size_t rlen = 0;
  gf_diag d = {{0}};
  int pick = data[0] % 6;
  if (pick == 0) {
    fh_raw(dra, data + 1, size - 1);
  } else {
    int m = pick - 1;
    const char *sock = m < 2 ? reg : dra;
    if (gf__grpc_call_unix(sock, paths[m], data + 1, size - 1, 5000, &status,
                           msg, sizeof msg, &resp, &rlen, NULL, &d))
      abort(); /* every call gets a gRPC status */
    if (status == 0)
      check_answer(m, data + 1, size - 1, resp, rlen);
    free(resp);
    resp = NULL;
  }
  if (gf__grpc_call_unix(reg, paths[0], NULL, 0, 5000, &status, msg, sizeof msg,
                         &resp, &rlen, NULL, &d) ||
      status != 0)
    abort(); /* still serving */
  Pluginregistration__PluginInfo *info =
      pluginregistration__plugin_info__unpack(NULL, rlen, resp);
  if (!info || strcmp(info->name, "gpu.gpufrac.io") != 0)
    abort();
  pluginregistration__plugin_info__free_unpacked(info, NULL);
  free(resp);
  return 0;
}
