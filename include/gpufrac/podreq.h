/*
 * gpufrac/podreq.h - one reading of a pod's GPU request.
 *
 * Why it exists: the extender, the planner (src/plan) and the kubectl
 * plugin each need what a pod asks for: gpufrac's own resources
 * (gpufrac.io/gpu, gpu-memory, gpu-compute, the gpu-model annotation),
 * HAMi's names (nvidia.com/gpumem, gpumem-percentage, gpucores) and KAI's
 * annotations (gpu-fraction, gpu-memory).  Read three times, the readings
 * drifted: the planner counted a migrated HAMi pod of 0.3 and a KAI pod of
 * 0.5 as whole GPUs (issue 30, item 7).  Here is the one reading, the
 * extender's own (src/sched/wire.c and compat.c, docs/scheduler.md and
 * docs/migrating.md give the rules), for the other parts to call.
 *
 * Invariants: gf_podreq_read answers exactly what the extender's /filter
 * books for the same pod and the same accept set (the tests feed the same
 * fixtures to each consumer); a pod the extender refuses is refused here
 * with the same sentence.  No I/O, no globals.  Library gf_sched.
 */
#ifndef GPUFRAC_PODREQ_H
#define GPUFRAC_PODREQ_H

#include <jansson.h>
#include <stdint.h>

#include "gpufrac/diag.h"
#include "gpufrac/grant.h"
#include "gpufrac/model.h"

/* Which other tools' words to read (gf_sched_config.accept's values). */
#define GF_PODREQ_ACCEPT_HAMI 1u
#define GF_PODREQ_ACCEPT_KAI 2u
#define GF_PODREQ_ACCEPT_ALL (GF_PODREQ_ACCEPT_HAMI | GF_PODREQ_ACCEPT_KAI)

/* The words a pod asked in (gf_podreq.words, a bit set). */
#define GF_PODREQ_W_GPUFRAC 1u /* gpufrac.io/gpu, gpu-memory, gpu-compute */
#define GF_PODREQ_W_HAMI 2u    /* nvidia.com/gpumem, -percentage, gpucores */
#define GF_PODREQ_W_NVGPU 4u   /* nvidia.com/gpu (read as HAMi's count) */
#define GF_PODREQ_W_KAI 8u     /* gpu-fraction / gpu-memory annotations */

typedef struct gf_podreq {
  /* CPU and memory summed over the containers (Kubernetes' rule for init
   * containers, plus spec.overhead); the GPU members as the extender books
   * them (gpu_count 0: no GPU); model_mask and weights 0. */
  gf_request req;
  int32_t compute_pct;              /* gpu-compute as asked; 0 = not asked */
  uint32_t slots;                   /* gpufrac.io/gpu asked: device-plugin
                                       slots kube-scheduler counts */
  unsigned words;                   /* GF_PODREQ_W_* */
  char container[GF_CONTAINER_MAX]; /* the container that gets the GPU */
  char models[256]; /* the gpu-model annotation (or HAMi's types, in the
                       extender's internal form); "" when none */
} gf_podreq;

/* Reads a v1 Pod (JSON as the API server serves it).  accept:
 * GF_PODREQ_ACCEPT_*.  0, or GF_ESYNTAX / GF_ERANGE / GF_EINVAL /
 * GF_ELIMIT with the extender's sentence in d (out is then zeroed but
 * for words, which says what the pod asked in as far as it was read). */
int gf_podreq_read(const json_t *pod, unsigned accept, gf_podreq *out,
                   gf_diag *d);

/* The part of one GPU the request holds on each of its GPUs, 0..1: its
 * compute share (gpu_milli / 1000), or its memory over gpu_mem_bytes (the
 * GPU's size) when that is larger; 1 for whole GPUs; 0 when the GPU's size
 * is needed (a memory share) and gpu_mem_bytes is 0. */
double gf_podreq_part(const gf_podreq *r, int64_t gpu_mem_bytes);

#endif
