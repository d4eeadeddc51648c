/*
 * gpufrac/node_agent.h - the running node agent: discovery on a period,
 * the CDI spec, the metrics server, the Xid health thread, the MPS
 * daemons, and either kubelet's device plugin with the inventory annotation
 * or (mode dra) the DRA driver with its ResourceSlices.
 *
 * Why it exists.  Each of those is a module of src/node with its own
 * header; this is the wiring that starts them in order, feeds each
 * rediscovery to all of them and stops them in reverse, so `gpufrac node`
 * only parses options and runs it (as sched_kube.h does for the extender).
 *
 * Invariants.
 *   - It logs on stderr, every line prefixed "gpufrac node: "; a part that
 *     fails after start (a publish, a rediscovery, an MPS daemon) is
 *     logged once per change and retried, never fatal.
 *   - Start brings its parts up one init step each (API side or DRA side,
 *     metrics server, signals, Xid health, MPS); a failure stops what it
 *     started (free releases it) and returns the code.
 *   - Stop never frees: stop, then free.  Stop is idempotent and safe
 *     without start; free stops first when needed.  The device plugin and
 *     the DRA plugin stop before what their calls reach.
 */
#ifndef GPUFRAC_NODE_AGENT_H
#define GPUFRAC_NODE_AGENT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gpufrac/node.h"

typedef struct gf_node_agent_opts {
  const char *fake;       /* --fake-gpus SPEC; NULL: NVML */
  const char *nvml;       /* NVML library; NULL: libnvidia-ml.so.1 */
  const char *node_name;  /* NULL: $NODE_NAME */
  const char *kubeconfig; /* NULL: in-cluster when in a pod */
  bool no_kube;           /* no API server at all */
  bool dra;               /* mode dra: the DRA driver, not a device plugin */
  bool no_capacity;       /* device-plugin mode: leave the Node's status
                             capacity alone (no gpufrac.io/gpu-memory,
                             gpu-compute; docs/kube.md) */
  int64_t interval;       /* rediscovery period in seconds, 1..3600 */
} gf_node_agent_opts;

typedef struct gf_node_agent gf_node_agent;

/* Copies o (its strings are borrowed and must outlive the agent) and cfg,
 * and discovers the GPUs once (the reason logged).  GF_ENOMEM, or what
 * discovery or the node config fails with; *out NULL then. */
int gf_node_agent_new(gf_node_agent **out, const gf_node_agent_opts *o,
                      const gf_node_config *cfg);

/* The GPUs as last discovered (valid while a lives, changed by run). */
const gf_node_gpus *gf_node_agent_gpus(const gf_node_agent *a);

/* Writes the node's CDI spec (gpufrac.io-gpu.json in cfg->cdi_dir).
 * Logs and returns the code on failure. */
int gf_node_agent_write_cdi(gf_node_agent *a);

/* Prints one document to fp: "gpus" (a table), "inventory", "cdi",
 * "metrics" or "slices" (the DRA ResourceSlices).  GF_EINVAL for another
 * name; GF_EIO when fp cannot be written; what building it fails with
 * (logged). */
int gf_node_agent_print(gf_node_agent *a, const char *what, FILE *fp);

/* Starts the parts: the API side (pod cache, allocator, node link, device
 * plugin, inventory, and unless o->no_capacity the share capacity in the
 * Node's status, whose failures are logged, never fatal) or with o->dra the DRA
 * side (claim state, slice publisher, DRA plugin), the metrics server on
 * cfg->listen, handlers for SIGINT and SIGTERM (SIGPIPE ignored), the Xid
 * health thread and the MPS daemons.  Without an API server (none configured,
 * not in a pod) only the API side is left out.  An agent starts once: GF_ESTATE
 * if it was started before. */
int gf_node_agent_start(gf_node_agent *a);

/* Runs the agent's loop on the calling thread until SIGINT or SIGTERM:
 * every second MPS supervision and telemetry, every interval (or at once
 * after a critical Xid) rediscovery fed to every part. */
void gf_node_agent_run(gf_node_agent *a);

/* Stops every part started: the Xid thread, the MPS daemons, the metrics
 * server, then the DRA plugin or the device plugin (before what their
 * calls reach) and the node link.  Idempotent; never frees. */
void gf_node_agent_stop(gf_node_agent *a);

/* Stops (if running) and frees.  NULL is accepted. */
void gf_node_agent_free(gf_node_agent *a);

#endif
