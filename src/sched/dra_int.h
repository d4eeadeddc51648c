/*
 * dra_int.h - what dra.c and dra_taint.c share (internal to gf_sched).
 */
#ifndef GPUFRAC_SCHED_DRA_INT_H
#define GPUFRAC_SCHED_DRA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "gpufrac/sched_dra.h"

/* Whether request ri of claim c may be placed on dev by gpufrac: dev
 * carries the allocator taint and the request tolerates each of its
 * blocking taints; *used (may be NULL) gets the bits of the claim's
 * tolerations that did. */
bool gf__dra_request_admits(const gf_dra_claim *c, uint32_t ri,
                            const gf_dra_device *dev, uint32_t *used);
/* Whether gpufrac may place every request of pod[0..npod-1] on dev
 * (npod 0: a pod tolerating nothing). */
bool gf__dra_pod_admits(const gf_dra_claim *const *pod, uint32_t npod,
                        const gf_dra_device *dev);
/* Sets res's "tolerations": the allocator taint's when r->tolerates_own,
 * and claim c's tolerations r->tols_used names; none: no member.  -1 when
 * out of memory. */
int gf__dra_tolerations_json(struct json_t *res, const gf_dra_result *r,
                             const gf_dra_claim *c);

/* Sets allocation's "allocationTimestamp" to now (RFC 3339, UTC, seconds),
 * as kube-scheduler stamps the allocations it writes.  kube-scheduler
 * v1.37 stamps an allocation that has none when it reserves the claim for
 * another pod, and the API server refuses that as a change to the
 * allocation: an allocation written without it cannot be shared
 * (docs/dra.md, "Claims shared by several pods").  GF_ENOMEM. */
int gf__dra_allocation_stamp(struct json_t *allocation, time_t now);

/* Mode 2's placement of a pod some of whose claims may be allocated
 * already (by gpufrac for another pod, or by kube-scheduler): the pod is
 * one more consumer of each such claim, which is neither placed nor booked
 * again (its results are copied to res as they are); the other claims are
 * placed on the node the allocated ones are on, or anywhere when none is.
 * GF_ENOFIT with the reason (naming the allocated claim and its node) when
 * they do not fit there, or the allocated claims are on two nodes, or on a
 * node without devices gpufrac allocates; GF_EINVAL when every claim is
 * allocated (nothing to place).  Otherwise as gf_dra_model_place_own. */
int gf__dra_model_place_pinned(gf_dra_model *m,
                               const gf_dra_claim *const *claims, uint32_t n,
                               uint32_t weights, uint32_t weights_own,
                               const uint8_t *rnd, size_t rnd_len,
                               gf_dra_result (*res)[GF_DRA_RESULTS_MAX],
                               uint32_t *nres, char node[GF_DRA_NAME_MAX],
                               gf_diag *d);

/* Memory booked on the devices m's engine places on: every allocated
 * claim's results counted once, whatever number of pods it is reserved
 * for. */
int64_t gf__dra_model_booked_mem(const gf_dra_model *m);

/* Books claim c's results in m as a build does for an allocated claim
 * (the feed's model after someone else allocated c, without a rebuild). */
void gf__dra_model_book_claim(gf_dra_model *m, const gf_dra_claim *c);

/* The state of a mode 2 preemption's hold (docs/dra.md, "Preemption"):
 * its victims were evicted at since_ms, the longest of their
 * terminationGracePeriodSeconds is grace_ms, nterm of them still exist
 * with deletionTimestamp set at now_ms and nclaims of their claims are still
 * allocated.  GF__DRA_HOLD_KEEP: the hold
 * books the preemptor's share; GF__DRA_HOLD_END: it ends; GF__DRA_HOLD_BLOCK:
 * it books no more (past grace_ms + GF__DRA_HOLD_MARGIN_MS) but, as
 * kube-scheduler does for a nominated pod, the preemptor gets no new
 * victims while earlier ones are still terminating (or, for one more
 * margin, while their claims are not yet released: a deleted pod's claim
 * is released a moment after it goes). */
#define GF__DRA_HOLD_MARGIN_MS 120000
enum { GF__DRA_HOLD_KEEP, GF__DRA_HOLD_END, GF__DRA_HOLD_BLOCK };
int gf__dra_hold_state(int64_t now_ms, int64_t since_ms, int64_t grace_ms,
                       uint32_t nterm, uint32_t nclaims);

/* Whether claim c (allocated) has a result m cannot be: on a device of m's
 * engine, consuming more of a capacity than the device has at all (a
 * claim allocated by hand, e.g. consumedCapacity.memory 9000Gi on an
 * 80Gi GPU), or a capacity the device does not have.  When so, why gets
 * the claim, the device and the amounts. */
bool gf__dra_model_impossible(const gf_dra_model *m, const gf_dra_claim *c,
                              char *why, size_t cap);

/* Whether mode 2 counts pod (a slim copy: annotations, spec.nodeName,
 * status.conditions) as loading its weights, so that it is a victim only
 * of a pod GF__PREEMPT_GUARD_GAP above it (docs/dra.md, "Preemption"):
 * gpufrac.io/protect "always"; or the guard's gpufrac.io/guard-since
 * without -released; or, with neither (the extender's guard writes them
 * only on pods with a gpufrac grant, never on DRA pods), bound and not
 * Ready, for at most the guard's default cap (30 min) from its
 * PodScheduled time.  now_us: the clock (microseconds since the epoch). */
bool gf__dra_pod_loading(const struct json_t *pod, int64_t now_us);

/* The placer's word on gated pod `key` (ns/name) for the autoscaler
 * bridge (drafeed.c, "the autoscaler bridge's view"): its claims fit no
 * device (nofit), or they did.  Call with f->mu held. */
void gf__dra_as_note(gf_sched_dra *f, const char *key, bool nofit);

/* Whether DeviceClass cls (a v1 object, borrowed) of gpufrac's classes
 * (GF_DRA_CLASS_SHARE, GF_DRA_CLASS_WHOLE) selects only what mode 2
 * enforces itself, so that every device gpufrac chooses for a request of
 * it is one the class selects: each selector's CEL expression is a
 * conjunction (&&) of device.driver == "gpu.gpufrac.io",
 * device.attributes["gpu.gpufrac.io"].type == "gpu" and
 * device.attributes["gpu.gpufrac.io"].mode == "shared" (the share class)
 * or "exclusive" (the whole class), in any order, spacing or quoting (no
 * selector: every device).  gpufrac evaluates no other CEL: anything else
 * is false with the selector named in why (docs/dra.md, "Device
 * classes"). */
bool gf__dra_class_understood(const struct json_t *cls, char *why, size_t cap);

/* Whether pod (a slim copy: spec.nodeSelector, spec.affinity,
 * spec.tolerations) may go to node (a slim copy, gf__dra_node_slim), as
 * kube-scheduler's NodeAffinity, TaintToleration and NodeUnschedulable
 * filters decide: its nodeSelector, its required node affinity (terms
 * ORed; matchExpressions In, NotIn, Exists, DoesNotExist, Gt, Lt on
 * labels; matchFields In, NotIn on metadata.name), the node's NoSchedule
 * and NoExecute taints it does not tolerate, spec.unschedulable.  When
 * not, why gets which (a malformed constraint refuses the node). */
bool gf__dra_node_allows(const struct json_t *pod, const struct json_t *node,
                         char *why, size_t cap);
/* What gf__dra_node_allows reads of a Node: metadata.name and .labels,
 * spec.taints and .unschedulable (a new object; NULL out of memory). */
struct json_t *gf__dra_node_slim(const struct json_t *node);

#endif
