/*
 * gpufrac/sched.h - the kube-scheduler extender: filter, prioritize and bind
 * for pods that ask for gpufrac GPU shares, answered from an in-memory
 * cluster model with the same placement policy the simulator measures.
 *
 * Why it exists.  kube-scheduler counts extended resources as integers and
 * cannot see which concrete GPU has room for a 20Gi share.  It calls this
 * extender over HTTP (extender v1 wire format, docs/scheduler.md) for every
 * pod asking for gpufrac.io/gpu, gpufrac.io/gpu-memory or
 * gpufrac.io/gpu-compute; the extender filters nodes, scores them with the
 * placement policy (default "gpufrac") and, at bind, picks the GPUs, writes
 * the grant on the pod and creates the Binding through a gf_binder.
 *
 * The model.  Nodes (their gpufrac.io/inventory annotation and allocatable
 * CPU and memory) and bound pods (their gpufrac.io/grant annotation and
 * requests) are fed in by whoever watches the API server, through the
 * gf_sched_node_* and gf_sched_pod_* functions; grants are the truth, so a
 * restart rebuilds everything from the API server.
 *
 * Invariants.
 *   - Every public function is thread-safe: one mutex guards the model.
 *   - A bind first assumes its placement in the model (under the mutex), so
 *     a concurrent bind or filter already sees it; the binder runs outside
 *     the mutex; any binder failure rolls the assumption back exactly.  No
 *     GPU share is ever booked twice.
 *   - Input is bounded: request bodies above max_body are refused before
 *     parsing; malformed input gets an Error naming what is wrong (in a 200
 *     for filter and bind, which kube-scheduler shows; 400 / 413 for
 *     prioritize); every reply is valid JSON; nothing a client sends can
 *     crash the process.
 *   - Without a binder, /bind answers with an Error saying so; it never
 *     pretends to have bound.
 */
#ifndef GPUFRAC_SCHED_H
#define GPUFRAC_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/diag.h"
#include "gpufrac/grant.h"

struct json_t; /* jansson's JSON value */

#define GF_SCHED_MAX_BODY (8u << 20) /* default cap on a request body */

/* A pod as the binder sees it. */
typedef struct gf_pod_ref {
  const char *ns;
  const char *name;
  const char *uid; /* "" when unknown */
} gf_pod_ref;

/* What /bind calls to reach the API server (src/sched/kubefeed.c implements
 * it).  bind binds the pod to the node and stores grant_json (a
 * GF_GRANT_ANNOTATION document; NULL for a pod without GPUs) on it in one
 * write: a v1 Binding whose metadata.annotations carry the grant, which the
 * API server applies only to a pod of that uid that is not bound yet and
 * not being deleted.  So a pod never carries a grant it was not bound
 * with, and of two replicas that both believe they lead, one wins and the
 * other gets a conflict.  Returns 0 or a GF_E* code with a sentence in d;
 * called without the model's mutex held, possibly from several threads at
 * once. */
typedef struct gf_binder {
  void *ctx;
  int (*bind)(void *ctx, const gf_pod_ref *pod, const char *node,
              const char *grant_json, gf_diag *d);
} gf_binder;

typedef struct gf_sched_config {
  const char *policy;      /* NULL: GF_DEFAULT_POLICY ("gpufrac"); may carry
                              parameters ("gpufrac:price=0") */
  const gf_binder *binder; /* copied; NULL: /bind refuses with an Error */
  size_t max_body;         /* 0: GF_SCHED_MAX_BODY */
  uint32_t pending_max;    /* pods remembered between filter and bind;
                              0: 4096; when full, the pod seen least
                              recently is forgotten */
  unsigned accept;         /* GF_SCHED_ACCEPT_* (--accept hami,kai): other
                              tools' request names read too; 0: gpufrac's
                              only */
  /* The DRA path, mode 1 (sched_dra.h): /prioritize scores a pod with
   * spec.resourceClaims by calling dra_score for each candidate node
   * (0 with *score, higher better; nonzero: the node scores 0), called
   * without the model's mutex, possibly from several threads.  NULL: such
   * pods are scored as any other. */
  int (*dra_score)(void *user, const struct json_t *pod, const char *node,
                   int64_t *score);
  void *dra_user;
  /* 0: /filter answers every node that can take a GPU pod.  N (at most
   * GF_SCHED_FILTER_TOP_MAX): only the N that the policy scores best, the
   * rest left out (neither passed nor failed).  With 1, kube-scheduler
   * has a single feasible node and skips scoring, /prioritize included:
   * one HTTP round trip per pod instead of two, and its own score plugins
   * (preferred affinities, soft topology spread) no longer weigh in for
   * GPU pods.  Pods without gpufrac GPUs are never cut. */
  uint32_t filter_top;
} gf_sched_config;

#define GF_SCHED_FILTER_TOP_MAX 64u

typedef struct gf_sched gf_sched;

