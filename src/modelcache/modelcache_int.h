/*
 * Internal to the weight cache: what modelcache.c (the store) asks of
 * modelcache_fetch.c (libcurl), and what both share (modelcache_util.c).
 * Nothing here is public API.
 */
#ifndef GPUFRAC_NODE_MODELCACHE_INT_H
#define GPUFRAC_NODE_MODELCACHE_INT_H

#include "gpufrac/modelcache.h"
#include "gpufrac/node.h"

/* The options with every default filled in. */
typedef struct gf__mc_opts {
  unsigned parallel, retries;
  long connect_timeout_s, stall_timeout_s, progress_s;
  long deadline_s; /* 0: none */
  /* CLOCK_MONOTONIC seconds by which each of a hub's answers
   * (gf__mc_get_url) must be in: a resolution within the fetch's
   * deadline (0: none). */
  double until;
  uint64_t min_rate; /* bytes/s; 0: none */
  long min_rate_after_s;
  /* Bytes the cache's filesystem keeps free: a fetch is refused, and one
   * under way stopped, rather than going under it (0: no check). */
  uint64_t keep_free;
  /* The CA bundle libcurl checks servers against (CURLOPT_CAINFO); NULL
   * or "": libcurl's default. */
  const char *ca_file;
  /* A header line ("Authorization: Bearer T") sent on the hops of a
   * request whose scheme, host and port are auth_origin's ("https://h:443")
   * and on no other (a redirect to another host goes without it); NULL:
   * none. */
  const char *auth;
  const char *auth_origin;
  void (*log)(void *user, const char *line);
  void *log_user;
} gf__mc_opts;

/* Logs one formatted line through o->log. */
void gf__mc_log(const gf__mc_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Bytes free to an unprivileged writer on path's filesystem (statvfs
 * f_bavail) into *free, its size into *total.  GF_EIO. */
int gf__mc_fs_space(const char *path, uint64_t *free, uint64_t *total);

/* True for an http://, https:// or file:// URL without control bytes. */
bool gf__mc_source_ok(const char *source);

/* What is wrong with url, an http(s):// or file:/// URL (its scheme in
 * any case), as a source, a prefix of sources or a hub endpoint
 * (docs/modelcache.md, "Sources"): a user name or password, a host that is
 * not an RFC 1123 name, a dotted-quad IPv4 or a bracketed IPv6 address, an
 * empty or bad port, a query or fragment, a '.', '..' or empty ('//') path
 * segment (with ';' parameters too), a backslash, a percent-encoded '.',
 * '/' or '\\', a bad or doubly encoded (%25XX) escape, path bytes (raw or
 * encoded) that are not UTF-8 or are a look-alike of '.', '/' or '\\', a
 * bidi control or an invisible character, a control byte or space, 2048
 * bytes or more.  NULL: nothing (modelcache_source.c). */
const char *gf__mc_url_why(const char *url);
/* What is wrong with url's path (before any query) by the same rules
 * (a redirect's target, whose query a CDN's signature may need); NULL:
 * nothing. */
const char *gf__mc_url_path_why(const char *url);
/* source fit for a message into out[cap]: its password left out
 * (gf__mc_url_redact), a control byte as '?', a byte past ASCII as %XX,
 * cut at 150 bytes when longer than 160. */
void gf__mc_source_shown(const char *source, char *out, size_t cap);
/* url into out[cap] with its user information (before '@') as "***". */
void gf__mc_url_redact(const char *url, char *out, size_t cap);
#define HF_PART_MAX 96 /* an ORG or NAME of hf://ORG/NAME */
#define HF_REV_MAX 255 /* its revision */
/* Whether r[n] is "ORG/NAME": [A-Za-z0-9][A-Za-z0-9._-]*, no "..", each at
 * most HF_PART_MAX bytes. */
bool gf__mc_hf_repo_ok(const char *r, size_t n);
/* Whether v is a branch, tag or commit: [A-Za-z0-9._/-], no "..", no '.'
 * or empty '/'-separated segment, at most HF_REV_MAX bytes. */
bool gf__mc_hf_rev_ok(const char *v);
/* What is wrong with source "hf://..." (NULL: nothing): not
 * hf://ORG/NAME[@REVISION] with the names and revision the hub allows. */
const char *gf__mc_hf_source_why(const char *source);

