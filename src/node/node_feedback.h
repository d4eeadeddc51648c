/*
 * src/node/node_feedback.h - the node agent's half of the compute share's
 * control loop: how much of a GPU each container really used, written into
 * its region (gf_region_observe) so the interposer's token bucket corrects
 * its refill (docs/shim.md, "Utilisation feedback").
 *
 * Where the numbers come from.  NVML's per-process samples
 * (nvmlDeviceGetProcessUtilization: SM utilisation by host pid) summed over
 * the pod's processes, the pod found from the process's cgroup (its path
 * holds "pod<uid>", with '-' or '_'); this needs the host's /proc (the
 * DaemonSet's hostPID).  Without process samples, a GPU that only one
 * container has a grant on is measured by the GPU's own utilisation.
 * Otherwise the container is not observed this round (no sample is better
 * than a wrong one: the bucket keeps its correction).
 *
 * Invariants.  Only regions under state_dir are written, opened as the
 * metrics open them (no links followed, never blocking on a lock a
 * container holds); one bad container never stops the others.
 */
#ifndef GPUFRAC_NODE_FEEDBACK_H
#define GPUFRAC_NODE_FEEDBACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/node.h"

/* One process's SM utilisation on one GPU over the last sample period. */
typedef struct gf_node_proc_util {
  uint32_t pid; /* host pid */
  char uuid[GF_UUID_MAX];
  uint32_t sm_pct; /* 0..100 */
} gf_node_proc_util;

/* The pod uid a host pid belongs to, from <proc>/<pid>/cgroup ("pod<uid>"
 * with '_' turned back to '-').  False when it is not a pod's process or
 * cannot be read. */
bool gf__node_pid_pod(const char *proc, uint32_t pid, char *uid, size_t cap);

/* Observes every container under state_dir: its utilisation (basis points
 * of one GPU, the mean over its granted GPUs that could be measured) from
 * the process samples, else from g's util_pct on a GPU it alone holds.
 * Returns how many regions were written. */
size_t gf__node_feedback(const char *state_dir, const char *proc,
                         const gf_node_gpus *g, const gf_node_proc_util *s,
                         size_t ns);

#endif
