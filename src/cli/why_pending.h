/*
 * What `kubectl gpufrac why-pending` (and describe pod) adds to
 * kube-scheduler's own words (docs/kubectl.md): a pod's request as gpufrac
 * reads it (gpufrac/podreq.h), and a hint when the FailedScheduling message
 * shows a cause the message does not name: the extender never asked (the
 * scheduler profile that handled the pod lacks it), or the device plugin's
 * slots held.  Pure functions, no I/O: tests/cli/test_why_pending.c.
 */
#ifndef GPUFRAC_CLI_WHY_PENDING_H
#define GPUFRAC_CLI_WHY_PENDING_H

#include <stddef.h>

#include "gpufrac/podreq.h"

typedef enum gf__why_kind {
  GF__WHY_NONE = 0,
  GF__WHY_NOT_ASKED = 1, /* kube-scheduler counted a name gpufrac's profile
                            leaves to the extender: never asked */
  GF__WHY_SLOTS = 2,     /* Insufficient gpufrac.io/gpu: the slots */
} gf__why_kind;

/* The hint for kube-scheduler's FailedScheduling message msg about a pod
 * whose spec.schedulerName is scheduler ("" or NULL: default-scheduler),
 * into out[cap] ("" for none). */
gf__why_kind gf__why_hint(const char *msg, const char *scheduler, char *out,
                          size_t cap);

/* r in words, into out[cap]: "1 GPU: 512Mi memory, 5 percent compute ...". */
void gf__podreq_text(const gf_podreq *r, char *out, size_t cap);

#endif
