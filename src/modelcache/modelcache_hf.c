/*
 * Hugging Face repositories as model sources (modelcache_int.h,
 * docs/modelcache.md "Hugging Face repositories"): "hf://ORG/NAME[@REV]"
 * resolved through a hub-compatible API into the cache's canonical
 * manifest.  The hub's answers are taken as hostile: every field is
 * checked, every size bounded, and a file without a hash the cache can
 * check is refused.
 *
 * The hub's API, as used here:
 *   GET <ep>/api/models/<repo>/revision/<rev>  -> {"sha": "<commit>", ...}
 *   GET <ep>/api/models/<repo>/tree/<commit>?recursive=true
 *       -> [{"type": "file"|"directory", "path", "size", "oid" (the git
 *            blob id), "lfs": {"oid": "<sha256>", "size", ...}}, ...],
 *          further pages named by a Link header's rel="next"
 *   GET <ep>/<repo>/resolve/<commit>/<path>    -> the file (an LFS file
 *       by a redirect to another host, a CDN)
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "buf.h"
#include "gpufrac/error.h"
#include "modelcache_int.h"
#include "node_util.h"

#define HF_API_MAX (16u << 20)     /* one API answer, bytes */
#define HF_PAGES_MAX 1000          /* listing pages */
#define HF_SMALL_MAX (10u << 20)   /* a file without LFS (the hub's limit) */
#define HF_SMALL_TOTAL (64u << 20) /* all of them */

typedef struct hf_file {
  char *path;
  uint64_t size;
  bool lfs;
  char sha256[GF_NODE_CACHE_HEX];
  char oid[41]; /* git blob id (sha1) of a file without LFS */
} hf_file;

typedef struct hf_list {
  hf_file *f;
  size_t n, cap;
  uint64_t bytes, small;
} hf_list;

static bool lower_hex(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return false;
  return s[n] == '\0';
}

bool gf__mc_is_hf(const char *source) {
  return source && strncmp(source, "hf://", 5) == 0;
}

bool gf__mc_hf_pinned(const char *source) {
  const char *at = gf__mc_is_hf(source) ? strchr(source + 5, '@') : NULL;
  return at && strlen(at + 1) == 40 && lower_hex(at + 1, 40);
}

bool gf__mc_hf_prefix_ok(const char *p, size_t n) {
  if (n < 7 || strncmp(p, "hf://", 5))
    return false;
  const char *r = p + 5;
  size_t m = n - 5;
  const char *slash = memchr(r, '/', m);
  if (!slash)
    return false; /* "hf://ORG" would also let "hf://ORG-other/" in */
  if ((size_t)(slash - r) + 1 == m) { /* "hf://ORG/": ORG as in "ORG/x" */
    char t[HF_PART_MAX + 3];
    if (m - 1 > HF_PART_MAX)
      return false;
    memcpy(t, r, m - 1);
    memcpy(t + m - 1, "/x", 3);
    return gf__mc_hf_repo_ok(t, m + 1);
  }
  return gf__mc_hf_repo_ok(r, r[m - 1] == '/' ? m - 1 : m);
}

bool gf__mc_hf_prefix_match(const char *p, size_t n, const char *source) {
  if (n < 7 || strncmp(p, "hf://", 5) || !gf__mc_is_hf(source))
    return false;
  const char *slash = memchr(p + 5, '/', n - 5);
  if (!slash)
    return false;
  if ((size_t)(slash - p) + 1 == n) /* "hf://ORG/": everything under it */
    return strncmp(source, p, n) == 0;
  size_t m = p[n - 1] == '/' ? n - 1 : n; /* "hf://ORG/NAME[/]" */
  return strncmp(source, p, m) == 0 && (source[m] == '\0' || source[m] == '@');
}

bool gf__mc_hf_token_safe(const char *origin) {
  if (strncmp(origin, "https://", 8) == 0)
    return true;
  if (strncmp(origin, "http://", 7) != 0)
    return false;
  /* gf__mc_origin's form: the port is always there, after the last ':' */
  char host[256];
  const char *h = origin + 7, *colon = strrchr(h, ':');
  size_t n = colon ? (size_t)(colon - h) : 0;
  if (!n || n >= sizeof(host))
    return false;
  memcpy(host, h, n);
  host[n] = '\0';
  struct in_addr a4;
  if (inet_pton(AF_INET, host, &a4) == 1)
    return (ntohl(a4.s_addr) >> 24) == 127;
  return strcmp(host, "localhost") == 0 || strcmp(host, "[::1]") == 0;
}