/* gf_sched_config.accept: other tools' names for a GPU request, mapped
 * onto gpufrac's (src/sched/compat.c, docs/migrating.md). */
#define GF_SCHED_ACCEPT_HAMI 1u /* nvidia.com/gpumem, gpucores, ... */
#define GF_SCHED_ACCEPT_KAI 2u  /* gpu-fraction, gpu-memory annotations */
/* "hami,kai" (any order; "none" or "" for neither) into *out.  GF_EINVAL
 * naming the word it does not know. */
int gf_sched_accept_parse(const char *list, unsigned *out, gf_diag *d);

/* Creates an extender with an empty model.  GF_ENOTFOUND for an unknown
 * policy, GF_EINVAL for bad policy parameters, GF_ENOMEM. */
int gf_sched_new(const gf_sched_config *cfg, gf_sched **out, gf_diag *d);
void gf_sched_free(gf_sched *s);

/* Readiness (/readyz): set true once the model holds the API server's
 * nodes and pods (after the first LIST).  Starts false. */
void gf_sched_set_synced(gf_sched *s, bool synced);
/* Leadership: only the leader binds; others answer filter/prioritize from
 * their model and refuse /bind with an Error.  Starts true. */
void gf_sched_set_leader(gf_sched *s, bool leader);
/* Whether this replica leads (and so binds, and on the DRA path writes
 * allocations). */
bool gf_sched_is_leader(gf_sched *s);
/* Where nodes come from.  Watched (an informer feeds gf_sched_node_*):
 * Node objects in /filter and /prioritize requests only name candidates
 * and never change the model; a candidate the informer has not delivered
 * is "not seen yet".  Not watched (the default, --no-kube): those Node
 * objects are the model's only source of nodes, and a copy whose
 * resourceVersion is older than (or equal to) the one held is ignored.
 * gf_sched_kube_new sets it. */
void gf_sched_set_watched(gf_sched *s, bool watched);

/* More lines for /metrics (Prometheus text, whole lines with their HELP
 * and TYPE): fn writes at most cap bytes into buf and returns how many
 * (0: none; a return of cap or more is taken as nothing).  Called on
 * every scrape, outside the extender's mutex; set before serving
 * (gf_sched_kube_metrics is the informers' and the guard's). */
typedef size_t (*gf_sched_metrics_fn)(void *user, char *buf, size_t cap);
void gf_sched_set_metrics_hook(gf_sched *s, gf_sched_metrics_fn fn, void *user);

/* ---- the model, fed by a watch ---------------------------------------- */

/* Adds or replaces a node from a v1 Node object (borrowed).  An unchanged
 * inventory and allocatable is a no-op.  A malformed inventory is an error
 * (the node is then kept as it was, or as a node without GPUs if new). */
int gf_sched_node_update(gf_sched *s, const struct json_t *node, gf_diag *d);
/* Removes a node; pods bound to it stay known and return if it does.
 * GF_ENOTFOUND if unknown. */
int gf_sched_node_delete(gf_sched *s, const char *name);

/* Adds or replaces a pod from a v1 Pod object (borrowed).  A bound pod
 * (spec.nodeName set) books its grant's GPU shares (or only its CPU and
 * memory when it has no grant); a Succeeded or Failed pod releases; a
 * pending pod is remembered for /bind.  GF_ENOFIT when the grant no longer
 * fits the node (the pod is kept, unbooked, and counted in /metrics). */
int gf_sched_pod_update(gf_sched *s, const struct json_t *pod, gf_diag *d);
/* Forgets a pod and releases what it held.  GF_ENOTFOUND if unknown. */
int gf_sched_pod_delete(gf_sched *s, const char *uid);

/* What a watch should cache: a new object holding only the members of a
 * v1 Pod (Node) that gf_sched_pod_update (gf_sched_node_update) reads, so
 * that updating from the slim object gives exactly the same model, errors
 * included, as from the whole one.  Kept: metadata name, namespace, uid,
 * resourceVersion, deletionTimestamp; for a pod the gpufrac.io/grant and
 * gpufrac.io/gpu-model annotations and the guard's (guard-since,
 * guard-released, protect), spec.nodeName, spec.priority, spec.overhead, each
 * container's and init container's name, restartPolicy and the five
 * resources the extender counts (each from requests, else limits, merged
 * into requests), status.phase and status.nominatedNodeName; for a node the
 * gpufrac.io/inventory annotation and status.allocatable cpu and memory.
 * Members that are not of the expected type are copied as they are, so the same
 * errors come out.  A real Pod shrinks from kilobytes (managedFields, volumes,
 * env, conditions) to a few hundred bytes of JSON.  The input is borrowed; the
 * result is the caller's (json_decref); NULL when out of memory. */
struct json_t *gf_sched_pod_slim(const struct json_t *pod);
struct json_t *gf_sched_node_slim(const struct json_t *node);

