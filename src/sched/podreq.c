/*
 * One reading of a pod's GPU request (gpufrac/podreq.h): the extender's
 * own parser (wire.c, with compat.c's HAMi and KAI mappings), for the
 * planner and the kubectl plugin.
 */
#include "gpufrac/podreq.h"

#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "sched_int.h"

_Static_assert(GF_PODREQ_ACCEPT_HAMI == GF__ACCEPT_HAMI &&
                   GF_PODREQ_ACCEPT_KAI == GF__ACCEPT_KAI,
               "the accept bits are the extender's");
_Static_assert(sizeof(((gf_podreq *)0)->models) ==
                   sizeof(((gf__pod *)0)->models),
               "the models annotation fits as the extender keeps it");

int gf_podreq_read(const json_t *pod, unsigned accept, gf_podreq *out,
                   gf_diag *d) {
  memset(out, 0, sizeof(*out));
  gf__pod *p = gf__malloc(sizeof(*p));
  if (!p)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  int rc = gf__pod_parse_ex(pod, accept, p, d);
  out->words = p->words;
  if (!rc) {
    out->req = p->req;
    out->compute_pct = p->compute_pct;
    out->slots = p->dp_slots;
    memcpy(out->container, p->container, sizeof(out->container));
    memcpy(out->models, p->models, sizeof(out->models));
  }
  gf__free(p);
  return rc;
}

double gf_podreq_part(const gf_podreq *r, int64_t gpu_mem_bytes) {
  const gf_request *q = &r->req;
  if (!q->gpu_count)
    return 0;
  if (q->gpu_milli >= GF_GPU_MILLI)
    return 1;
  double f = (double)q->gpu_milli / GF_GPU_MILLI;
  if (q->gpu_mem_bytes > 0) {
    if (gpu_mem_bytes <= 0)
      return f > 0 ? f : 0;
    double m = (double)q->gpu_mem_bytes / (double)gpu_mem_bytes;
    if (m > f)
      f = m;
  }
  return f > 1 ? 1 : f;
}
