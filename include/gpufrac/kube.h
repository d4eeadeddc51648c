/*
 * gpufrac/kube.h - a small Kubernetes API client (libcurl + jansson).
 *
 * Why it exists: the scheduler extender and the node agent must read nodes
 * and pods, keep a current picture of them, write grants, bind pods and
 * decide which replica leads.  client-go is not available to C, so this is
 * the minimum of it that gpufrac needs: configuration (in-cluster and
 * kubeconfig), GET / LIST / merge PATCH / POST / PUT / DELETE, WATCH with
 * bookmarks, an informer-style cache, and Lease-based leader election.
 *
 * Invariants:
 *  - Every call returns 0 or a negative GF_E* code; on failure a gf_diag (if
 *    given) says what failed and where.  API server errors carry the Status
 *    object's code, reason and message in the diag.  HTTP 404 -> GF_ENOTFOUND,
 *    409 with reason AlreadyExists -> GF_EEXIST, other 409 -> GF_ECONFLICT,
 *    410 -> GF_EGONE, other non-2xx -> GF_EHTTP, transport failure -> GF_EIO,
 *    a body over the cap -> GF_ELIMIT, a body that is not JSON -> GF_ESYNTAX.
 *  - Everything read from the network or a file is bounded: response bodies
 *    (default 64 MiB), watch lines (default 16 MiB), files (1 MiB), tokens.
 *    Malformed input is an error, never a crash.
 *  - JSON values are jansson's json_t.  A json_t ** out-parameter receives a
 *    new reference the caller must json_decref; it is left untouched (NULL if
 *    the caller initialised it so) on failure.  json_t * inputs are borrowed.
 *  - A gf_kube handle is used by one thread at a time (it owns one libcurl
 *    handle).  gf_kube_informer and gf_kube_leader each own their own client.
 *    gf_kube_informer_get/count/synced and the stop functions are safe to call
 *    from any thread.
 */
#ifndef GPUFRAC_KUBE_H
#define GPUFRAC_KUBE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/diag.h"

/* ---------------------------------------------------------------- config */

typedef struct gf_kube_config gf_kube_config;

/* Where the in-cluster configuration lives; NULL fields take the defaults
 * (/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace},
 * and the KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT environment). */
typedef struct gf_kube_in_cluster_opts {
  const char *token_file;
  const char *ca_file;
  const char *namespace_file;
  const char *host; /* overrides KUBERNETES_SERVICE_HOST */
  const char *port; /* overrides KUBERNETES_SERVICE_PORT */
} gf_kube_in_cluster_opts;

/* Builds the in-cluster configuration: server https://HOST:PORT (IPv6 hosts
 * bracketed), the CA file, and the service-account token file, which each
 * request re-reads when its mtime or size changes or a minute has passed
 * (tokens are rotated by the kubelet).  The token is read once here so a
 * missing token fails early.  opts may be NULL.  On success *out owns a new
 * config (gf_kube_config_free).  Fails GF_ENOTFOUND when not in a cluster
 * (host/port unset or token missing), GF_EIO/GF_ELIMIT on unreadable or
 * oversized files. */
int gf_kube_config_in_cluster(gf_kube_config **out,
                              const gf_kube_in_cluster_opts *opts, gf_diag *d);

/* Loads a kubeconfig file (YAML, or its JSON form) and selects `context`, or
 * the file's current-context when context is NULL.  Supports cluster.server,
 * certificate-authority(-data), insecure-skip-tls-verify, user.token,
 * user.tokenFile, client-certificate(-data), client-key(-data).  Relative
 * file paths are relative to the kubeconfig's directory.  Unsupported user
 * kinds (exec, auth-provider, username/password) fail GF_EINVAL naming the
 * field.  Errors name the file and field ("kc.yaml: users[alice].user:
 * client-key-data is not base64"). */
int gf_kube_config_from_kubeconfig(gf_kube_config **out, const char *path,
                                   const char *context, gf_diag *d);

/* Same from a buffer; `name` is used only in messages; base_dir (may be
 * NULL = current directory) resolves relative paths. */
