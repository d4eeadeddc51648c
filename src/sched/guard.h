/*
 * Internal to gf_sched: the disruption guard (guard.c), which keeps
 * cluster autoscalers from evicting a GPU-share pod while it loads.
 *
 * Why it exists.  An LLM-serving pod spends minutes downloading and
 * loading weights before it is Ready; Karpenter's consolidation and the
 * Cluster Autoscaler's scale-down evict it meanwhile and the work is lost.
 * Both honour a pod annotation that says "do not disrupt this pod".  The
 * guard sets those annotations on every pod holding a gpufrac grant
 * (GF_GRANT_ANNOTATION) from the moment it is bound until it has been Ready
 * for a settle time, or until a cap, whichever comes first.
 *
 * What it writes (a JSON merge PATCH of metadata.annotations, always with
 * the pod's resourceVersion as precondition, so a decision made on a stale
 * copy of the pod fails 409 and is made again on the fresh one):
 *   GF_GUARD_DND: "true" and GF_GUARD_STE: "false", each only if the pod
 *     does not carry that annotation already: a user's value, whatever it
 *     is, is never overwritten and never removed;
 *   GF_GUARD_OWNS: which of the two the guard set ("do-not-disrupt",
 *     "safe-to-evict", comma separated; "" when the user had set both);
 *   GF_GUARD_SINCE: when protection began (RFC 3339, the guard's clock),
 *     from which the cap counts.
 * On release it removes exactly the annotations GF_GUARD_OWNS names, and
 * only while they still hold the value the guard wrote (a user who changed
 * one took it over), removes GF_GUARD_OWNS and sets GF_GUARD_RELEASED.
 *
 * State lives in those annotations, so a restarted or newly elected leader
 * carries on where the last one stopped: protection is applied once per pod
 * (no GF_GUARD_SINCE yet) and released once (GF_GUARD_RELEASED), so a pod
 * that crashes after release is not protected again, and one whose user
 * removed the guard's annotation does not get it back.  Only the time the
 * pod was first seen Ready is kept in memory: after a restart the settle
 * counts again from the restarted replica's first sight of the pod, which
 * can lengthen a protection (by at most the settle time), never shorten it.
 *
 * GF_GUARD_PROTECT "always" on a pod keeps it protected while it holds its
 * share, Ready or not, with no cap; taking it away lets the usual rules
 * release it.
 *
 * Memory: a record is kept only for a pod being protected or about to be
 * (its next patch depends on the clock); a Ready pod never protected, or
 * one released, costs none until an event changes that.
 *
 * Thread safety: every function may be called from any thread (one mutex);
 * gf__guard_pass calls the patch function without holding it.
 */
#ifndef GPUFRAC_SCHED_GUARD_H
#define GPUFRAC_SCHED_GUARD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/diag.h"

#define GF_GUARD_DND "karpenter.sh/do-not-disrupt"
#define GF_GUARD_STE "cluster-autoscaler.kubernetes.io/safe-to-evict"
#define GF_GUARD_OWNS "gpufrac.io/guard-owns"
#define GF_GUARD_SINCE "gpufrac.io/guard-since"
#define GF_GUARD_RELEASED "gpufrac.io/guard-released"
#define GF_GUARD_PROTECT "gpufrac.io/protect"

#define GF_GUARD_SETTLE_MS_DEFAULT 120000LL /* 2 min */
#define GF_GUARD_CAP_MS_DEFAULT 1800000LL   /* 30 min */
/* A pod that loads a model of known size (its gpufrac.io/model, sized by a
 * node's inventory) is protected for its own window, not the fixed cap:
 *   settle + GF_GUARD_WINDOW_FACTOR * (fetch time + load time)
 * each time = a fixed part + bytes x a per-byte part, at least the cap and
 * at most cap_max (docs/llm-serving.md, "A window sized by the model").
 * The parts start at 0 and the options' rates and then follow what the
 * guard measures on the pods it protects (a robust fit over the last
 * GF_GUARD_FIT_SAMPLES samples of each, cluster-wide): from protection to
 * their gpufrac.io/model-ready condition (the fetch; under
 * GF_GUARD_FETCH_MIN_MS the model was cached, no sample) and from that to
 * Ready (the load). */
#define GF_GUARD_CAP_MAX_MS_DEFAULT 86400000LL /* 24 h */
#define GF_GUARD_FETCH_BPS_DEFAULT 50000000LL  /* 50 MB/s */
#define GF_GUARD_LOAD_BPS_DEFAULT 200000000LL  /* 200 MB/s */
#define GF_GUARD_WINDOW_FACTOR 2
#define GF_GUARD_FETCH_MIN_MS 2000
#define GF_GUARD_FIT_SAMPLES 32
#define GF_GUARD_MODEL_READY "gpufrac.io/model-ready" /* the agent's */