/* Whether URL u has part `what` (a non-empty one for the host). */
static bool has_part(CURLU *u, CURLUPart what) {
  char *part = NULL;
  CURLUcode rc = curl_url_get(u, what, &part, 0);
  bool has = rc == CURLUE_OK && part && (what != CURLUPART_HOST || part[0]);
  curl_free(part);
  return has;
}

/* What is wrong with endpoint ep's parts (NULL: nothing): the sources'
 * rules (gf__mc_url_why: no empty port, dot segment, ...), then what
 * libcurl makes of it. */
static const char *endpoint_why(CURLU *u, const char *ep, const char *tn) {
  const char *why = gf__mc_url_why(ep);
  if (why && !strstr(why, "user name or password"))
    return why;
  if (!why && (curl_url_set(u, CURLUPART_URL, ep, 0) != CURLUE_OK ||
               !has_part(u, CURLUPART_HOST)))
    return "is not a URL with a host";
  if (why || has_part(u, CURLUPART_USER) || has_part(u, CURLUPART_PASSWORD))
    return strcmp(tn, "model_hf_token_file")
               ? "has a user name or password (user:password@): refused (a "
                 "hub token goes in --hf-token-file)"
               : "has a user name or password (user:password@): refused (a "
                 "hub token goes in model_hf_token_file)";
  if (has_part(u, CURLUPART_QUERY))
    return "has a query string ('?...'): the hub's API paths are appended "
           "to the endpoint, want scheme://host[:port][/path]";
  if (has_part(u, CURLUPART_FRAGMENT))
    return "has a fragment ('#...'): want scheme://host[:port][/path]";
  return NULL;
}

int gf__mc_hf_endpoint_check(const char *ep, bool token,
                             const char *const names[2], gf_diag *d) {
  const char *en = names && names[0] ? names[0] : "model_hf_endpoint";
  const char *tn = names && names[1] ? names[1] : "model_hf_token_file";
  char shown[200];
  gf__mc_source_shown(ep, shown, sizeof(shown)); /* never a password */
  if (strncasecmp(ep, "https://", 8) && strncasecmp(ep, "http://", 7))
    return gf_diag_set(d, GF_EINVAL, "%s '%s': not an http:// or https:// URL",
                       en, shown);
  CURLU *u = curl_url();
  if (!u)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  const char *why = endpoint_why(u, ep, tn);
  curl_url_cleanup(u);
  if (why)
    return gf_diag_set(d, GF_EINVAL, "%s '%s' %s", en, shown, why);
  char origin[1200];
  if (token && (!gf__mc_origin(ep, origin, sizeof(origin)) ||
                !gf__mc_hf_token_safe(origin)))
    return gf_diag_set(d, GF_EINVAL,
                       "%s '%s': the hub token (%s) is sent only over "
                       "https:// or to a loopback http:// endpoint "
                       "(127.0.0.0/8, localhost, [::1])",
                       en, shown, tn);
  return 0;
}

/* A path from the listing, fit to print: control bytes as '?'. */
static const char *printable(const char *p, char *out, size_t cap) {
  size_t k = 0;
  for (; p[k] && k + 1 < cap; k++)
    out[k] = (unsigned char)p[k] < 0x20 || p[k] == 0x7f ? '?' : p[k];
  out[k] = '\0';
  return out;
}

static json_t *load_json(const char *text, size_t len, const char *what,
                         gf_diag *d) {
  json_error_t je;
  json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!j)
    gf_diag_set(d, GF_ESYNTAX, "%s: not JSON (%s, line %d)", what, je.text,
                je.line);
  return j;
}

