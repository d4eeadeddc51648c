/*
 * modelcache.h - the node-local weight cache (docs/modelcache.md).
 *
 * A model is a name plus a manifest digest: sha256 over the lines
 * "<path>\t<size>\t<sha256 hex>\n" of its files, paths relative and sorted
 * bytewise.  The cache keeps models content-addressed under a root
 * (<root>/sha256/<hex>/files), within a byte budget, and survives restarts
 * through <root>/state.json.
 *
 * Invariants:
 *   - Only verified models are visible: a fetch writes under <root>/tmp and
 *     publishes by one rename(2) after every file's size and sha256 match.
 *   - Bytes of ready models plus fetches under way never exceed the budget.
 *   - A pinned model (a running pod mounts it) is never evicted.
 *   - One fetch per digest at a time: a second request waits for the first.
 * All functions on one gf_node_cache are thread-safe.
 */
#ifndef GPUFRAC_NODE_MODELCACHE_H
#define GPUFRAC_NODE_MODELCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/diag.h"
#include "gpufrac/grant.h"

#define GF_NODE_CACHE_ROOT "/var/lib/gpufrac/models"
/* Where the node agent mounts a pod's or claim's model in its containers:
 * GF_NODE_MODEL_MOUNT/<name>, read-only, also in GPUFRAC_MODEL_DIR. */
#define GF_NODE_MODEL_MOUNT "/gpufrac/models"
/* A pod's view of its model (docs/modelcache.md, "A pod whose model is not
 * cached"): <root>/pods/<uid> is mounted at GF_NODE_MODEL_MOUNT at once;
 * the model's files appear under <name>/ and then the marker
 * GF_NODE_MODEL_READY_FILE (a model name never starts with '.'), and the
 * agent sets the pod's condition GF_NODE_MODEL_READY_CONDITION (for a
 * readiness gate) True. */
#define GF_NODE_MODEL_READY_FILE ".ready"
#define GF_NODE_MODEL_READY_CONDITION "gpufrac.io/model-ready"
/* The weight cache's pod annotations (docs/modelcache.md; gpufrac/grant.h
 * defines them for both sides). */
#define GF_NODE_MODEL_ANNOTATION GF_MODEL_ANNOTATION
#define GF_NODE_MODEL_SOURCE_ANNOTATION GF_MODEL_SOURCE_ANNOTATION
#define GF_NODE_MODEL_REF_MAX 400
#define GF_NODE_MODEL_SOURCE_MAX 2048
#define GF_NODE_MODEL_SOURCE_MAX_TEXT "2047"
#define GF_NODE_CACHE_MANIFEST "gpufrac.manifest" /* at the source's base */
/* Where hf://ORG/NAME[@REVISION] sources are resolved unless
 * gf_node_cache_opts.hf_endpoint says otherwise (docs/modelcache.md,
 * "Hugging Face repositories"). */
#define GF_NODE_CACHE_HF_ENDPOINT "https://huggingface.co"
#define GF_NODE_CACHE_HEX 65 /* 64 hex digits + NUL */
#define GF_NODE_CACHE_NAME_MAX 254
#define GF_NODE_CACHE_PATH_MAX 1024   /* a manifest path, bytes */
#define GF_NODE_CACHE_FILES_MAX 65536 /* files in one manifest */
#define GF_NODE_CACHE_MANIFEST_MAX (16u << 20)
/* Without a budget the cache takes 1/GF_NODE_CACHE_BUDGET_DIV of its
 * filesystem; every fetch leaves 1/GF_NODE_CACHE_KEEP_FREE_DIV of it free,
 * checked before it starts and while it writes. */
#define GF_NODE_CACHE_BUDGET_DIV 2
#define GF_NODE_CACHE_KEEP_FREE_DIV 10

/* ---- manifests -------------------------------------------------------- */

typedef struct gf_node_cache_file {
  char *path; /* relative, validated */
  uint64_t size;
  char hex[GF_NODE_CACHE_HEX]; /* the file's sha256 */
} gf_node_cache_file;

typedef struct gf_node_cache_manifest {
  size_t n;
  gf_node_cache_file *files;   /* sorted bytewise by path */
  uint64_t bytes;              /* sum of sizes */
  char hex[GF_NODE_CACHE_HEX]; /* the manifest digest (of the text) */
} gf_node_cache_manifest;