/* Reads <source>/GF_NODE_CACHE_MANIFEST (at most GF_NODE_CACHE_MANIFEST_MAX
 * bytes) into malloc'd *out[*len].  A file:// source is read without
 * libcurl, beneath the directory of file:// URL `beneath` (NULL: the
 * source's own), never through a symlink or '..' (gf__mc_open_beneath).
 * Redirects are followed to https:// only; with redir_allow (a pod's
 * source: the node's model_pod_sources) only to the source's own scheme,
 * host and port or under one of those prefixes, each hop checked before it
 * is connected to.
 * GF_EHTTP / GF_EIO / GF_EINVAL / GF_ELIMIT / GF_ENOMEM. */
int gf__mc_get_manifest(const char *source, const char *beneath,
                        const char *redir_allow, const gf__mc_opts *o,
                        char **out, size_t *len, gf_diag *d);

/* GETs url into malloc'd *out[*len] (at most max bytes: GF_ELIMIT
 * beyond), redirects followed as for an operator's source (https:// only)
 * and o->auth sent as its doc says.  When next is not NULL, the URL of a
 * Link header's rel="next" goes into next[ncap] ("" for none).
 * GF_EHTTP naming the URL and status, GF_ELIMIT, GF_ENOMEM. */
int gf__mc_get_url(const char *url, const gf__mc_opts *o, void **conn,
                   size_t max, char **out, size_t *len, char *next, size_t ncap,
                   gf_diag *d);
/* conn (NULL: each call its own connection): a handle gf__mc_get_url
 * made into *conn and reuses (keeping its connections) while *conn is
 * kept; freed here.  NULL ok. */
void gf__mc_conn_free(void *conn);

/* scheme://host:port of url (the port made explicit) into out[cap]; false
 * when it cannot be parsed. */
bool gf__mc_origin(const char *url, char *out, size_t cap);

/* ref (a URL or a reference relative to base, as a Link header's target
 * may be) resolved against base into out[cap]; false when it cannot be. */
bool gf__mc_url_resolve(const char *base, const char *ref, char *out,
                        size_t cap);

/* url-escapes s[n] (every byte but [A-Za-z0-9._~-]) into out[cap]; false
 * when it does not fit. */
bool gf__mc_escape(const char *s, size_t n, char *out, size_t cap);

/* What is wrong with manifest path p[n] (a literal), or NULL when it may
 * be one (docs/modelcache.md: relative, no '.', '..' or empty component,
 * no control byte, at most GF_NODE_CACHE_PATH_MAX bytes). */
const char *gf__mc_path_problem(const char *p, size_t n);

/* A Hugging Face repository resolved (modelcache_hf.c). */
typedef struct gf__mc_hf {
  char commit[41]; /* the revision's commit */
  char base[2048]; /* <endpoint>/<repo>/resolve/<commit>: the files */
  char *manifest;  /* the canonical manifest text (gf__free) */
  size_t len;
  char hex[GF_NODE_CACHE_HEX]; /* its digest */
} gf__mc_hf;

/* Whether source is "hf://REPO[@REVISION]". */
bool gf__mc_is_hf(const char *source);
/* Whether an hf:// source pins its commit: "hf://ORG/NAME@<40 lowercase
 * hex>" (what a pod must name: a branch or tag moves). */
bool gf__mc_hf_pinned(const char *source);
/* Whether p[n] (one entry of model_pod_sources / model_shared_sources,
 * starting "hf://") is "hf://ORG/" (an organisation) or "hf://ORG/NAME"
 * or "hf://ORG/NAME/" (one repository). */
bool gf__mc_hf_prefix_ok(const char *p, size_t n);
/* Whether source is under the hf:// prefix p[n]: for "hf://ORG/", every
 * "hf://ORG/..."; for a repository, "hf://ORG/NAME" and
 * "hf://ORG/NAME@REVISION" only (never "hf://ORG/NAME-other"). */
bool gf__mc_hf_prefix_match(const char *p, size_t n, const char *source);
/* Whether a hub token may go to origin ("scheme://host:port", as
 * gf__mc_origin makes it): https://, or http:// to this machine only
 * (127.0.0.0/8, localhost, [::1]). */
bool gf__mc_hf_token_safe(const char *origin);
/* Whether ep is a hub endpoint the cache uses: an http:// or https:// URL
 * with a host and nothing but a port and a path besides (no user name or
 * password, query or fragment: the API paths are appended to it), and,
 * when a token goes with it, one gf__mc_hf_token_safe allows.  GF_EINVAL
 * with a sentence naming the endpoint and the token file as names[0] and
 * names[1] say (NULL: the node config's keys; never a password in it);
 * GF_ENOMEM. */