/* The commit of revision rev (its "sha"). */
static int resolve_commit(const char *ep, const char *repo, const char *rev,
                          const gf__mc_opts *o, void **conn, char commit[41],
                          gf_diag *d) {
  char esc[HF_REV_MAX * 3 + 1], url[2048];
  if (!gf__mc_escape(rev, strlen(rev), esc, sizeof(esc)) ||
      snprintf(url, sizeof(url), "%s/api/models/%s/revision/%s", ep, repo,
               esc) >= (int)sizeof(url))
    return gf_diag_set(d, GF_ELIMIT, "hf://%s: the URL is too long", repo);
  char *text = NULL;
  size_t len = 0;
  int rc = gf__mc_get_url(url, o, conn, HF_API_MAX, &text, &len, NULL, 0, d);
  if (rc)
    return rc;
  json_t *j = load_json(text, len, url, d);
  gf__free(text);
  if (!j)
    return GF_ESYNTAX;
  json_t *sha = json_object_get(j, "sha");
  const char *s = json_is_string(sha) ? json_string_value(sha) : NULL;
  if (!s || strlen(s) != 40 || !lower_hex(s, 40))
    rc = gf_diag_set(d, GF_ESYNTAX,
                     "%s: no \"sha\" of 40 lowercase hex digits (the "
                     "revision's commit)",
                     url);
  else
    memcpy(commit, s, 41);
  json_decref(j);
  return rc;
}

static int list_add(hf_list *l, const hf_file *f, gf_diag *d) {
  if (l->n == GF_NODE_CACHE_FILES_MAX)
    return gf_diag_set(d, GF_ELIMIT,
                       "the listing has more than %u files (the most a "
                       "manifest holds)",
                       GF_NODE_CACHE_FILES_MAX);
  if (l->n == l->cap) {
    size_t nc = l->cap ? l->cap * 2 : 64;
    hf_file *nf = gf__realloc(l->f, nc * sizeof(*nf));
    if (!nf)
      return gf_diag_set(d, GF_ENOMEM, "out of memory");
    l->f = nf;
    l->cap = nc;
  }
  l->f[l->n++] = *f;
  return 0;
}

/* A JSON integer 0..2^62 into *v. */
static bool size_of(json_t *j, uint64_t *v) {
  if (!json_is_integer(j) || json_integer_value(j) < 0 ||
      json_integer_value(j) > ((json_int_t)1 << 62))
    return false;
  *v = (uint64_t)json_integer_value(j);
  return true;
}

/* One listing item into l (a directory is skipped). */
static int take_item(json_t *it, const char *where, hf_list *l, gf_diag *d) {
  if (!json_is_object(it))
    return gf_diag_set(d, GF_ESYNTAX, "%s: an item that is not an object",
                       where);
  const char *type = json_string_value(json_object_get(it, "type"));
  if (type && !strcmp(type, "directory"))
    return 0;
  if (!type || strcmp(type, "file"))
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: an item whose \"type\" is neither \"file\" nor "
                       "\"directory\"",
                       where);
  json_t *pj = json_object_get(it, "path");
  const char *path = json_is_string(pj) ? json_string_value(pj) : NULL;
  if (!path)
    return gf_diag_set(d, GF_ESYNTAX, "%s: a file without a \"path\"", where);
  char shown[128];
  size_t pl = json_string_length(pj);
  const char *why = pl != strlen(path) ? "a NUL byte in the path"
                                       : gf__mc_path_problem(path, pl);
  if (why)
    return gf_diag_set(d, GF_ESYNTAX, "%s: file '%s': %s", where,
                       printable(path, shown, sizeof(shown)), why);
  hf_file f = {.path = NULL};
  if (!size_of(json_object_get(it, "size"), &f.size))
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: file '%s': \"size\" is not a byte count", where,
                       printable(path, shown, sizeof(shown)));
  json_t *lfs = json_object_get(it, "lfs");
  if (json_is_object(lfs)) {
    const char *oid = json_string_value(json_object_get(lfs, "oid"));
    uint64_t lsize = 0;
    if (oid && !strncmp(oid, "sha256:", 7))
      oid += 7;
    if (!oid || strlen(oid) != 64 || !lower_hex(oid, 64))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: file '%s' is stored in LFS without a sha256 "
                         "(\"lfs\".\"oid\", 64 lowercase hex digits)",
                         where, printable(path, shown, sizeof(shown)));
    if (!size_of(json_object_get(lfs, "size"), &lsize) || lsize != f.size)
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: file '%s': its LFS size is not its \"size\"",
                         where, printable(path, shown, sizeof(shown)));
    f.lfs = true;
    memcpy(f.sha256, oid, 65);
  } else {
    const char *oid = json_string_value(json_object_get(it, "oid"));
    if (lfs && !json_is_null(lfs))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: file '%s': \"lfs\" is not an "
                         "object",
                         where, printable(path, shown, sizeof(shown)));
    if (!oid || strlen(oid) != 40 || !lower_hex(oid, 40))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: file '%s' has no hash (neither an LFS sha256 "
                         "nor a git blob \"oid\")",
                         where, printable(path, shown, sizeof(shown)));
    if (f.size > HF_SMALL_MAX)
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: file '%s': %" PRIu64
                         " bytes without an LFS sha256 (files over %u bytes "
                         "must be in LFS)",
                         where, printable(path, shown, sizeof(shown)), f.size,
                         HF_SMALL_MAX);
    if (l->small + f.size > HF_SMALL_TOTAL)
      return gf_diag_set(d, GF_ELIMIT,
                         "%s: more than %u bytes of files without LFS", where,
                         HF_SMALL_TOTAL);
    l->small += f.size;
    memcpy(f.oid, oid, 41);
  }
  if (l->bytes + f.size < l->bytes)
    return gf_diag_set(d, GF_ELIMIT, "%s: the sizes overflow", where);
  l->bytes += f.size;
  f.path = gf__strdup(path);
  if (!f.path)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  int rc = list_add(l, &f, d);
  if (rc)
    gf__free(f.path);
  return rc;
}