typedef struct gf__guard gf__guard;

typedef struct gf__guard_opts {
  int64_t settle_ms; /* Ready this long: released; 0: the default */
  int64_t cap_ms;    /* protected this long: released; 0: the default */
  /* The window of a pod with a model of known size (above): at most
   * cap_max_ms (0: the default; never below the cap), from the rates
   * fetch_bps and load_bps (bytes/s; 0: the defaults) until measured. */
  int64_t cap_max_ms;
  int64_t fetch_bps, load_bps;
  /* The size of model ref ("name@sha256:<hex>") for a pod of namespace ns,
   * 0 when unknown; called without the guard's mutex.  NULL: every pod
   * gets the cap. */
  int64_t (*model_bytes)(void *user, const char *ref, const char *ns);
  void *model_user;
  /* Microseconds since the Unix epoch; NULL: CLOCK_REALTIME (the times
   * are written into annotations and read back after a restart). */
  int64_t (*now_us)(void *clock_user);
  void *clock_user;
  bool quiet; /* true: do not log protections and releases on stderr */
} gf__guard_opts;

/* GF_EINVAL for a negative time, GF_ENOMEM. */
int gf__guard_new(const gf__guard_opts *o, gf__guard **out, gf_diag *d);
void gf__guard_free(gf__guard *g); /* NULL is accepted */

/* Adds to `slim` (an informer's slim copy of `pod`, e.g. from
 * gf_sched_pod_slim) what the guard reads that it lacks: the six
 * annotations above and gpufrac.io/model, for a pod that carries any of
 * them or a grant (so a pending pod's own do-not-disrupt is known when it
 * is bound), and status.conditions' Ready entry (type, status,
 * lastTransitionTime) and GF_GUARD_MODEL_READY entry (the same), for a pod
 * with a grant or the guard's marks only (the others cost nothing).
 * Nonzero only when out of memory. */
int gf__guard_slim(json_t *slim, const json_t *pod);

/* A pod as the watch sees it now (borrowed; whole or slim).  Only pods
 * being protected or about to be are kept (see Memory above). */
void gf__guard_pod_update(gf__guard *g, const json_t *pod);
/* The pod is gone. */
void gf__guard_pod_delete(gf__guard *g, const json_t *pod);

/* The protection a pod gets from the moment it is bound, for the Binding
 * that binds it (so the pass need not PATCH it afterwards: each write to a
 * pod costs the API server about what the bind does, and fans out to every
 * pod watcher).  pod is the pod as last seen before the bind (borrowed;
 * whole or slim), not yet bound; adds to ann what the pass would PATCH
 * first on it once bound with a grant: GF_GUARD_DND / GF_GUARD_STE where
 * the pod carries none (a user's value is never in ann: a Binding's
 * annotations overwrite the pod's), GF_GUARD_OWNS and GF_GUARD_SINCE.  The
 * number of annotations added: 0 when the pod would not be protected, is
 * bound already, or needs a removal (only a PATCH can); -1 when out of
 * memory (ann may then be partly added to; the caller drops it). */
int gf__guard_bind_annotations(gf__guard *g, const json_t *pod, json_t *ann);

/* Writes one merge patch; 0 or a GF_E* code with a sentence in d. */
typedef int (*gf__guard_patch_fn)(void *user, const char *ns, const char *name,
                                  const json_t *patch,
                                  const char *resource_version, gf_diag *d);

/* One pass over the pods kept: every pod whose annotations should change
 * gets one patch (at most 256 per pass).  After a patch, successful or
 * 409, the pod is left alone until the watch shows a newer version; after
 * another error it is tried again 2 s later (by the guard's clock).
 * *patched (may be NULL) counts patches that succeeded.  Returns 0, or
 * the first failure's code with its sentence in d. */
int gf__guard_pass(gf__guard *g, gf__guard_patch_fn fn, void *user,
                   unsigned *patched, gf_diag *d);

/* The protection window (microseconds) of a pod whose model has `bytes`
 * (0: unknown, the cap), from the rates as measured so far. */
int64_t gf__guard_window_us(gf__guard *g, int64_t bytes);
/* The fetch and load rates (bytes/s: the per-byte parts) the windows use
 * now, and how many samples each has seen (0: the options' rate). */
void gf__guard_rates(gf__guard *g, double *fetch_bps, double *load_bps,
                     unsigned *nfetch, unsigned *nload);
/* The fixed parts (seconds) of the fetch and the load the windows use. */
void gf__guard_overheads(gf__guard *g, double *fetch_s, double *load_s);

/* Pods kept: those being protected or about to be. */
size_t gf__guard_count(gf__guard *g);

#endif
