/*
 * src/node/draplugin.h - the kubelet side of a DRA driver: plugin
 * registration (pluginregistration v1: GetInfo, NotifyRegistrationStatus)
 * and the DRA service (dra v1: NodePrepareResources,
 * NodeUnprepareResources), served over gRPC on two unix sockets.
 *
 * Why it exists.  kubelet's plugin watcher finds a DRA driver by a socket
 * in its plugins_registry directory, asks it GetInfo (type "DRAPlugin", the
 * driver name, the socket of the DRA service, "v1.DRAPlugin"), and then
 * calls the DRA service before a pod's containers start and after they
 * stop.  What preparing means is the caller's (the node agent,
 * node_dra.h); this module is the wire.
 *
 * Invariants.
 *   - The callbacks run on one worker thread, one claim at a time in the
 *     order they came (prepare and unprepare alike), never on the server's
 *     loop; other calls are served meanwhile.
 *   - A claim's failure is that claim's `error` in the answer; the call
 *     itself fails only for a malformed request (INVALID_ARGUMENT) or when
 *     the plugin stops (UNAVAILABLE).
 *   - Both sockets are removed on stop (only if they are still ours).
 */
#ifndef GPUFRAC_DRAPLUGIN_H
#define GPUFRAC_DRAPLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/diag.h"

#define GF_DRAP_MAX_DEVICES 32 /* devices answered for one claim */
#define GF_DRAP_MAX_CLAIMS 128 /* claims in one call */

/* One prepared device of a claim. */
typedef struct gf_drap_device {
  char request[128];
  char pool[254];
  char device[64];
  char share_id[64]; /* "" when none */
  char cdi_id[320];
  char driver_cdi_id[112]; /* the driver's CDI device; "" when none */
} gf_drap_device;

typedef struct gf_drap_answer {
  size_t n;
  gf_drap_device dev[GF_DRAP_MAX_DEVICES];
} gf_drap_answer;

struct gf_node_dra_prepared;
/* What a prepared claim answers kubelet: one device per result, request
 * name as kubelet matches a container's claim entry against it (a
 * firstAvailable result "gpu/h100" answers "gpu": a container names the
 * request, never the subrequest), pool, device, shareID and the claim's
 * CDI device id, then the driver's CDI device of the result's GPU when the
 * agent has a driver_cdi (p->driver_ids). */
void gf__drap_answer_of(const struct gf_node_dra_prepared *p,
                        gf_drap_answer *a);

/* Prepares claim ns/name with uid: 0 with *a filled, or a GF_E* code with
 * the sentence in d (sent as that claim's error). */
typedef int (*gf_drap_prepare_fn)(void *user, const char *ns, const char *name,
                                  const char *uid, gf_drap_answer *a,
                                  gf_diag *d);
typedef int (*gf_drap_unprepare_fn)(void *user, const char *ns,
                                    const char *name, const char *uid,
                                    gf_diag *d);
typedef void (*gf_drap_log_fn)(void *user, const char *msg);

typedef struct gf_drap_opts {
  const char *driver;       /* "gpu.gpufrac.io" */
  const char *registry_dir; /* NULL: /var/lib/kubelet/plugins_registry */
  const char *plugin_dir;   /* NULL: /var/lib/kubelet/plugins/<driver> */
  gf_drap_prepare_fn prepare;
  gf_drap_unprepare_fn unprepare;
  gf_drap_log_fn log; /* registration and refusals; may be NULL */
  void *user;
  int idle_timeout_ms, preface_timeout_ms; /* 0: h2grpc's defaults */
} gf_drap_opts;

typedef struct gf_drap gf_drap;

/* Listens on <registry_dir>/<driver>-reg.sock and <plugin_dir>/dra.sock
 * (directories created) and serves until gf__drap_stop.  GF_EINVAL (no
 * callbacks, a path too long for a socket), GF_EIO. */
int gf__drap_start(gf_drap **out, const gf_drap_opts *o, gf_diag *d);

/* How many times kubelet said plugin_registered = true. */
uint64_t gf__drap_registrations(const gf_drap *p);

/* The DRA service's socket path. */
const char *gf__drap_endpoint(const gf_drap *p);

/* Stops serving (calls waiting are answered UNAVAILABLE), waits for the
 * worker, removes the sockets; never frees.  Idempotent; NULL is fine. */
void gf__drap_stop(gf_drap *p);

/* Stops (if not stopped yet) and frees p.  NULL is fine. */
void gf__drap_free(gf_drap *p);

#endif