/* Parses the canonical manifest text[len] into *m (released with
 * gf_node_cache_manifest_release) and computes its digest.  GF_ESYNTAX
 * naming the line for anything not canonical: an absolute path, a "." or
 * ".." or empty component, a control byte, unsorted or duplicate paths, a
 * path that is also a directory of another, a size that is not decimal or
 * overflows, hex not 64 lowercase digits, no final newline; GF_ELIMIT for
 * more than GF_NODE_CACHE_FILES_MAX files; GF_ENOMEM.  *m is empty on
 * failure. */
int gf_node_cache_manifest_parse(const char *text, size_t len,
                                 gf_node_cache_manifest *m, gf_diag *d);
void gf_node_cache_manifest_release(gf_node_cache_manifest *m);

/* Builds the manifest of the regular files under dir (hashing each) into
 * *text[*len], from the allocation wrapper (gf__free it in src/); a tool for
 * publishing a source.  GF_EIO naming the file, GF_EINVAL for a symlink or a
 * name the manifest cannot carry, GF_ELIMIT, GF_ENOMEM. */
int gf_node_cache_manifest_build(const char *dir, char **text, size_t *len,
                                 gf_diag *d);

/* sha256 of buf[len] as 64 lowercase hex into hex. */
void gf_node_cache_sha256_hex(const void *buf, size_t len,
                              char hex[GF_NODE_CACHE_HEX]);

/* Parses a pod's gpufrac.io/model value "<name>@sha256:<64 lowercase hex>"
 * into name[cap] and hex.  GF_ESYNTAX saying what is wrong. */
int gf_node_cache_ref_parse(const char *ref, char *name, size_t cap,
                            char hex[GF_NODE_CACHE_HEX], gf_diag *d);

/* ---- the cache -------------------------------------------------------- */

typedef struct gf_node_cache gf_node_cache;

typedef struct gf_node_cache_opts {
  const char *root;  /* NULL: GF_NODE_CACHE_ROOT */
  uint64_t budget;   /* bytes; 0: half of the root's filesystem */
  unsigned parallel; /* files fetched at once; 0: 4 */
  unsigned retries;  /* tries in a row that receive nothing, per file, after
                        the first (a try that gets bytes resets it); 0: 5 */
  long connect_timeout_s; /* 0: 10 */
  long stall_timeout_s;   /* no byte for this long fails a try; 0: 30 */
  long progress_s;        /* a progress log line this often; 0: 5 */
  /* A fetch (its files, all tries) that is not done this long after it
   * started fails with GF_ELIMIT; 0: 7200; < 0: none. */
  long deadline_s;
  /* Bytes per second a fetch must average (received, or found already on
   * disk from an earlier try), checked once it has run min_rate_after_s:
   * below it the fetch fails with GF_ELIMIT (a source that trickles a byte
   * now and then passes the stall timeout); 0: 1000000; < 0: none. */
  int64_t min_rate;
  long min_rate_after_s; /* 0: 60 */
  /* The most bytes of models one namespace's fetches may hold, pinned or
   * not, fetching included (gf_node_cache_acquire); 0: no limit. */
  uint64_t ns_budget;
  /* Pod sources (prefixes as in pod_sources) whose models are served to
   * every namespace: public mirrors.  A model a pod fetched from anywhere
   * else is served to that pod's namespace only.  NULL or "": none. */
  const char *shared_sources;
  /* Opens without the directory's lock and changes nothing on disk (no
   * recovery, no state written): for reading while another process (the
   * agent) holds the cache.  Fetch, evict, pin and verify then fail with
   * GF_ESTATE. */
  bool read_only;
  /* Who holds the lock, written beside the pid into <root>/lock for the
   * message another process is given ("gpufrac node agent"); NULL:
   * "gpufrac". */
  const char *lock_owner;
  /* Log lines ("model NAME: ..."); NULL: stderr. Called from fetch
   * threads, never with the cache's lock held. */
  void (*log)(void *user, const char *line);
  void *log_user;
  /* Where a pod may have models fetched from (gf_node_cache_fetch_for_pod):
   * prefixes separated by commas, each ending in '/', e.g.
   * "https://models.example.com/,file:///mnt/models/".  NULL or "": a
   * pod's gpufrac.io/model-source is refused, so a pod gets only models
   * already cached or being prefetched (the agent fetches as root from
   * the node's network: a URL a tenant chose must not reach the cloud's
   * metadata service or the node's own ports).  At most 1023 bytes. */
  const char *pod_sources;
  /* The hub API that hf://ORG/NAME[@REVISION] sources are resolved at
   * (http:// or https://, no trailing path needed); NULL or "":
   * GF_NODE_CACHE_HF_ENDPOINT. */
  const char *hf_endpoint;
  /* A file holding the hub token (one line), read at every resolution and
   * sent as "Authorization: Bearer" to hf_endpoint's scheme, host and port
   * only, never across a redirect to another host; NULL or "": none. */
  const char *hf_token_file;
  /* The CA bundle (PEM) servers are checked against; NULL or "":
   * libcurl's default. */
  const char *ca_file;
  /* What messages call hf_endpoint and hf_token_file (what the user
   * wrote), kept as given (string literals); NULL: the node config's keys
   * "model_hf_endpoint" and "model_hf_token_file" (the command gives its
   * options', "--hf-endpoint" and "--hf-token-file"). */
  const char *hf_endpoint_name, *hf_token_file_name;
} gf_node_cache_opts;

