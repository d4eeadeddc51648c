/*
 * dra_int.h - what dra.c and dra_taint.c share (internal to gf_sched).
 */
#ifndef GPUFRAC_SCHED_DRA_INT_H
#define GPUFRAC_SCHED_DRA_INT_H

#include <stdbool.h>
#include <stdint.h>

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

#endif
