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

#include <stdbool.h>
#include <stddef.h>

#include "gpufrac/podreq.h"

typedef enum gf__why_kind {
  GF__WHY_NONE = 0,
  GF__WHY_NOT_ASKED = 1, /* kube-scheduler counted a name gpufrac's profile
                            leaves to the extender: never asked */
  GF__WHY_SLOTS = 2,     /* Insufficient gpufrac.io/gpu: the slots */
  GF__WHY_NO_AGENT = 3,  /* Insufficient gpufrac.io/gpu and no node
                            advertises it: no agent */
} gf__why_kind;

/* What why-pending knows of the pod and the cluster besides the message. */
typedef struct gf__why_ctx {
  const char *scheduler; /* spec.schedulerName; "" or NULL: the default */
  bool req_ok;           /* gpufrac reads a GPU request in the pod */
  unsigned words;        /* GF_PODREQ_W_*: what the pod asked in */
  int agent_nodes;       /* nodes advertising gpufrac.io/gpu; -1 unknown */
  int extender_fits;     /* nodes whose memory and compute fit as
                            --extender's /filter says (a fit, or short only
                            of device-plugin slots); -1 not asked */
} gf__why_ctx;

/* The hint for kube-scheduler's FailedScheduling message msg about the pod
 * c describes, into out[cap] ("" for none).  The slots hint only where
 * they can be the cause: a readable request, a node with the agent, and
 * (with --extender) a node whose memory and compute fit. */
gf__why_kind gf__why_hint(const char *msg, const gf__why_ctx *c, char *out,
                          size_t cap);

/* r in words, into out[cap]: "1 GPU: 512Mi memory, 5 percent compute ...". */
void gf__podreq_text(const gf_podreq *r, char *out, size_t cap);

#endif