/* Every page of the listing at commit into l. */
static int list_tree(const char *ep, const char *repo, const char *commit,
                     const gf__mc_opts *o, void **conn, hf_list *l,
                     gf_diag *d) {
  char url[2048], next[2048], want[1200], org[1200];
  snprintf(url, sizeof(url), "%s/api/models/%s/tree/%s?recursive=true", ep,
           repo, commit);
  if (!gf__mc_origin(ep, want, sizeof(want)))
    return gf_diag_set(d, GF_EINVAL, "%s: not a URL", ep);
  for (int page = 1;; page++) {
    char *text = NULL;
    size_t len = 0;
    int rc = gf__mc_get_url(url, o, conn, HF_API_MAX, &text, &len, next,
                            sizeof(next), d);
    if (rc)
      return rc;
    json_t *j = load_json(text, len, url, d);
    gf__free(text);
    if (!j)
      return GF_ESYNTAX;
    char where[2100];
    snprintf(where, sizeof(where), "hf://%s@%.12s: listing page %d", repo,
             commit, page);
    if (!json_is_array(j))
      rc = gf_diag_set(d, GF_ESYNTAX, "%s: not an array", where);
    for (size_t i = 0; !rc && i < json_array_size(j); i++)
      rc = take_item(json_array_get(j, i), where, l, d);
    json_decref(j);
    if (rc)
      return rc;
    if (!next[0])
      return 0;
    /* the next page comes from the hub itself, over the same scheme (a
     * relative reference is the page's URL's) */
    char nurl[2048];
    if (!gf__mc_url_resolve(url, next, nurl, sizeof(nurl)) ||
        !gf__mc_origin(nurl, org, sizeof(org)) || strcmp(org, want) ||
        !gf__mc_source_ok(nurl))
      return gf_diag_set(d, GF_EINVAL,
                         "%s: its next page (Link rel=\"next\") is not on "
                         "the hub's host %s: refused",
                         where, want);
    if (page == HF_PAGES_MAX)
      return gf_diag_set(d, GF_ELIMIT, "%s: more than %d pages", where,
                         HF_PAGES_MAX);
    memcpy(url, nurl, sizeof(url));
  }
}

int gf__mc_hf_page(const char *text, size_t len, size_t *files, uint64_t *bytes,
                   gf_diag *d) {
  hf_list l = {.f = NULL};
  *files = 0;
  *bytes = 0;
  json_t *j = load_json(text, len, "page", d);
  int rc = j ? 0 : GF_ESYNTAX;
  if (j && !json_is_array(j))
    rc = gf_diag_set(d, GF_ESYNTAX, "page: not an array");
  for (size_t i = 0; !rc && i < json_array_size(j); i++)
    rc = take_item(json_array_get(j, i), "page", &l, d);
  json_decref(j);
  if (!rc) {
    *files = l.n;
    *bytes = l.bytes;
  }
  for (size_t i = 0; i < l.n; i++)
    gf__free(l.f[i].path);
  gf__free(l.f);
  return rc;
}