/* Opens (creating) the cache at o->root and recovers it: models whose
 * directory is present and whose manifest hashes to its name are kept in
 * the saved LRU order (an unlisted one is adopted as least recent), other
 * entries of sha256/ are removed, tmp/ keeps only resumable fetches, and
 * a budget lowered since the last run is met by evicting unpinned models.
 * A malformed state file is logged and rebuilt from the directories.
 * Unless o->read_only, <root>/lock is flock'ed (exclusive) first and held
 * until gf_node_cache_free: GF_ESTATE naming the holder's pid when another
 * process holds it (nothing is touched then).  GF_EIO naming the path,
 * GF_ENOMEM. */
int gf_node_cache_open(const gf_node_cache_opts *o, gf_node_cache **out,
                       gf_diag *d);
/* Makes every fetch under way, and every later one, stop soon with
 * GF_ESTATE (the agent is stopping); their partial files stay for the next
 * run to resume. */
void gf_node_cache_cancel(gf_node_cache *c);
/* Frees c; waits for no fetch (call it when none runs). NULL ok. */
void gf_node_cache_free(gf_node_cache *c);

/* Makes model hex ready: 0 at once when it is (and marks it used); when a
 * fetch of it runs, waits for that one and returns its result; else
 * fetches it from source (http://, https://, file:// base holding
 * GF_NODE_CACHE_MANIFEST and the files), evicting least recently used
 * unpinned models to fit.  name labels it (inventory, logs).  Errors:
 * GF_EINVAL (bad source or hex), GF_ENOFIT (larger than the budget, or the
 * pinned models leave no room), GF_EHTTP (the source failed), GF_ESYNTAX
 * (manifest not canonical or not the digest asked for), GF_EIO (a file's
 * size or sha256 differs, disk), GF_ENOMEM.  Nothing becomes visible on
 * failure. */
int gf_node_cache_fetch(gf_node_cache *c, const char *name, const char *hex,
                        const char *source, gf_diag *d);

/* gf_node_cache_fetch that also takes a Hugging Face repository as the
 * source, "hf://ORG/NAME" or "hf://ORG/NAME@REVISION" (default "main"),
 * resolved at opts.hf_endpoint into the manifest of the revision's commit;
 * hex may then be NULL or "" (any), else the manifest must have that
 * digest.  The digest fetched goes into hex_out.  A reply of the hub that
 * is malformed, too large or without a hash for a file is refused
 * (GF_ESYNTAX / GF_ELIMIT / GF_EIO naming it); else as
 * gf_node_cache_fetch. */
int gf_node_cache_fetch_source(gf_node_cache *c, const char *name,
                               const char *hex, const char *source,
                               char hex_out[GF_NODE_CACHE_HEX], gf_diag *d);

/* Whether source starts with one of the comma-separated prefixes in allow
 * (see gf_node_cache_opts.pod_sources); false for NULL or "" allow. */
bool gf_node_cache_source_allowed(const char *allow, const char *source);

/* Whether source has the form of a model source, saying only what it
 * seems to (docs/modelcache.md, "Sources"): http(s)://host[:port][/path]
 * (no user name or password, no empty or out-of-range port, no query or
 * fragment), file:///path, or hf://ORG/NAME[@REVISION]; in a path no '.',
 * '..' or empty segment (a final '/' is fine), no backslash, no
 * percent-encoded '.', '/' or '\\', no malformed escape; no control byte
 * or space; under 2048 bytes.  The one check of every source: the cache's
 * requests (a pod's, a prefetch ConfigMap's, an operator's fetch) and
 * `gpufrac cache prefetch --source`.  GF_EINVAL with "'<source, a password
 * left out>' <what is wrong>: refused ..." for the caller to prefix with
 * where it came from; d may be NULL. */