int gf_kube_config_from_kubeconfig_buf(gf_kube_config **out, const char *buf,
                                       size_t len, const char *name,
                                       const char *base_dir,
                                       const char *context, gf_diag *d);

/* Plain configuration: server URL (http:// or https://) and an optional
 * bearer token; nothing else.  For tests and local proxies (kubectl proxy). */
int gf_kube_config_new_plain(gf_kube_config **out, const char *server,
                             const char *token, gf_diag *d);

void gf_kube_config_free(gf_kube_config *c);

/* Read-only views, valid while the config lives; NULL when not set. */
const char *gf_kube_config_server(const gf_kube_config *c);
const char *gf_kube_config_namespace(const gf_kube_config *c);
const char *gf_kube_config_ca_file(const gf_kube_config *c);
const char *gf_kube_config_token_file(const gf_kube_config *c);
bool gf_kube_config_insecure(const gf_kube_config *c);
/* Decoded *-data fields; *len receives the length (0 when absent). */
const unsigned char *gf_kube_config_ca_data(const gf_kube_config *c,
                                            size_t *len);
const unsigned char *gf_kube_config_cert_data(const gf_kube_config *c,
                                              size_t *len);
const unsigned char *gf_kube_config_key_data(const gf_kube_config *c,
                                             size_t *len);
const char *gf_kube_config_cert_file(const gf_kube_config *c);
const char *gf_kube_config_key_file(const gf_kube_config *c);

/* The bearer token now in force (re-reading the token file if it changed);
 * copies at most cap-1 bytes into buf.  Returns 0 (buf "" when there is no
 * token) or a GF_E* code if the file cannot be read. */
int gf_kube_config_token(gf_kube_config *c, char *buf, size_t cap, gf_diag *d);

/* ---------------------------------------------------------------- client */

typedef struct gf_kube gf_kube;

typedef struct gf_kube_opts {
  size_t max_body;         /* response body cap; 0 = 64 MiB */
  size_t max_line;         /* watch event line cap; 0 = 16 MiB */
  long timeout_ms;         /* non-watch request timeout; 0 = 30 s */
  long connect_timeout_ms; /* 0 = 10 s */
  const char *user_agent;  /* NULL = "gpufrac/<version>" */
} gf_kube_opts;

/* A client for one API server.  `cfg` is borrowed and must outlive the
 * client (the token is re-read through it); opts may be NULL. */
int gf_kube_new(gf_kube **out, gf_kube_config *cfg, const gf_kube_opts *opts,
                gf_diag *d);
void gf_kube_free(gf_kube *k);

/* HTTP status of the last request (0 if it never got a response). */
long gf_kube_last_status(const gf_kube *k);

/* GET an object; `path` is the API path ("/api/v1/namespaces/ns/pods/p"). */
int gf_kube_get(gf_kube *k, const char *path, json_t **out, gf_diag *d);

/* GET a body that is not JSON (a proxied /metrics): *out is a malloc'd
 * NUL-ended copy of it (free() it), *len its length, bounded by
 * max_body.  Errors as gf_kube_get. */
int gf_kube_get_text(gf_kube *k, const char *path, char **out, size_t *len,
                     gf_diag *d);

typedef struct gf_kube_list_opts {
  const char *label_selector;
  const char *field_selector;
  const char *resource_version; /* NULL: most recent (quorum read) */
  const char *continue_token;   /* from a previous page's metadata.continue */
  long limit;                   /* page size; 0 = server default (all) */
  long timeout_seconds;         /* watch only: server-side timeout; 0 = none */
} gf_kube_list_opts;

/* One page of a LIST.  *out is the List object; its metadata.continue (if
 * non-empty) fetches the next page. */
int gf_kube_list(gf_kube *k, const char *path, const gf_kube_list_opts *o,
                 json_t **out, gf_diag *d);

/* Every page of a LIST (following metadata.continue, o->limit per page),
 * joined into one List whose metadata.resourceVersion is the last page's.
 * A 410 on a continue token (it expired) fails GF_EGONE; callers re-list. */