static int cmp_file(const void *a, const void *b) {
  return strcmp(((const hf_file *)a)->path, ((const hf_file *)b)->path);
}

/* Fetches small file f (no LFS) from base, checks its git blob id and
 * size, and hashes it. */
static int hash_small(const char *base, hf_file *f, const gf__mc_opts *o,
                      void **conn, gf_diag *d) {
  char url[4096], esc[3 * GF_NODE_CACHE_PATH_MAX + 1], shown[128];
  if (!gf__mc_escape(f->path, strlen(f->path), esc, sizeof(esc)))
    return gf_diag_set(d, GF_ELIMIT, "%s: path too long", f->path);
  /* the components stay apart: '/' unescaped */
  char *w = esc;
  for (char *r = esc; *r; r++) {
    if (r[0] == '%' && r[1] == '2' && r[2] == 'F') {
      *w++ = '/';
      r += 2;
    } else {
      *w++ = *r;
    }
  }
  *w = '\0';
  if (snprintf(url, sizeof(url), "%s/%s", base, esc) >= (int)sizeof(url))
    return gf_diag_set(d, GF_ELIMIT, "%s: URL too long", f->path);
  char *data = NULL;
  size_t len = 0;
  int rc = gf__mc_get_url(url, o, conn, (size_t)f->size + 1, &data, &len, NULL,
                          0, d);
  if (rc == GF_ELIMIT || (!rc && len != f->size)) {
    gf__free(data);
    return gf_diag_set(d, GF_EIO,
                       "%s: not the %" PRIu64 " bytes the listing says", url,
                       f->size);
  }
  if (rc)
    return rc;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned mn = 0;
  char head[64], hex[GF_NODE_CACHE_HEX];
  int hl = snprintf(head, sizeof(head), "blob %zu", len);
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (!ctx) {
    gf__free(data);
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  }
  EVP_DigestInit_ex(ctx, EVP_sha1(), NULL);
  EVP_DigestUpdate(ctx, head, (size_t)hl + 1); /* with its NUL */
  EVP_DigestUpdate(ctx, data, len);
  EVP_DigestFinal_ex(ctx, md, &mn);
  gf__mc_to_hex(md, mn, hex);
  if (strcmp(hex, f->oid)) {
    rc = gf_diag_set(d, GF_EIO,
                     "file '%s': its git blob id is %s, not the %s the "
                     "listing says",
                     printable(f->path, shown, sizeof(shown)), hex, f->oid);
  } else {
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    EVP_DigestUpdate(ctx, data, len);
    EVP_DigestFinal_ex(ctx, md, &mn);
    gf__mc_to_hex(md, mn, f->sha256);
  }
  EVP_MD_CTX_free(ctx);
  gf__free(data);
  return rc;
}

/* The canonical manifest of l (sorted) into out. */
static int manifest_text(const hf_list *l, gf__mc_hf *out, gf_diag *d) {
  gf__buf b;
  gf__buf_init(&b, GF_NODE_CACHE_MANIFEST_MAX);
  for (size_t i = 0; i < l->n; i++)
    gf__buf_appendf(&b, "%s\t%" PRIu64 "\t%s\n", l->f[i].path, l->f[i].size,
                    l->f[i].sha256);
  if (gf__buf_error(&b)) {
    int e = gf__buf_error(&b);
    gf__buf_release(&b);
    return e == GF_ELIMIT
               ? gf_diag_set(d, GF_ELIMIT, "the manifest would pass %u bytes",
                             GF_NODE_CACHE_MANIFEST_MAX)
               : gf_diag_set(d, GF_ENOMEM, "out of memory");
  }
  out->len = b.len;
  out->manifest = gf__buf_take(&b);
  if (!out->manifest)
    out->manifest = gf__calloc(1, 1);
  gf__buf_release(&b);
  return out->manifest ? 0 : gf_diag_set(d, GF_ENOMEM, "out of memory");
}