int gf_node_cache_source_check(const char *source, gf_diag *d);

/* Lower-cases the scheme of source (what comes before "://"), in place:
 * a scheme is case-insensitive (RFC 3986), and "HTTPS://h/x" is cached,
 * matched against prefixes and fetched as "https://h/x".  Each entry point
 * (the cache's requests, a prefetch ConfigMap, the node config's prefixes
 * and hub endpoint, `gpufrac cache prefetch`) applies it. */
void gf_node_cache_scheme_lower(char *source);

/* gf_node_cache_fetch for a source a pod named (its annotation): GF_EINVAL
 * naming the config key when the source is not under one of the cache's
 * pod_sources; redirects are then followed to https:// only.  A NULL
 * source is a hit or a fetch under way, never a download. */
int gf_node_cache_fetch_for_pod(gf_node_cache *c, const char *name,
                                const char *hex, const char *source,
                                gf_diag *d);

/* What a pod (or a DRA claim) asks of the cache. */
typedef struct gf_node_cache_req {
  const char *name;   /* labels the model (inventory, logs) */
  const char *hex;    /* its manifest digest */
  const char *source; /* the pod's gpufrac.io/model-source; NULL: none */
  const char *ns;     /* the pod's namespace (required) */
  const char *holder; /* the pin's holder: a pod or claim uid (required) */
  /* A failed fetch keeps its verified files and parts in <root>/tmp for
   * the next try to resume (the caller retries; it calls
   * gf_node_cache_drop_parts when it gives up).  false: a pod's failed
   * fetch leaves none (their bytes are outside the budget). */
  bool keep_parts;
} gf_node_cache_req;

/* Removes the parts a failed fetch of hex kept (keep_parts), unless a
 * fetch of it runs or it is ready (GF_ESTATE).  GF_EINVAL, GF_EIO. */
int gf_node_cache_drop_parts(gf_node_cache *c, const char *hex);

/* Removes the parts (tmp/<hex>) of pods' fetches that nothing wants any
 * more: no fetch of the model runs, it is not ready, no pin names it, and
 * wanted(user, hex) (NULL: none) says no pod wants it; an operator's
 * parts (`gpufrac cache fetch`, a prefetch: kept to resume) stay.  For
 * the parts of a pod that left while no agent ran (the model loader drops
 * them itself when a pod leaves while it runs): call it once the pods on
 * the node are known.  Returns how many models' parts were removed. */
int gf_node_cache_drop_stale_parts(gf_node_cache *c,
                                   bool (*wanted)(void *user, const char *hex),
                                   void *user);

/* Makes model r->hex ready for a pod of namespace r->ns, pins it for
 * r->holder and writes the directory to mount into dir[cap], the pin taken
 * under the cache's lock in the same step that finds the model ready (so no
 * eviction comes between the hit and the pin).  The source rules of
 * gf_node_cache_fetch_for_pod apply.  A model fetched for a pod is served
 * to that pod's namespace only, unless its source is under the cache's
 * shared_sources or an operator fetched (or prefetched) it: then to every
 * namespace (docs/modelcache.md).  GF_ENOTFOUND when the model is cached
 * for another namespace only; GF_ENOFIT naming model_ns_budget when the
 * namespace's models would pass opts.ns_budget; else as
 * gf_node_cache_fetch_for_pod.  On failure nothing is pinned. */
int gf_node_cache_acquire(gf_node_cache *c, const gf_node_cache_req *r,
                          char *dir, size_t cap, gf_diag *d);

/* The directory to mount for ready model hex into dir[cap]. GF_ENOTFOUND
 * when not ready, GF_ELIMIT when it does not fit. */
int gf_node_cache_path(gf_node_cache *c, const char *hex, char *dir,
                       size_t cap);

/* The cache's root directory (pods' views live under <root>/pods). */
const char *gf_node_cache_root(const gf_node_cache *c);

/* Makes dst (which must exist) a view of the model directory `files` (what
 * gf_node_cache_acquire wrote): its directories made, its files hard-linked
 * (entries already there are kept, so a second call completes the first).
 * dst must be on the cache's filesystem: GF_ESTATE saying so (EXDEV);
 * GF_EIO naming the path. */
int gf_node_cache_pod_view(const char *files, const char *dst, gf_diag *d);

/* rm -rf of a pod's view (its links, directories and marker); true when
 * it is gone. */
bool gf_node_cache_view_remove(const char *dir);

/* Pins ready model hex for holder (a pod uid); idempotent; saved.
 * GF_ENOTFOUND when not ready, GF_EINVAL for an empty holder. */
