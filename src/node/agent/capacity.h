/*
 * capacity.h - share capacity on the Node (docs/kube.md, "Share capacity
 * on the Node"): in device-plugin mode the agent owns two extended
 * resources in its Node's status.capacity, gpufrac.io/gpu-memory (bytes:
 * the memory of every GPU unit the inventory offers the extender) and
 * gpufrac.io/gpu-compute (100 per such unit: the percent unit of a share's
 * gpu-compute).  kubelet copies them to allocatable; kube-scheduler's
 * NodeResourcesFit queueing hint then finds that a share fits the Node and
 * requeues it at once when the device plugin comes back.
 *
 * Invariants.  The values are read from the inventory the agent publishes
 * with the extender's reader, so they are what the extender may grant.
 * The Node is read every interval and patched only when its entries differ
 * (a merge patch on nodes/NAME/status); a failure is retried with capped
 * backoff, logged once per change of state, never fatal.  Nothing removes
 * the entries: not SIGTERM, not free (an upgrade must not flap them).
 */
#ifndef GPUFRAC_NODE_AGENT_CAPACITY_H
#define GPUFRAC_NODE_AGENT_CAPACITY_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpufrac/diag.h"
#include "gpufrac/node.h"

struct gf_kube_config;

#define GF_CAPACITY_MEMORY "gpufrac.io/gpu-memory"
#define GF_CAPACITY_COMPUTE "gpufrac.io/gpu-compute"
#define GF_CAPACITY_COMPUTE_PER_GPU 100 /* gpu-compute is a percent */

typedef struct gf_node_capacity_want {
  int64_t mem_bytes; /* the inventory's GPU units' memory, summed */
  int64_t compute;   /* GF_CAPACITY_COMPUTE_PER_GPU per unit */
  uint32_t units;    /* the inventory's GPU units (GPUs, MIG units) */
} gf_node_capacity_want;

/* What g's inventory offers the extender, as the extender reads it
 * (models do not count; a GPU in MIG mode is left out, its MIG devices
 * count).  Zeros when the inventory cannot be built (out of memory). */
void gf__node_capacity_want(const gf_node_gpus *g, gf_node_capacity_want *w);

/* The merge patch for nodes/NAME/status:
 * {"status":{"capacity":{"gpufrac.io/gpu-memory":"<bytes>",
 *                        "gpufrac.io/gpu-compute":"<n>"}}}.
 * NULL when out of memory. */
json_t *gf__node_capacity_patch(const gf_node_capacity_want *w);

/* Whether node (a v1 Node) has both entries in status.capacity with w's
 * values (compared as quantities: the API server may write 160Gi for
 * 171798691840). */
bool gf__node_capacity_matches(const json_t *node,
                               const gf_node_capacity_want *w);

typedef struct gf_node_capacity gf_node_capacity;

/* A link for node through cfg (borrowed); check_s: how often the Node is
 * read when nothing changed.  GF_ENOMEM, GF_EINVAL, the client's errors. */
int gf__node_capacity_new(gf_node_capacity **out, struct gf_kube_config *cfg,
                          const char *node, int64_t check_s, gf_diag *d);

/* From the agent's loop (every second, and before each inventory
 * publish): reads the Node when g's values changed, when the check period
 * ran out or a retry's backoff did, and patches it when it differs.
 * now_ms: a monotonic clock.  NULL c: nothing. */
void gf__node_capacity_tick(gf_node_capacity *c, const gf_node_gpus *g,
                            int64_t now_ms);

/* Whether the Node carried g's values at the last tick that checked. */
bool gf__node_capacity_ok(const gf_node_capacity *c);

/* Frees the link; the Node's entries stay.  NULL ok. */
void gf__node_capacity_free(gf_node_capacity *c);

#endif