/* Splits "hf://REPO[@REV]" into repo[rcap] and rev[vcap]. */
static int split_source(const char *source, char *repo, size_t rcap, char *rev,
                        size_t vcap, gf_diag *d) {
  const char *r = source + 5;
  const char *at = strchr(r, '@');
  size_t rl = at ? (size_t)(at - r) : strlen(r);
  const char *v = at ? at + 1 : "main";
  if (rl >= rcap || !gf__mc_hf_repo_ok(r, rl) || !gf__mc_hf_rev_ok(v) ||
      strlen(v) >= vcap)
    return gf_diag_set(d, GF_EINVAL,
                       "source '%.300s': want hf://ORG/NAME or "
                       "hf://ORG/NAME@REVISION (names of letters, digits, "
                       "'.', '_', '-'; a revision of those and '/')",
                       source);
  memcpy(repo, r, rl);
  repo[rl] = '\0';
  memcpy(rev, v, strlen(v) + 1);
  return 0;
}

int gf__mc_hf_resolve(const char *endpoint, const char *source,
                      const gf__mc_opts *o, gf__mc_hf *out, gf_diag *d) {
  memset(out, 0, sizeof(*out));
  char repo[2 * HF_PART_MAX + 2], rev[HF_REV_MAX + 1], ep[1024];
  int rc = split_source(source, repo, sizeof(repo), rev, sizeof(rev), d);
  if (rc)
    return rc;
  size_t el = endpoint ? strlen(endpoint) : 0;
  while (el && endpoint[el - 1] == '/')
    el--;
  if (!el || el >= sizeof(ep) ||
      (strncmp(endpoint, "https://", 8) && strncmp(endpoint, "http://", 7)))
    return gf_diag_set(d, GF_EINVAL,
                       "%s: no hub endpoint (model_hf_endpoint, an http:// "
                       "or https:// URL)",
                       source);
  memcpy(ep, endpoint, el);
  ep[el] = '\0';
  void *conn = NULL; /* one connection for the API's calls */
  hf_list l = {.f = NULL};
  rc = resolve_commit(ep, repo, rev, o, &conn, out->commit, d);
  if (!rc && snprintf(out->base, sizeof(out->base), "%s/%s/resolve/%s", ep,
                      repo, out->commit) >= (int)sizeof(out->base))
    rc = gf_diag_set(d, GF_ELIMIT, "%s: URL too long", source);
  if (!rc)
    rc = list_tree(ep, repo, out->commit, o, &conn, &l, d);
  if (!rc && l.n == 0)
    rc = gf_diag_set(d, GF_ESYNTAX, "hf://%s@%.12s: the listing has no files",
                     repo, out->commit);
  if (!rc) {
    qsort(l.f, l.n, sizeof(*l.f), cmp_file);
    for (size_t i = 0; !rc && i < l.n; i++)
      if (!l.f[i].lfs)
        rc = hash_small(out->base, &l.f[i], o, &conn, d);
  }
  gf__mc_conn_free(conn);
  if (!rc)
    rc = manifest_text(&l, out, d);
  for (size_t i = 0; i < l.n; i++)
    gf__free(l.f[i].path);
  gf__free(l.f);
  if (rc)
    gf__mc_hf_release(out);
  return rc;
}

void gf__mc_hf_release(gf__mc_hf *h) {
  gf__free(h->manifest);
  h->manifest = NULL;
  h->len = 0;
}

int gf__mc_hf_token(const char *path, const char *name, char *out, size_t cap,
                    gf_diag *d) {
  char *tok = NULL;
  size_t n = 0;
  if (gf__node_read_file(path, 4096, &tok, &n, NULL))
    return gf_diag_set(d, GF_EIO, "%s %s: cannot be read (or over 4096 bytes)",
                       name, path);
  if (n && tok[n - 1] == '\n')
    tok[--n] = '\0';
  if (n && tok[n - 1] == '\r')
    tok[--n] = '\0';
  bool ok = n > 0 && strlen(tok) == n;
  for (size_t i = 0; ok && i < n; i++)
    ok = tok[i] > 0x20 && tok[i] < 0x7f;
  int rc = 0;
  if (!ok || snprintf(out, cap, "Authorization: Bearer %s", tok) >= (int)cap)
    rc = gf_diag_set(d, GF_ESYNTAX,
                     "%s %s: not one line of visible ASCII, at most 4096 "
                     "bytes",
                     name, path);
  gf__free(tok);
  return rc;
}