int gf_node_cache_pin(gf_node_cache *c, const char *hex, const char *holder);
/* Drops holder's pin on hex (hex NULL: all of holder's pins; holder NULL:
 * every pin on hex); marks the models used.  Returns the number of pins
 * dropped (0 on a read-only cache). */
int gf_node_cache_unpin(gf_node_cache *c, const char *hex, const char *holder);

/* Removes ready model hex.  GF_ENOTFOUND, GF_ESTATE when pinned or being
 * fetched. */
int gf_node_cache_evict(gf_node_cache *c, const char *hex, gf_diag *d);

/* Re-hashes every file of every ready model; a model that fails (a file
 * missing, changed, of another size) is removed unless pinned, and
 * reported through report (may be NULL).  Returns the number that failed
 * (>= 0), GF_ENOMEM, or GF_ESTATE on a read-only cache. */
int gf_node_cache_verify(gf_node_cache *c,
                         void (*report)(void *user, const char *hex,
                                        const char *name, const char *why),
                         void *user);

typedef enum gf_node_model_state {
  GF_NODE_CACHE_READY,
  GF_NODE_CACHE_FETCHING,
} gf_node_model_state;

typedef struct gf_node_cache_entry {
  char name[GF_NODE_CACHE_NAME_MAX];
  char hex[GF_NODE_CACHE_HEX];
  uint64_t bytes; /* 0 while the manifest of a fetch is not in yet */
  gf_node_model_state state;
  uint32_t pins;
  uint64_t used; /* LRU counter: larger is more recent */
  /* A cache opened read-only lists the fetches on disk (<root>/tmp: under
   * way in the process that holds the cache, or stopped with their parts)
   * as GF_NODE_CACHE_FETCHING with the bytes they hold so far here. */
  uint64_t have;
  /* Who is served it (docs/modelcache.md, "Who gets a cached model"):
   * shared, or the one namespace ns ("" with shared false: nobody's, an
   * adopted model no operator has shared yet). */
  bool shared;
  char ns[64];
} gf_node_cache_entry;

/* The models in *out (from the allocation wrapper: gf__free it in src/;
 * most recently used first), count in *n.
 * GF_ENOMEM. */
int gf_node_cache_list(gf_node_cache *c, gf_node_cache_entry **out, size_t *n);

typedef struct gf_node_cache_stats {
  uint64_t budget, used; /* bytes; used counts reserved fetches */
  uint64_t models;       /* ready */
  uint64_t fetching;
  uint64_t bytes_fetched;
  uint64_t fetch_ok, fetch_failed, fetch_hit, evictions;
  uint64_t locked; /* bytes mlock'ed by keep-warm */
} gf_node_cache_stats;
void gf_node_cache_stats_get(gf_node_cache *c, gf_node_cache_stats *s);

/* Prometheus text (gpufrac_model_cache_*) of the stats, malloc'd in *out.
 * GF_ENOMEM. */
int gf_node_cache_metrics_text(gf_node_cache *c, char **out, size_t *len);

/* Drops the pins of every holder for which alive() is false (pods that
 * are gone); returns how many were dropped.  alive runs with the cache's
 * lock held: it must not call into the cache. */
int gf_node_cache_prune(gf_node_cache *c,
                        bool (*alive)(void *user, const char *holder),
                        void *user);

/* Keep-warm, called now and then (now: unix seconds): a ready model whose
 * last pin went less than keep_s ago has its files advised into the page
 * cache (posix_fadvise WILLNEED) once, and mapped and mlock'ed while the
 * cache's locked bytes stay within mlock_budget; once keep_s has passed
 * (or it is pinned again) they are unlocked.  Returns how many models
 * changed. */
int gf_node_cache_keep_warm(gf_node_cache *c, long keep_s,
                            uint64_t mlock_budget, int64_t now);

/* posix_fadvise DONTNEED on model hex's files (the benchmark's cold page
 * cache; no root needed).  GF_ENOTFOUND. */
int gf_node_cache_drop_page_cache(gf_node_cache *c, const char *hex);

/* The inventory annotation's "models" value: a JSON array text of at most
 * 64 entries, most recently used first (from the allocation wrapper:
 * gf__free it in src/): name, digest, bytes, state, shared (bool) and, for
 * a model that is not shared, namespace (the one namespace whose pods it is
 * served to; "" for none), so placement can count only what a pod may use
 * (issue 28 item 2).  GF_ENOMEM. */
int gf_node_cache_models_json(gf_node_cache *c, char **out);

#endif
