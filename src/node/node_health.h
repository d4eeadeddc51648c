/*
 * src/node/node_health.h - GPU health from NVML's Xid events.
 *
 * A GPU that reports a critical Xid (a driver-detected fault: 48 double-bit
 * ECC, 79 fallen off the bus, 94/95 contained/uncontained ECC, ...) must
 * stop receiving work: the agent marks it unhealthy, the device plugin
 * streams that to kubelet, the inventory drops it so the extender stops
 * placing on it.  Xids a misbehaving *program* causes (13 graphics engine
 * exception, 31 memory page fault, 43 stopped processing, 45 preemptive
 * cleanup, 68 video decoder exception, 109 context switch timeout) say
 * nothing about the GPU and are ignored by default, as NVIDIA's own device
 * plugin does.
 *
 * Unhealthy is sticky until the agent restarts: a GPU that faulted once is
 * not trusted again without a person looking (or a driver reset, after
 * which the agent restarts with it).
 *
 * Invariants.  NVML is loaded with dlopen, as in discovery; a driver
 * without event support is GF_ENOTFOUND at open (the agent then runs
 * without Xid health and says so); a wait never blocks longer than asked.
 */
#ifndef GPUFRAC_NODE_HEALTH_H
#define GPUFRAC_NODE_HEALTH_H

#include <stdbool.h>
#include <stdint.h>

#include "gpufrac/diag.h"
#include "gpufrac/node.h"

#define GF_NODE_XID_IGNORE_MAX 32

/* One event.  all: NVML gave no device (every GPU is affected). */
typedef struct gf_node_xid {
  char uuid[GF_UUID_MAX];
  uint64_t xid;
  bool all;
} gf_node_xid;

typedef struct gf_node_health gf_node_health;

/* Opens NVML (lib NULL: "libnvidia-ml.so.1"), creates an event set and
 * registers every GPU for critical Xid events.  A GPU that cannot register
 * is skipped (discovery already reports broken GPUs).  GF_ENOTFOUND (no
 * library, no event symbols), GF_EIO (nvmlInit or the event set failed). */
int gf__node_health_open(gf_node_health **out, const char *lib, gf_diag *d);

/* Waits up to timeout_ms for one event.  Returns 1 with *ev filled, 0 on
 * timeout, or GF_EIO with NVML's message. */
int gf__node_health_wait(gf_node_health *h, unsigned timeout_ms,
                         gf_node_xid *ev, gf_diag *d);

/* Live telemetry of the GPU with this uuid through the same NVML session:
 * utilisation (nvmlDeviceGetUtilizationRates, gpu percent) and memory in use
 * on the device (nvmlDeviceGetMemoryInfo: every process, the driver's
 * reservations included).  Fields NVML cannot give are set to -1.  Returns
 * false for a uuid the session does not know. */
bool gf__node_health_sample(gf_node_health *h, const char *uuid,
                            int32_t *util_pct, int64_t *used_bytes);

/* Per-process SM utilisation on the GPU with this uuid since the previous
 * call (nvmlDeviceGetProcessUtilization), one entry per host pid (its
 * samples averaged), into out[0..cap).  Returns how many; 0 when NVML has
 * none or lacks the call. */
struct gf_node_proc_util;
size_t gf__node_health_processes(gf_node_health *h, const char *uuid,
                                 struct gf_node_proc_util *out, size_t cap);

void gf__node_health_close(gf_node_health *h);

/* The default list of application Xids (13, 31, 43, 45, 68, 109). */
extern const uint64_t gf_node_xid_app_default[6];

/* True when xid is in ignore[0..n). */
bool gf__node_xid_ignored(uint64_t xid, const uint64_t *ignore, uint32_t n);

/* Marks the GPU with uuid (every GPU when all) unhealthy with the reason
 * "Xid N".  Returns how many GPUs changed. */
uint32_t gf__node_mark_xid(gf_node_gpus *g, const gf_node_xid *ev);

#endif
