/*
 * src/node/node_mps.h - the MPS control daemon of a GPU in mode `mps`.
 *
 * Why.  A GPU the node config puts in mode mps is shared through NVIDIA's
 * Multi-Process Service instead of the interposer: one control daemon per
 * GPU (its own pipe directory, CUDA_VISIBLE_DEVICES = that GPU's uuid),
 * and each container gets the pipe directory and its limits as MPS client
 * variables (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).
 *
 * What MPS does and does not guarantee, stated plainly: a client's
 * variables can only lower what the daemon allows, never raise it; the
 * daemon's defaults here are 100% and no memory limit, so a container that
 * rewrites its own environment can take more than its grant.  Use `shared`
 * (the interposer, with a read-only config) for tenants that are not
 * trusted; mps is for cooperating workloads that want MPS's concurrency.
 *
 * Invariants.  The daemon runs in the foreground (`-f`) as the agent's
 * child, so the agent knows when it dies and starts it again (at most once
 * per restart_ms); stopping sends `quit` through the control program and
 * waits, then SIGTERM, then SIGKILL.  Nothing here blocks for longer than
 * the stop timeout.
 */
#ifndef GPUFRAC_NODE_MPS_H
#define GPUFRAC_NODE_MPS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpufrac/diag.h"
#include "gpufrac/node.h"

#define GF_NODE_MPS_CTR_PIPE "/tmp/nvidia-mps" /* in the container */

typedef struct gf_node_mps gf_node_mps;

typedef struct gf_node_mps_opts {
  const char *control; /* nvidia-cuda-mps-control (a path or a name on PATH) */
  const char *dir;     /* <dir>/<uuid>/{pipe,log}, <dir>/shm */
  long restart_ms;     /* least time between restarts; 0 = 5000 */
  long stop_ms;        /* how long stop waits before signals; 0 = 5000 */
} gf_node_mps_opts;

/* Starts the control daemon for gpu (its uuid).  GF_EIO naming what failed
 * (directory, fork, exec: an exec failure shows as the child's exit 127,
 * found at the next check). */
int gf__node_mps_start(const gf_node_mps_opts *o, const gf_node_gpu *gpu,
                       gf_node_mps **out, gf_diag *d);

/* Reaps the daemon if it died and starts it again when restart_ms has
 * passed since the last start.  Returns true while a daemon is running;
 * d says what happened when it was found dead. */
bool gf__node_mps_check(gf_node_mps *m, gf_diag *d);

/* pid of the running daemon, 0 when none; restarts so far. */
pid_t gf__node_mps_pid(const gf_node_mps *m);
uint32_t gf__node_mps_restarts(const gf_node_mps *m);

/* Host paths of the GPU's pipe directory and of the shared /dev/shm. */
const char *gf__node_mps_pipe_dir(const gf_node_mps *m);

/* Host path of the pipe directory for a uuid under dir, into buf. */
bool gf__node_mps_pipe_path(const char *dir, const char *uuid, char *buf,
                            size_t cap);
bool gf__node_mps_shm_path(const char *dir, char *buf, size_t cap);

/* Sends quit, waits, signals if needed; never frees.  Idempotent; NULL is
 * fine. */
void gf__node_mps_stop(gf_node_mps *m);

/* Stops (if running) and frees m.  NULL is fine. */
void gf__node_mps_free(gf_node_mps *m);

#endif