/* Counts, for tests and /metrics. */
uint32_t gf_sched_nnodes(gf_sched *s);
uint32_t gf_sched_npods(gf_sched *s); /* pods booked in the model */
/* The size in bytes of model weights ref ("name@sha256:<hex>", a pod's
 * gpufrac.io/model) as some node's inventory lists it (shared, or held for
 * namespace ns alone); 0 when no node lists it with a size. */
int64_t gf_sched_weights_bytes(gf_sched *s, const char *ref, const char *ns);

/* Copies the cluster model's node `name` (GPU use included) into *out
 * (labels not copied: out->labels is NULL).  GF_ENOTFOUND. */
int gf_sched_node_state(gf_sched *s, const char *name, gf_node *out);

/* ---- the HTTP verbs, without HTTP ------------------------------------- */

typedef struct gf_sched_reply {
  int status;               /* HTTP status */
  const char *content_type; /* static string */
  char *body;               /* malloc'd, NUL-ended; NULL only when out of
                               memory (status 500) */
  size_t len;
} gf_sched_reply;

/* Answers one request: POST <prefix>/filter, /prioritize, /bind, /preempt;
 * GET /healthz, /readyz, /leaderz, /metrics (the last path segment decides).
 * Always fills *out (release with gf_sched_reply_release) and records the
 * request in the metrics.  A request filter or bind cannot use (empty,
 * malformed, or len over max_body, in which case body is not read) is
 * answered 200 with {"Error": ...}, since kube-scheduler shows only the
 * Error of a 200; prioritize answers 400 / 413 with that JSON. */
void gf_sched_handle(gf_sched *s, const char *method, const char *path,
                     const char *body, size_t len, gf_sched_reply *out);
void gf_sched_reply_release(gf_sched_reply *r);

/* ---- the HTTP server (libmicrohttpd) ---------------------------------- */

typedef struct gf_sched_server gf_sched_server;

/* How the server protects itself and what it serves.
 *
 * Slow clients: every request must arrive whole (TLS handshake, headers
 * and body) and its answer be sent within request_timeout_ms of the
 * connection opening or of the previous answer (the time the extender
 * spends handling it not counted), else the connection is shut.  A
 * listener keeps at most per_ip_max connections from one address and
 * conn_max in all: a newcomer past either sheds the connection waiting
 * longest (one never answered first; never one being handled or one with a
 * valid client certificate) and is refused only when none can be shed.
 * So a client that drips bytes holds a connection for a bounded time, and
 * slow or half-open connections cannot keep a new client out.
 *
 * Memory: request bodies being received and replies not yet taken count
 * against held_max in all; past it, the connections holding bytes that
 * have waited longest are shut.  A client that does not read its answers
 * holds them only till another needs the room.
 *
 * Health: with health_listen set, a second plain-HTTP listener serves GET
 * /healthz, /readyz, /leaderz and /metrics only (404 for the verbs), with
 * its own connection slots, so probes are answered while the main listener
 * is busy or needs a client certificate.
 *
 * TLS: with tls_cert and tls_key (PEM files, e.g. a mounted Secret) the
 * main listener speaks HTTPS only; with tls_client_ca as well, every
 * request must come with a client certificate signed by that CA (PEM) or
 * it is refused with 403 before its body is read. */
typedef struct gf_sched_server_opts {
  const char *listen;          /* "ADDR:PORT", IPv4; port 0 picks one */
  unsigned threads;            /* 0: 4 */
  unsigned conn_max;           /* 0: 1024 */
  unsigned per_ip_max;         /* 0: 64 */
  unsigned request_timeout_ms; /* 0: 10000 */
  const char *health_listen;   /* NULL or "": no health listener */
  const char *tls_cert;        /* NULL: plain HTTP */
  const char *tls_key;
  const char *tls_client_ca; /* NULL: no client certificate asked */
  size_t held_max; /* 0: 2 x the extender's max_body, at least 16 MiB */
} gf_sched_server_opts;

/* Serves s as o says.  s must outlive the server.  GF_EINVAL for a bad
 * address or option, GF_EIO when a socket cannot be bound or a TLS file
 * cannot be read or used. */
int gf_sched_server_start_opts(gf_sched *s, const gf_sched_server_opts *o,
                               gf_sched_server **out, gf_diag *d);
/* The defaults above on `listen` with `threads`. */
int gf_sched_server_start(gf_sched *s, const char *listen, unsigned threads,
                          gf_sched_server **out, gf_diag *d);
uint16_t gf_sched_server_port(const gf_sched_server *srv);
/* The health listener's port; 0 when there is none. */
uint16_t gf_sched_server_health_port(const gf_sched_server *srv);
/* Stops accepting and finishes requests in flight; frees nothing (the
 * ports stay readable).  Idempotent; NULL accepted. */
void gf_sched_server_stop(gf_sched_server *srv);
/* Stops the server if it still serves, then frees it.  NULL accepted. */
void gf_sched_server_free(gf_sched_server *srv);

#endif