int gf_kube_list_all(gf_kube *k, const char *path, const gf_kube_list_opts *o,
                     json_t **out, gf_diag *d);

/* JSON merge PATCH (RFC 7386, application/merge-patch+json).  When
 * resource_version is non-NULL it is set as metadata.resourceVersion in (a
 * copy of) the patch, making it a precondition: a changed object fails
 * GF_ECONFLICT with the server's message.  out may be NULL. */
int gf_kube_merge_patch(gf_kube *k, const char *path, const json_t *patch,
                        const char *resource_version, json_t **out, gf_diag *d);

/* PATCH with a strategic merge patch (built-in types only: lists such as
 * a pod's status.conditions merge by their key, here "type").  out may be
 * NULL. */
int gf_kube_strategic_patch(gf_kube *k, const char *path, const json_t *patch,
                            json_t **out, gf_diag *d);

/* POST (create) and PUT (replace; the object's metadata.resourceVersion is
 * the precondition).  out may be NULL. */
int gf_kube_create(gf_kube *k, const char *path, const json_t *obj,
                   json_t **out, gf_diag *d);
int gf_kube_replace(gf_kube *k, const char *path, const json_t *obj,
                    json_t **out, gf_diag *d);

/* DELETE an object; opts (may be NULL) is the DeleteOptions body
 * ({"gracePeriodSeconds": 0, "preconditions": {"uid": ...}}).  An absent
 * object fails GF_ENOTFOUND.  out may be NULL. */
int gf_kube_delete(gf_kube *k, const char *path, const json_t *opts,
                   json_t **out, gf_diag *d);

/* POST a v1 Binding of pod ns/name (uid may be NULL: else the API server
 * refuses a pod of another uid) to node.  annotations (a JSON object of
 * strings, may be NULL) go in the Binding's metadata: the API server
 * merges them into the pod's in the same write that sets spec.nodeName. */
int gf_kube_bind(gf_kube *k, const char *ns, const char *name, const char *uid,
                 const char *node, const json_t *annotations, gf_diag *d);

/* --------------------------------------------------------------- watch */

typedef enum gf_kube_event_type {
  GF_KUBE_ADDED,
  GF_KUBE_MODIFIED,
  GF_KUBE_DELETED,
  GF_KUBE_BOOKMARK,
  GF_KUBE_ERROR,
} gf_kube_event_type;

/* Called for each event; obj is borrowed for the call.  Return 0 to go on,
 * nonzero to end the watch (gf_kube_watch then returns 0). */
typedef int (*gf_kube_watch_fn)(void *user, gf_kube_event_type type,
                                json_t *obj);

/* One WATCH connection (watch=1, allowWatchBookmarks=true, from
 * o->resource_version), streaming newline-delimited JSON events to fn until
 * the server ends the stream (returns 0), fn asks to stop (0), gf_kube_stop
 * is called (0), or an error.  ERROR events are not passed to fn: one with
 * code 410 (or an HTTP 410) fails GF_EGONE, others GF_EHTTP with the
 * Status's message.  A line over max_line fails GF_ELIMIT; a line that is
 * not a well-formed event fails GF_ESYNTAX. */
int gf_kube_watch(gf_kube *k, const char *path, const gf_kube_list_opts *o,
                  gf_kube_watch_fn fn, void *user, gf_diag *d);

/* Asks a request in progress on k (a watch, typically) to end soon.  Safe
 * from any thread; sticky until gf_kube_clear_stop. */
void gf_kube_stop(gf_kube *k);
void gf_kube_clear_stop(gf_kube *k);

/* -------------------------------------------------------------- backoff */

/* Capped exponential backoff with jitter: attempt n waits a uniform random
 * time in [d/2, d], d = min(cap, base * 2^n).  Seeded, so tests replay. */
typedef struct gf_kube_backoff {
  long base_ms;
  long cap_ms;
  unsigned attempt;
  uint64_t rng[4];
} gf_kube_backoff;