int gf__mc_hf_endpoint_check(const char *ep, bool token,
                             const char *const names[2], gf_diag *d);

/* Resolves source "hf://ORG/NAME[@REVISION]" (REVISION default "main") at
 * the hub API endpoint (docs/modelcache.md, "Hugging Face repositories"):
 * the revision's commit, the file list at it (every page) and each file's
 * size and sha256 (a large file's from its LFS entry; a small one is
 * fetched, checked against its git blob id and hashed), into the canonical
 * manifest in *out.  o->auth goes to the endpoint's host only.  Any reply
 * that is malformed, too large or without a hash is refused (GF_ESYNTAX /
 * GF_ELIMIT / GF_EIO naming it); GF_EHTTP; GF_EINVAL for a bad source. */
int gf__mc_hf_resolve(const char *endpoint, const char *source,
                      const gf__mc_opts *o, gf__mc_hf *out, gf_diag *d);
void gf__mc_hf_release(gf__mc_hf *h);
/* One page of a hub's tree listing (JSON text[len]) checked as
 * gf__mc_hf_resolve checks it: the files it lists into *files, the sum of
 * their sizes into *bytes.  GF_ESYNTAX / GF_ELIMIT naming the item;
 * GF_ENOMEM.  (The fuzz target's entry.) */
int gf__mc_hf_page(const char *text, size_t len, size_t *files, uint64_t *bytes,
                   gf_diag *d);

/* Reads the hub token from file path into "Authorization: Bearer T" in
 * out[cap]: one line of visible ASCII (a final newline allowed).
 * GF_EIO / GF_ESYNTAX naming the file (never the token). */
int gf__mc_hf_token(const char *path, const char *name, char *out, size_t cap,
                    gf_diag *d);

/* Fetches every file of m from source into <dir>/files/<path>, several at
 * once, resuming <path>.part files left by an earlier try, verifying each
 * file's size and sha256 before renaming it into place (made 0444).  A
 * file:// source is read beneath `beneath` as for gf__mc_get_manifest.
 * Adds the bytes received to *fetched (atomically); stops when *cancel
 * (read atomically) becomes non-zero.  GF_EHTTP, GF_EIO, GF_EINVAL,
 * GF_ENOMEM; files that failed their digest are deleted. */
int gf__mc_fetch_files(const char *source, const char *beneath,
                       const char *redir_allow, const char *name,
                       const char *dir, const gf_node_cache_manifest *m,
                       const gf__mc_opts *o, uint64_t *fetched,
                       const int *cancel, gf_diag *d);

/* Opens root/rel for reading without following any symlink and without
 * leaving root (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, else openat
 * with O_NOFOLLOW per component); '.' and '..' components are refused, and
 * what is opened must be a regular file (a FIFO does not block the open).
 * The fd into *fd.  GF_EINVAL, GF_EIO naming the path. */
int gf__mc_open_beneath(const char *root, const char *rel, int *fd, gf_diag *d);
/* Tests: true makes gf__mc_open_beneath take its openat fallback. */
void gf__mc_open_beneath_fallback(bool on);

/* Splits file:// URL source, percent-decoded, into root (the decoded path
 * of file:// URL beneath, or of source itself when NULL; no trailing '/')
 * and base (source's path below root, without leading or trailing '/').
 * GF_EINVAL when a URL is not file:///..., has a bad escape or %00, or
 * source's path is not under beneath's. */
int gf__mc_local_split(const char *source, const char *beneath, char *root,
                       size_t rcap, char *base, size_t bcap);

/* sha256 of the file at path (O_NOFOLLOW) into hex, its size into *size.
 * GF_EIO naming it. */
int gf__mc_hash_file(const char *path, uint64_t *size,
                     char hex[GF_NODE_CACHE_HEX], gf_diag *d);

/* rm -rf path (making directories writable first); true when gone. */
bool gf__mc_rmtree(const char *path);
/* md[n] as 2n lowercase hex digits and a NUL into hex. */
void gf__mc_to_hex(const unsigned char *md, unsigned n, char *hex);

/* Tests: fn(user, point) runs at named points of a request, without the
 * cache's lock: "acquire-found" (gf_node_cache_acquire found the model
 * ready and returns next), "fetch-started" (a request begins a download,
 * in its thread), "flight-wait" (a request is about to wait for another's
 * download).  NULL: none. */
void gf__mc_set_hook(gf_node_cache *c,
                     void (*fn)(void *user, const char *point), void *user);

#endif
