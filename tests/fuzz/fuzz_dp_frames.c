/* libFuzzer target: the device plugin's HTTP/2 + gRPC server never crashes
 * and keeps serving, whatever a client sends.  One plugin runs for the whole
 * session (its own threads, a socket in a temporary directory, no kubelet).
 * The first byte of an input picks what the rest is:
 *   even: raw bytes after the HTTP/2 client preface, on a fresh connection
 *         that is then half-closed and drained;
 *   odd:  the message body of a well-framed gRPC call; byte 1 picks the
 *         method (the five served and one unknown).
 * After each input GetDevicePluginOptions must still answer status 0. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devplugin.h"
#include "fuzz_h2.h"
#include "gpufrac/error.h"
#include "h2grpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static gf_dp *dp;
static char dir[64], sock[128];

static const char *const paths[] = {
    "/v1beta1.DevicePlugin/GetDevicePluginOptions",
    "/v1beta1.DevicePlugin/ListAndWatch",
    "/v1beta1.DevicePlugin/GetPreferredAllocation",
    "/v1beta1.DevicePlugin/Allocate",
    "/v1beta1.DevicePlugin/PreStartContainer",
    "/v1beta1.DevicePlugin/Nope"};

static int allocate(void *user, const char *const *ids, size_t nids,
                    gf_dp_container_answer *out, gf_diag *d) {
  (void)user;
  if (nids > 1)
    return gf_diag_set(d, GF_ESTATE, "only one id: %s", ids[1]);
  out->nenv = 1;
  snprintf(out->env[0].key, GF_DP_STR_MAX, "ID");
  snprintf(out->env[0].value, GF_DP_STR_MAX, "%s", ids[0]);
  out->ncdi = 1;
  snprintf(out->cdi[0], GF_DP_STR_MAX, "gpufrac.io/gpu=%s", ids[0]);
  return 0;
}

static void stop_plugin(void) {
  gf__dp_stop(dp);
  gf__dp_free(dp);
  rmdir(dir);
}

static void start_plugin(void) {
  snprintf(dir, sizeof dir, "/tmp/gffuzzXXXXXX");
  if (!mkdtemp(dir))
    abort();
  snprintf(sock, sizeof sock, "%s/fuzz.sock", dir);
  gf_dp_device devs[8];
  for (int i = 0; i < 8; i++) {
    snprintf(devs[i].id, sizeof devs[i].id, "GPU-%d::%d", i / 4, i % 4);
    devs[i].healthy = true;
    devs[i].numa_node = i / 4;
  }
  gf_dp_opts o = {.plugin_dir = dir,
                  .endpoint = "fuzz.sock",
                  .allocate = allocate,
                  .preferred_allocation = true};
  gf_diag d = {{0}};
  if (gf__dp_start(&dp, &o, devs, 8, &d)) {
    fprintf(stderr, "%s\n", d.msg);
    abort();
  }
  atexit(stop_plugin);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dp)
    start_plugin();
  if (size < 2)
    return 0;
  int status;
  char msg[GF_DIAG_MAX];
  uint8_t *resp = NULL;
  size_t rlen;
  gf_diag d = {{0}};
  if (data[0] % 2 == 0) {
    fh_raw(sock, data + 1, size - 1);
  } else if (data[1] % 6 != 1) { /* ListAndWatch stays open: skip */
    if (gf__grpc_call_unix(sock, paths[data[1] % 6], data + 2, size - 2, 5000,
                           &status, msg, sizeof msg, &resp, &rlen, NULL, &d))
      abort(); /* every call gets a gRPC status */
    free(resp);
    resp = NULL;
  }
  if (gf__grpc_call_unix(sock, paths[0], NULL, 0, 5000, &status, msg,
                         sizeof msg, &resp, &rlen, NULL, &d) ||
      status != 0)
    abort(); /* still serving */
  free(resp);
  return 0;
}