void gf_kube_backoff_init(gf_kube_backoff *b, long base_ms, long cap_ms,
                          uint64_t seed);
/* The next delay in milliseconds; advances the attempt counter. */
long gf_kube_backoff_next(gf_kube_backoff *b);
/* After a success: the next failure starts from base again. */
void gf_kube_backoff_reset(gf_kube_backoff *b);

/* ------------------------------------------------------------- informer */

typedef struct gf_kube_informer gf_kube_informer;

/* Callbacks run on the informer's thread; objects are borrowed for the call
 * (json_incref to keep one).  Any may be NULL. */
typedef struct gf_kube_informer_handlers {
  void (*on_add)(void *user, json_t *obj);
  void (*on_update)(void *user, json_t *old_obj, json_t *new_obj);
  void (*on_delete)(void *user, json_t *obj);
  void *user;
  /* Called when the informer's error state changes: a step (LIST or
   * WATCH) failed with an error other than the last one reported (rc < 0,
   * msg says what), or a step succeeded after one failed (rc 0, msg "").
   * A repeated identical error is not reported again, so a caller can log
   * every call without a flood.  410 Gone (re-list) is not an error. */
  void (*on_error)(void *user, int rc, const char *msg);
} gf_kube_informer_handlers;

typedef struct gf_kube_informer_opts {
  const char *path;           /* e.g. "/api/v1/pods", "/api/v1/nodes" */
  const char *label_selector; /* may be NULL */
  const char *field_selector; /* may be NULL */
  long page_size;             /* LIST limit; 0 = 500 */
  long watch_timeout_s;       /* server-side watch timeout; 0 = 300 */
  long backoff_base_ms;       /* 0 = 200 */
  long backoff_cap_ms;        /* 0 = 30000 */
  uint64_t seed;              /* backoff jitter seed */
  /* Optional: reduces an object to the fields the consumer reads, before
   * it is cached and handed to on_add / on_update / on_delete (client-go's
   * TransformFunc).  Called on the informer's thread for every object of a
   * LIST and of a watch event (the last state of a DELETED one too).  The
   * informer applies a LIST page by page, so only one page of whole
   * objects is held at a time.
   * Returns a new reference that the informer owns and may modify (NOT obj
   * itself unless json_incref'd and left unchanged); obj is borrowed.  The
   * informer's own fields are always kept: whatever the transform returns,
   * metadata.name, namespace, uid, resourceVersion and deletionTimestamp
   * are copied back from obj when missing, so keys, reconciling by
   * resourceVersion and deletes work as without a transform.  NULL (out of
   * memory) or a result that is not an object keeps obj whole. */
  json_t *(*transform)(void *transform_user, json_t *obj);
  void *transform_user;
  /* Cache each object as compact JSON text instead of a jansson tree: a
   * tree of small objects costs several times its text (about 4.5 KiB for
   * a slim Pod against 0.5 KiB).  Each event costs one serialisation, and
   * objects handed out (gf_kube_informer_get, on_update's old object,
   * on_delete's cached state) are decoded again: new, private trees. */
  bool compact;
} gf_kube_informer_opts;

/* An informer over one resource: LIST, then WATCH from the list's
 * resourceVersion, keeping every object by "namespace/name" (or "name" when
 * cluster-scoped) and calling the handlers on add, update and delete.  A
 * 410 Gone re-LISTs and reconciles (adds, updates and deletes for what
 * changed meanwhile).  It makes its own client from cfg (borrowed; must
 * outlive it).  Strings in opts are copied. */
int gf_kube_informer_new(gf_kube_informer **out, gf_kube_config *cfg,
                         const gf_kube_opts *kopts,
                         const gf_kube_informer_opts *o,
                         const gf_kube_informer_handlers *h, gf_diag *d);
void gf_kube_informer_free(gf_kube_informer *inf);

/* One step: a LIST (the first time, and after 410 Gone or a watch error) or
 * one WATCH connection until it ends.  Returns the step's result; the
 * informer keeps its state either way.  Used by run() and by tests. */
int gf_kube_informer_step(gf_kube_informer *inf, gf_diag *d);

/* Steps until gf_kube_informer_stop, sleeping the backoff after failures.
 * Returns 0 once stopped. */
int gf_kube_informer_run(gf_kube_informer *inf);
void gf_kube_informer_stop(gf_kube_informer *inf);

/* True once the first LIST has been applied. */
bool gf_kube_informer_synced(gf_kube_informer *inf);
/* The cached object (new reference; json_decref it) or NULL.  ns is NULL
 * or "" for cluster-scoped objects. */
json_t *gf_kube_informer_get(gf_kube_informer *inf, const char *ns,
                             const char *name);
size_t gf_kube_informer_count(gf_kube_informer *inf);
/* The resourceVersion the next watch starts from ("" before the LIST);
 * copied into buf (at most cap-1 bytes). */
void gf_kube_informer_resource_version(gf_kube_informer *inf, char *buf,
                                       size_t cap);

/* --------------------------------------------------------------- leader */

typedef struct gf_kube_leader gf_kube_leader;

typedef struct gf_kube_leader_opts {
  const char *ns;        /* Lease namespace */
  const char *name;      /* Lease name */
  const char *identity;  /* this replica (e.g. the pod name) */
  long lease_duration_s; /* 0 = 15 */
  long renew_deadline_s; /* 0 = 10: leading ends if not renewed this long */
  long retry_period_s;   /* 0 = 2 */
  /* Microseconds since the Unix epoch; NULL = the real clock.  Tests
   * inject a fake one. */
  int64_t (*now_us)(void *clock_user);
  void *clock_user;
  void (*on_started)(void *user);
  void (*on_stopped)(void *user);
  void *user;
  /* Called when gf_kube_leader_try's error state changes: an error other
   * than the last one reported (rc < 0, msg), or a success after errors
   * (rc 0, msg "").  Losing a race (409) is not an error.  May be NULL. */
  void (*on_error)(void *user, int rc, const char *msg);
} gf_kube_leader_opts;

/* Leader election on a coordination.k8s.io/v1 Lease, following client-go's
 * rules: a lease is taken over only when its holder has not renewed it for
 * leaseDurationSeconds as observed by *this* replica's clock (so clock skew
 * between replicas does not matter); every write carries the observed
 * resourceVersion, so two candidates never both win.  Strings are copied;
 * cfg is borrowed. */
int gf_kube_leader_new(gf_kube_leader **out, gf_kube_config *cfg,
                       const gf_kube_opts *kopts, const gf_kube_leader_opts *o,
                       gf_diag *d);
void gf_kube_leader_free(gf_kube_leader *le);

/* One attempt to acquire or renew.  Sets *leading (may be NULL) and calls
 * on_started / on_stopped on a change.  An unexpired lease held by another
 * replica, or a write that loses the race (409), is not an error: it
 * returns 0 and does not make us leader.  A leader whose renewal fails (409,
 * or any error, whose code is returned) keeps leading until its last
 * successful renewal is older than renew_deadline, then stops; the next try
 * that reads another holder stops it at once. */
int gf_kube_leader_try(gf_kube_leader *le, bool *leading, gf_diag *d);

/* Gives the lease up if held (holderIdentity cleared, leaseDurationSeconds
 * 1) so another replica takes over at once; calls on_stopped. */
int gf_kube_leader_release(gf_kube_leader *le, gf_diag *d);

/* Tries every retry period until gf_kube_leader_stop; releases on exit. */
int gf_kube_leader_run(gf_kube_leader *le);
void gf_kube_leader_stop(gf_kube_leader *le);
bool gf_kube_leader_is_leading(gf_kube_leader *le);

/* RFC 3339 MicroTime ("2024-05-01T10:00:00.123456Z") <-> microseconds since
 * the epoch.  Parse accepts fractional seconds of any length and a Z or
 * +hh:mm offset; fails GF_ESYNTAX. */
int gf_kube_time_parse(const char *s, int64_t *us);
void gf_kube_time_format(int64_t us, char *buf, size_t cap);

#endif
