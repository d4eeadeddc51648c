/*
 * The weight cache's downloads (modelcache_int.h): libcurl easy handles on
 * a few threads taking files from a shared queue; each file resumed from its
 * .part with a Range (CURLOPT_RESUME_FROM_LARGE, which libcurl also honours
 * for file://), hashed as it arrives, checked against the manifest's size
 * and sha256 and only then renamed into place.
 */
#define _GNU_SOURCE /* syscall(2) */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifdef SYS_openat2
#include <linux/openat2.h>
#endif

#include "alloc.h"
#include "buf.h"
#include "gpufrac/error.h"
#include "modelcache_int.h"
#include "node_util.h"

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static CURLcode g_curl_rc;
static void curl_init_once(void) {
  g_curl_rc = curl_global_init(CURL_GLOBAL_ALL);
}

bool gf__mc_source_ok(const char *s) {
  if (strncmp(s, "http://", 7) && strncmp(s, "https://", 8) &&
      strncmp(s, "file:///", 8))
    return false;
  for (const char *p = s; *p; p++)
    if ((unsigned char)*p <= 0x20 || *p == 0x7f)
      return false;
  return strlen(s) < 2048;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* base + "/" + each component of rel percent-escaped. NULL: no memory. */
static char *file_url(CURL *h, const char *base, const char *rel) {
  size_t bl = strlen(base);
  while (bl > 0 && base[bl - 1] == '/')
    bl--;
  size_t cap = bl + 1 + strlen(rel) * 3 + 1;
  char *u = gf__malloc(cap);
  if (!u)
    return NULL;
  memcpy(u, base, bl);
  size_t n = bl;
  const char *p = rel;
  while (*p) {
    const char *sl = strchr(p, '/');
    size_t cl = sl ? (size_t)(sl - p) : strlen(p);
    char *esc = curl_easy_escape(h, p, (int)cl);
    if (!esc) {
      gf__free(u);
      return NULL;
    }
    n += (size_t)snprintf(u + n, cap - n, "/%s", esc);
    curl_free(esc);
    p += cl;
    if (*p == '/')
      p++;
  }
  return u;
}

static void common_opts(CURL *h, const gf__mc_opts *o) {
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  /* file:// sources are read without libcurl (beneath their directory) */
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  /* Redirects are followed by perform() below, each hop checked before it
   * is connected to (libcurl has no such check of its own). */
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, o->connect_timeout_s);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "gpufrac-node-cache");
  /* No error page ever lands in a file: a status >= 400 ends the
   * transfer (CURLE_HTTP_RETURNED_ERROR) before its body. */
  curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
  if (o->ca_file && o->ca_file[0])
    curl_easy_setopt(h, CURLOPT_CAINFO, o->ca_file);
}

/* Whether a response code is a redirect this follows. */
static bool is_redirect(long code) {
  return code == 301 || code == 302 || code == 303 || code == 307 ||
         code == 308;
}

/* scheme://host:port of url into out[cap] (the port made explicit); false
 * when it cannot be parsed. */
bool gf__mc_origin(const char *url, char *out, size_t cap) {
  CURLU *u = curl_url();
  char *sch = NULL, *host = NULL, *port = NULL;
  bool ok =
      u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_SCHEME, &sch, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK;
  if (ok) {
    int n = snprintf(out, cap, "%s://%s:%s", sch, host, port);
    ok = n > 0 && (size_t)n < cap;
  }
  curl_free(sch);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
  return ok;
}

bool gf__mc_url_resolve(const char *base, const char *ref, char *out,
                        size_t cap) {
  CURLU *u = curl_url();
  char *full = NULL;
  bool ok = u && curl_url_set(u, CURLUPART_URL, base, 0) == CURLUE_OK &&
            curl_url_set(u, CURLUPART_URL, ref, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_URL, &full, 0) == CURLUE_OK &&
            strlen(full) < cap;
  if (ok)
    memcpy(out, full, strlen(full) + 1);
  curl_free(full);
  curl_url_cleanup(u);
  return ok;
}

/* Whether url starts with one of the comma-separated prefixes in allow. */
static bool under_prefixes(const char *allow, const char *url) {
  for (const char *p = allow; p && *p;) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    while (n && (*p == ' ')) {
      p++;
      n--;
    }
    if (n && p[n - 1] == '/' && strncmp(url, p, n) == 0)
      return true;
    p = e ? e + 1 : NULL;
  }
  return false;
}

/* Whether a redirect from `from` to `to` may be followed: to https://
 * only (a plain-http hop is how a source reaches an instance metadata
 * service or a node port); for a pod's source (allow set: the node's
 * model_pod_sources) also only to the source's own scheme, host and port
 * or under one of the allowed prefixes.  Why not into why[cap]. */
static bool redirect_ok(const char *source, const char *from, const char *to,
                        const char *allow, char *why, size_t cap) {
  if (strncmp(to, "https://", 8) != 0) {
    snprintf(why, cap,
             "%.80s redirects to %.80s: refused, redirects are followed to "
             "https:// only",
             from, to);
    return false;
  }
  if (!allow)
    return true;
  char a[1200], b[1200];
  if (gf__mc_origin(source, a, sizeof(a)) && gf__mc_origin(to, b, sizeof(b)) &&
      strcmp(a, b) == 0)
    return true;
  /* under a prefix by its text and by what a server makes of its path
   * (an encoded '..' a server may decode; libcurl resolves literal ones
   * before this check sees the URL) */
  const char *pwhy = gf__mc_url_path_why(to);
  if (under_prefixes(allow, to) && !pwhy)
    return true;
  if (pwhy) {
    snprintf(why, cap, "%.60s redirects to %.60s: refused, its path %s", from,
             to, pwhy);
    return false;
  }
  snprintf(why, cap,
           "%.60s redirects to %.60s: refused, a pod's source may redirect "
           "only to its own host or under model_pod_sources",
           from, to);
  return false;
}

/* curl_easy_perform of url on h (its options set, CURLOPT_URL not yet),
 * following at most 5 redirects, each checked by redirect_ok before it is
 * connected to.  *code the last response's status; a refused redirect is
 * CURLE_TOO_MANY_REDIRECTS with the reason in err[CURL_ERROR_SIZE].  The
 * write callbacks discard the bodies of redirects (their xfer's handle
 * reports the 3xx). */
static CURLcode perform(CURL *h, const gf__mc_opts *o, const char *source,
                        const char *url, const char *allow, char *err,
                        long *code) {
  char *cur = gf__strdup(url);
  if (!cur)
    return CURLE_OUT_OF_MEMORY;
  CURLcode cr = CURLE_OK;
  for (int hop = 0;; hop++) {
    curl_easy_setopt(h, CURLOPT_URL, cur);
    /* the credentials go to their own origin only, hop by hop */
    struct curl_slist *hl = NULL;
    char org[1200];
    if (o->auth && o->auth_origin && gf__mc_origin(cur, org, sizeof(org)) &&
        !strcmp(org, o->auth_origin))
      hl = curl_slist_append(NULL, o->auth);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    cr = curl_easy_perform(h);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hl);
    *code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
    if (cr != CURLE_OK || !is_redirect(*code))
      break;
    char *to = NULL;
    curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &to);
    if (!to) {
      snprintf(err, CURL_ERROR_SIZE, "%.80s: HTTP %ld without a Location", cur,
               *code);
      cr = CURLE_HTTP_RETURNED_ERROR;
      break;
    }
    if (hop == 5) {
      snprintf(err, CURL_ERROR_SIZE, "%.80s: more than 5 redirects", url);
      cr = CURLE_TOO_MANY_REDIRECTS;
      break;
    }
    if (!redirect_ok(source, cur, to, allow, err, CURL_ERROR_SIZE)) {
      cr = CURLE_TOO_MANY_REDIRECTS;
      break;
    }
    char *next = gf__strdup(to);
    if (!next) {
      cr = CURLE_OUT_OF_MEMORY;
      break;
    }
    gf__free(cur);
    cur = next;
  }
  gf__free(cur);
  return cr;
}

/* Whether h's response now is a redirect (its body is not the file). */
static bool in_redirect(CURL *h) {
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  return is_redirect(code);
}

/* ---- file:// sources, read beneath their directory ---------------------- */

/* The percent-decoded path of file:// URL url into out[cap]: 0, or -1 for
 * a URL that is not file:///..., a %00, a bad escape or no room. */
static int file_url_path(const char *url, char *out, size_t cap) {
  if (strncmp(url, "file:///", 8) != 0)
    return -1;
  size_t n = 0;
  for (const char *p = url + 7; *p; p++) {
    int ch = (unsigned char)*p;
    if (ch == '%') {
      int v = 0;
      for (int k = 1; k <= 2; k++) {
        int x = (unsigned char)p[k];
        int dv = x >= '0' && x <= '9'   ? x - '0'
                 : x >= 'a' && x <= 'f' ? x - 'a' + 10
                 : x >= 'A' && x <= 'F' ? x - 'A' + 10
                                        : -1;
        if (dv < 0)
          return -1;
        v = v * 16 + dv;
      }
      if (v == 0)
        return -1;
      ch = v;
      p += 2;
    }
    if (n + 1 >= cap)
      return -1;
    out[n++] = (char)ch;
  }
  out[n] = '\0';
  return 0;
}

int gf__mc_local_split(const char *source, const char *beneath, char *root,
                       size_t rcap, char *base, size_t bcap) {
  char sp[4096];
  if (file_url_path(source, sp, sizeof(sp)) ||
      file_url_path(beneath ? beneath : source, root, rcap))
    return GF_EINVAL;
  size_t rl = strlen(root);
  while (rl > 1 && root[rl - 1] == '/')
    root[--rl] = '\0';
  size_t skip = rl == 1 ? 0 : rl; /* the root "/": everything is under */
  if (strncmp(sp, root, skip) != 0 || (sp[skip] != '/' && sp[skip] != '\0'))
    return GF_EINVAL;
  const char *rest = sp + skip;
  while (*rest == '/')
    rest++;
  size_t bl = strlen(rest);
  while (bl > 0 && rest[bl - 1] == '/')
    bl--;
  if (bl >= bcap)
    return GF_EINVAL;
  memcpy(base, rest, bl);
  base[bl] = '\0';
  return 0;
}

/* Opens rel under the directory fd dfd, one component at a time, never
 * following a symlink (O_NOFOLLOW on each; the fallback where openat2 is
 * missing or filtered).  -1 with errno. */
static int open_walk(int dfd, const char *rel, int flags) {
  int cur = dfd;
  const char *p = rel;
  for (;;) {
    while (*p == '/')
      p++;
    size_t cl = strcspn(p, "/");
    const char *next = p + cl;
    while (*next == '/')
      next++;
    char comp[256];
    if (cl == 0 || cl >= sizeof(comp)) {
      if (cur != dfd)
        close(cur);
      errno = cl ? ENAMETOOLONG : ENOENT;
      return -1;
    }
    memcpy(comp, p, cl);
    comp[cl] = '\0';
    bool last = *next == '\0';
    int fd = last ? openat(cur, comp, flags | O_NOFOLLOW)
                  : openat(cur, comp,
                           O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    if (cur != dfd)
      close(cur);
    if (fd < 0) {
      errno = e; /* ELOOP: a symlink */
      return -1;
    }
    if (last)
      return fd;
    cur = fd;
    p = next;
  }
}

static int g_walk_only; /* atomic: tests take the fallback */
void gf__mc_open_beneath_fallback(bool on) {
  __atomic_store_n(&g_walk_only, on, __ATOMIC_RELAXED);
}

int gf__mc_open_beneath(const char *root, const char *rel, int *out,
                        gf_diag *d) {
  *out = -1;
  /* '..' is refused outright (also one that would stay inside), '.' and
   * empty components are not in manifests and are refused too */
  for (const char *p = rel; *p;) {
    size_t cl = strcspn(p, "/");
    if ((cl == 2 && p[0] == '.' && p[1] == '.') || (cl == 1 && p[0] == '.'))
      return gf_diag_set(d, GF_EINVAL, "%s/%s: a '.' or '..' component", root,
                         rel);
    p += cl;
    while (*p == '/')
      p++;
  }
  int dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return gf_diag_set(d, GF_EIO, "%s: %s", root, strerror(errno));
  /* O_NONBLOCK: a FIFO must not block the open (it is refused below) */
  int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY;
  int fd = -1;
#ifdef SYS_openat2
  struct open_how how = {.flags = (uint64_t)flags,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                                    RESOLVE_NO_MAGICLINKS};
  if (__atomic_load_n(&g_walk_only, __ATOMIC_RELAXED))
    errno = ENOSYS;
  else
    fd = (int)syscall(SYS_openat2, dfd, rel, &how, sizeof(how));
  if (fd < 0 && (errno == ENOSYS || errno == EPERM || errno == E2BIG))
    fd = open_walk(dfd, rel, flags); /* no openat2 (or seccomp) */
#else
  fd = open_walk(dfd, rel, flags);
#endif
  int e = errno;
  close(dfd);
  if (fd < 0)
    return gf_diag_set(d, GF_EIO, "%s/%s: %s", root, rel,
                       e == ELOOP || e == EXDEV
                           ? "a symlink or a path out of the source's "
                             "directory (not followed)"
                           : strerror(e));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return gf_diag_set(d, GF_EIO, "%s/%s: not a regular file", root, rel);
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0)
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  *out = fd;
  return 0;
}

/* Opens file rel of a file:// job (base/rel beneath root). */
static int local_open(const char *root, const char *base, const char *rel,
                      int *fd, gf_diag *d) {
  char p[8192];
  int n = base[0] ? snprintf(p, sizeof(p), "%s/%s", base, rel)
                  : snprintf(p, sizeof(p), "%s", rel);
  if (n < 0 || (size_t)n >= sizeof(p))
    return gf_diag_set(d, GF_ELIMIT, "%s/%s: path too long", base, rel);
  /* the source failed, as an HTTP source's 404 would (GF_EHTTP) */
  int rc = gf__mc_open_beneath(root, p, fd, d);
  return rc == GF_EIO || rc == GF_EINVAL ? GF_EHTTP : rc;
}

/* ---- the manifest ------------------------------------------------------ */

/* A manifest as it arrives: at most GF_NODE_CACHE_MANIFEST_MAX bytes
 * (gf__buf_error: GF_ELIMIT when it was larger). */
typedef struct membuf {
  gf__buf b;
  CURL *h; /* a redirect's body is discarded; NULL: file:// */
} membuf;

static size_t mem_write(char *data, size_t sz, size_t nm, void *user) {
  membuf *m = user;
  size_t k = sz * nm;
  if (m->h && in_redirect(m->h))
    return k;
  return gf__buf_append(&m->b, data, k) ? 0 : k;
}

/* Hands the manifest in m to *out[*len] (an empty one: ""). */
static int mem_take(membuf *m, char **out, size_t *len, gf_diag *d) {
  *len = m->b.len;
  *out = gf__buf_take(&m->b);
  if (!*out)
    *out = gf__calloc(1, 1);
  return *out ? 0 : gf_diag_set(d, GF_ENOMEM, "out of memory");
}

/* The manifest of a file:// source, read beneath root. */
static int local_manifest(const char *source, const char *beneath, char **out,
                          size_t *len, gf_diag *d) {
  char root[4096], base[4096];
  if (gf__mc_local_split(source, beneath, root, sizeof(root), base,
                         sizeof(base)))
    return gf_diag_set(d, GF_EINVAL, "%s: not a file:// path under %s", source,
                       beneath ? beneath : "itself");
  int fd = -1;
  int rc = local_open(root, base, GF_NODE_CACHE_MANIFEST, &fd, d);
  if (rc)
    return rc;
  membuf b = {.h = NULL};
  gf__buf_init(&b.b, GF_NODE_CACHE_MANIFEST_MAX);
  char buf[65536];
  for (;;) {
    ssize_t r = read(fd, buf, sizeof(buf));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      rc = gf_diag_set(d, GF_EIO, "%s/%s: %s", source, GF_NODE_CACHE_MANIFEST,
                       strerror(errno));
      break;
    }
    if (r == 0)
      break;
    if (mem_write(buf, 1, (size_t)r, &b) != (size_t)r) {
      rc =
          gf__buf_error(&b.b) == GF_ELIMIT
              ? gf_diag_set(d, GF_ELIMIT, "%s/%s: larger than %u bytes", source,
                            GF_NODE_CACHE_MANIFEST, GF_NODE_CACHE_MANIFEST_MAX)
              : gf_diag_set(d, GF_ENOMEM, "out of memory");
      break;
    }
  }
  close(fd);
  if (!rc)
    rc = mem_take(&b, out, len, d);
  gf__buf_release(&b.b);
  return rc;
}

int gf__mc_get_manifest(const char *source, const char *beneath,
                        const char *redir_allow, const gf__mc_opts *o,
                        char **out, size_t *len, gf_diag *d) {
  *out = NULL;
  *len = 0;
  if (strncmp(source, "file:", 5) == 0)
    return local_manifest(source, beneath, out, len, d);
  pthread_once(&g_curl_once, curl_init_once);
  if (g_curl_rc != CURLE_OK)
    return gf_diag_set(d, GF_EHTTP, "libcurl: %s",
                       curl_easy_strerror(g_curl_rc));
  CURL *h = curl_easy_init();
  if (!h)
    return gf_diag_set(d, GF_ENOMEM, "libcurl: no handle");
  int rc = 0;
  membuf b = {.h = h};
  gf__buf_init(&b.b, GF_NODE_CACHE_MANIFEST_MAX);
  char *url = file_url(h, source, GF_NODE_CACHE_MANIFEST);
  if (!url) {
    rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
    goto out;
  }
  char err[CURL_ERROR_SIZE] = "";
  common_opts(h, o);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mem_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(h, CURLOPT_TIMEOUT, o->stall_timeout_s * 4);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, o->stall_timeout_s);
  long code = 0;
  CURLcode cr = perform(h, o, source, url, redir_allow, err, &code);
  if (gf__buf_error(&b.b) == GF_ELIMIT)
    rc = gf_diag_set(d, GF_ELIMIT, "%s: larger than %u bytes", url,
                     GF_NODE_CACHE_MANIFEST_MAX);
  else if (cr != CURLE_OK)
    rc = gf_diag_set(d, GF_EHTTP, "%s: %s", url,
                     err[0] ? err : curl_easy_strerror(cr));
  else if (strncmp(url, "file:", 5) != 0 && code != 200)
    rc = gf_diag_set(d, GF_EHTTP, "%s: HTTP status %ld", url, code);
  if (!rc)
    rc = mem_take(&b, out, len, d);
out:
  gf__buf_release(&b.b);
  gf__free(url);
  curl_easy_cleanup(h);
  return rc;
}

/* ---- any URL into memory (the hub's API) --------------------------------- */

bool gf__mc_escape(const char *s, size_t n, char *out, size_t cap) {
  static const char digits[] = "0123456789ABCDEF";
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
                 ch == '~' || ch == '-';
    if (k + (plain ? 1 : 3) >= cap)
      return false;
    if (plain) {
      out[k++] = (char)ch;
    } else {
      out[k++] = '%';
      out[k++] = digits[ch >> 4];
      out[k++] = digits[ch & 15];
    }
  }
  if (k >= cap)
    return false;
  out[k] = '\0';
  return true;
}

/* The final response's Link rel="next" target, as it arrives. */
typedef struct link_next {
  char *next; /* NULL: not asked for */
  size_t cap;
} link_next;

/* One Link header value: <URL>; rel="next", <URL>; rel="prev", ... */
static void link_parse(const char *v, size_t n, link_next *l) {
  const char *end = v + n;
  for (const char *p = v; p < end;) {
    const char *lt = memchr(p, '<', (size_t)(end - p));
    const char *gt = lt ? memchr(lt, '>', (size_t)(end - lt)) : NULL;
    if (!gt)
      return;
    const char *comma = memchr(gt, ',', (size_t)(end - gt));
    const char *stop = comma ? comma : end;
    bool is_next = false;
    for (const char *q = gt; q + 10 <= stop; q++)
      if (!strncasecmp(q, "rel=\"next\"", 10) ||
          (!strncasecmp(q, "rel=next", 8) &&
           (q + 8 == stop || q[8] == ';' || q[8] == ' ')))
        is_next = true;
    size_t ul = (size_t)(gt - lt - 1);
    if (is_next && ul < l->cap) {
      memcpy(l->next, lt + 1, ul);
      l->next[ul] = '\0';
      return;
    }
    p = stop < end ? stop + 1 : end;
  }
}

static size_t link_header(char *data, size_t sz, size_t nm, void *user) {
  link_next *l = user;
  size_t k = sz * nm;
  if (k >= 5 && !strncmp(data, "HTTP/", 5))
    l->next[0] = '\0'; /* a new response (after a redirect): its own */
  else if (k > 5 && !strncasecmp(data, "link:", 5))
    link_parse(data + 5, k - 5, l);
  return k;
}

void gf__mc_conn_free(void *conn) { curl_easy_cleanup(conn); }

int gf__mc_get_url(const char *url, const gf__mc_opts *o, void **conn,
                   size_t max, char **out, size_t *len, char *next, size_t ncap,
                   gf_diag *d) {
  *out = NULL;
  *len = 0;
  if (next && ncap)
    next[0] = '\0';
  pthread_once(&g_curl_once, curl_init_once);
  if (g_curl_rc != CURLE_OK)
    return gf_diag_set(d, GF_EHTTP, "libcurl: %s",
                       curl_easy_strerror(g_curl_rc));
  /* a handle kept by the caller keeps its connections (a listing's pages) */
  CURL *h = conn && *conn ? *conn : curl_easy_init();
  if (!h)
    return gf_diag_set(d, GF_ENOMEM, "libcurl: no handle");
  if (conn && *conn)
    curl_easy_reset(h);
  else if (conn)
    *conn = h;
  membuf b = {.h = h};
  gf__buf_init(&b.b, max);
  link_next l = {.next = next, .cap = ncap};
  char err[CURL_ERROR_SIZE] = "";
  common_opts(h, o);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mem_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
  if (next && ncap) {
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, link_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &l);
  }
  long tmo_ms = o->stall_timeout_s * 4000;
  double left = o->until > 0 ? o->until - now_s() : 0;
  if (o->until > 0 && left * 1000 < (double)tmo_ms)
    tmo_ms = left > 0.001 ? (long)(left * 1000) : 1;
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, tmo_ms);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, o->stall_timeout_s);
  long code = 0;
  int rc = 0;
  CURLcode cr = o->until > 0 && left <= 0
                    ? CURLE_OPERATION_TIMEDOUT
                    : perform(h, o, url, url, NULL, err, &code);
  if (cr == CURLE_OPERATION_TIMEDOUT && o->until > 0 && o->until <= now_s())
    rc = gf_diag_set(d, GF_ELIMIT,
                     "%.200s: the resolution is not done after the fetch's "
                     "deadline of %ld s (model_fetch_deadline_s, --deadline)",
                     url, o->deadline_s);
  else if (gf__buf_error(&b.b) == GF_ELIMIT)
    rc = gf_diag_set(d, GF_ELIMIT,
                     "%.200s: the answer is larger than %zu "
                     "bytes",
                     url, max);
  else if (cr == CURLE_HTTP_RETURNED_ERROR && code)
    rc = gf_diag_set(d, GF_EHTTP, "%.200s: HTTP status %ld%s", url, code,
                     code == 401 || code == 403
                         ? " (no access: a private or gated repository needs "
                           "the hub token, model_hf_token_file)"
                         : "");
  else if (cr != CURLE_OK)
    rc = gf_diag_set(d, GF_EHTTP, "%.200s: %s", url,
                     err[0] ? err : curl_easy_strerror(cr));
  else if (code != 200)
    rc = gf_diag_set(d, GF_EHTTP, "%.200s: HTTP status %ld", url, code);
  if (!rc)
    rc = mem_take(&b, out, len, d);
  gf__buf_release(&b.b);
  if (!conn)
    curl_easy_cleanup(h);
  return rc;
}

/* ---- the files --------------------------------------------------------- */

typedef struct job {
  const char *source, *name, *dir;
  const char *redir_allow; /* a pod's source: where redirects may go */
  const gf_node_cache_manifest *m;
  const gf__mc_opts *o;
  uint64_t *fetched;
  const int *cancel;
  pthread_mutex_t mu;
  size_t next; /* the queue: files[next..] not yet taken */
  int rc;      /* the first failure */
  gf_diag d;
  int abort;    /* atomic: stop every transfer */
  uint64_t got; /* atomic: bytes on disk, all files */
  double last_log, start;
  uint64_t progress; /* atomic: bytes received or found on disk */
  int limited;       /* atomic: the deadline or the minimum rate hit */
  char limit_msg[256];
  bool local;      /* a file:// source, read beneath root */
  char root[4096]; /* file://: the directory nothing is read outside */
  char base[4096]; /* file://: the source's directory under root */
} job;

/* One try at one file. */
typedef struct xfer {
  job *j;
  CURL *h; /* a redirect's body is discarded; NULL: file:// */
  int fd;
  uint64_t off, size; /* where this try starts; the manifest's size */
  uint64_t at;        /* bytes of the file on disk now */
  EVP_MD_CTX *ctx;
  bool too_long, io_error, stalled, no_space;
  uint64_t unchecked; /* bytes written since the last free-space check */
  curl_off_t last_dn; /* bytes received when last seen moving */
  double last_t;
} xfer;

static size_t file_write(char *data, size_t sz, size_t nm, void *user) {
  xfer *x = user;
  size_t k = sz * nm;
  if (x->h && in_redirect(x->h))
    return k;
  if (k > x->size - x->at) {
    x->too_long = true;
    return 0;
  }
  for (size_t w = 0; w < k;) {
    ssize_t r = write(x->fd, data + w, k - w);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      x->io_error = true;
      return 0;
    }
    w += (size_t)r;
  }
  EVP_DigestUpdate(x->ctx, data, k);
  x->at += k;
  /* The disk is usually kubelet's too: stop before it fills (every 8 MiB
   * written, a statvfs). */
  x->unchecked += k;
  if (x->j->o->keep_free && x->unchecked >= (8u << 20)) {
    uint64_t fr = 0, tot = 0;
    x->unchecked = 0;
    if (gf__mc_fs_space(x->j->dir, &fr, &tot) == 0 && fr < x->j->o->keep_free) {
      x->no_space = true;
      return 0;
    }
  }
  __atomic_add_fetch(x->j->fetched, k, __ATOMIC_RELAXED);
  __atomic_add_fetch(&x->j->progress, k, __ATOMIC_RELAXED);
  __atomic_add_fetch(&x->j->got, k, __ATOMIC_RELAXED);
  return k;
}

/* Whether the job passed its deadline or averages under its minimum rate
 * at time t (the first to notice says which, in j->limit_msg). */
static bool over_limit(job *j, double t) {
  if (__atomic_load_n(&j->limited, __ATOMIC_ACQUIRE))
    return true;
  double el = t - j->start;
  uint64_t done = __atomic_load_n(&j->progress, __ATOMIC_RELAXED);
  char why[256] = "";
  if (j->o->deadline_s > 0 && el >= (double)j->o->deadline_s)
    snprintf(why, sizeof(why),
             "model %s: the fetch is not done after its deadline of %ld s "
             "(model_fetch_deadline_s)",
             j->name, j->o->deadline_s);
  else if (j->o->min_rate > 0 && el >= (double)j->o->min_rate_after_s &&
           el > 0 && (double)done / el < (double)j->o->min_rate)
    snprintf(why, sizeof(why),
             "model %s: the fetch averaged %.0f bytes/s over %.0f s, under "
             "the minimum of %" PRIu64 " (model_fetch_min_rate)",
             j->name, (double)done / el, el, j->o->min_rate);
  if (!why[0])
    return false;
  pthread_mutex_lock(&j->mu);
  if (!j->limited) {
    memcpy(j->limit_msg, why, sizeof(why));
    __atomic_store_n(&j->limited, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&j->mu);
  return true;
}

static int file_progress(void *user, curl_off_t dt, curl_off_t dn,
                         curl_off_t ut, curl_off_t un) {
  (void)dt;
  (void)ut;
  (void)un;
  xfer *x = user;
  job *j = x->j;
  if (__atomic_load_n(&j->abort, __ATOMIC_RELAXED) ||
      __atomic_load_n(j->cancel, __ATOMIC_RELAXED))
    return 1;
  double t = now_s();
  if (over_limit(j, t))
    return 1;
  /* The stall timeout, measured here: libcurl's low-speed check averages
   * over several seconds and so fires late. */
  if (dn != x->last_dn) {
    x->last_dn = dn;
    x->last_t = t;
  } else if (t - x->last_t >= (double)j->o->stall_timeout_s) {
    x->stalled = true;
    return 1;
  }
  pthread_mutex_lock(&j->mu);
  bool log = t - j->last_log >= (double)j->o->progress_s;
  if (log)
    j->last_log = t;
  pthread_mutex_unlock(&j->mu);
  if (log) {
    uint64_t got = __atomic_load_n(&j->got, __ATOMIC_RELAXED);
    double el = t - j->start;
    gf__mc_log(j->o,
               "model %s: %" PRIu64 " of %" PRIu64 " bytes (%.0f%%), "
               "%.1f MB/s",
               j->name, got, j->m->bytes,
               j->m->bytes ? 100.0 * (double)got / (double)j->m->bytes : 100.0,
               el > 0 ? (double)got / el / 1e6 : 0.0);
  }
  return 0;
}

/* Hashes the first `len` bytes of fd into ctx. */
static int hash_prefix(int fd, uint64_t len, EVP_MD_CTX *ctx) {
  static const size_t chunk = 1u << 20;
  char *buf = gf__malloc(chunk);
  if (!buf)
    return GF_ENOMEM;
  uint64_t at = 0;
  int rc = 0;
  while (at < len) {
    size_t want = len - at < chunk ? (size_t)(len - at) : chunk;
    ssize_t r = pread(fd, buf, want, (off_t)at);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      rc = GF_EIO;
      break;
    }
    EVP_DigestUpdate(ctx, buf, (size_t)r);
    at += (uint64_t)r;
  }
  gf__free(buf);
  return rc;
}

/* mkdir -p of the directories of <files>/<rel>. */
static int parent_dirs(const char *files, const char *rel, gf_diag *d) {
  char p[8192];
  int n = snprintf(p, sizeof(p), "%s/%s", files, rel);
  if (n < 0 || (size_t)n >= sizeof(p))
    return gf_diag_set(d, GF_ELIMIT, "%s/%s: path too long", files, rel);
  char *sl = strrchr(p, '/');
  *sl = '\0';
  return gf__node_mkdirs(p, 0755, d);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

/* Copies a file:// source's file from x->off into x (as libcurl would
 * have): CURLE_OK at its end, CURLE_WRITE_ERROR when file_write refused
 * (too long, disk), CURLE_ABORTED_BY_CALLBACK when the job stops,
 * CURLE_READ_ERROR. */
static CURLcode local_copy(int sfd, xfer *x) {
  static const size_t chunk = 1u << 20;
  char *buf = gf__malloc(chunk);
  if (!buf)
    return CURLE_OUT_OF_MEMORY;
  CURLcode cr = CURLE_OK;
  uint64_t at = x->off;
  for (;;) {
    if (file_progress(x, 0, (curl_off_t)(at - x->off), 0, 0)) {
      cr = CURLE_ABORTED_BY_CALLBACK;
      break;
    }
    ssize_t r = pread(sfd, buf, chunk, (off_t)at);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      cr = CURLE_READ_ERROR;
      break;
    }
    if (r == 0)
      break;
    if (file_write(buf, 1, (size_t)r, x) != (size_t)r) {
      cr = CURLE_WRITE_ERROR;
      break;
    }
    at += (uint64_t)r;
  }
  gf__free(buf);
  return cr;
}

/* Whether a try that ended so may pass another time (a dropped
 * connection, a stall, a server error, a short answer); not a 4xx, a
 * missing file:// file or a short file:// source. */
static bool retriable(bool http_err, long code, CURLcode cr, bool is_file) {
  if (http_err)
    return code >= 500 || code == 429 || code == 416;
  if (cr != CURLE_OK)
    return cr != CURLE_REMOTE_FILE_NOT_FOUND &&
           cr != CURLE_FILE_COULDNT_READ_FILE &&
           cr != CURLE_UNSUPPORTED_PROTOCOL && cr != CURLE_URL_MALFORMAT;
  return !is_file;
}

/* A file given up on after `tries` tries, the last one ending so. */
static int gave_up(const char *url, bool http_err, long code, CURLcode cr,
                   const char *err, unsigned tries, uint64_t at, uint64_t size,
                   gf_diag *d) {
  const char *word = tries == 1 ? "try" : "tries";
  if (http_err)
    return gf_diag_set(d, GF_EHTTP, "%s: HTTP status %ld (after %u %s)", url,
                       code, tries, word);
  if (cr != CURLE_OK)
    return gf_diag_set(d, GF_EHTTP, "%s: %s (after %u %s)", url,
                       err[0] ? err : curl_easy_strerror(cr), tries, word);
  return gf_diag_set(d, GF_EIO,
                     "%s: %" PRIu64 " bytes, the manifest says %" PRIu64, url,
                     at, size);
}

/* Fetches file f of the job: tries until it is whole and verified. */
static int fetch_one(job *j, CURL *h, const gf_node_cache_file *f, gf_diag *d) {
  char files[4096], fin[8192], part[8192];
  snprintf(files, sizeof(files), "%s/files", j->dir);
  int rc = parent_dirs(files, f->path, d);
  if (rc)
    return rc;
  snprintf(fin, sizeof(fin), "%s/%s", files, f->path);
  if (snprintf(part, sizeof(part), "%s.part", fin) >= (int)sizeof(part))
    return gf_diag_set(d, GF_ELIMIT, "%s: path too long", fin);

  /* Verified in an earlier run of this fetch: checked again, cheaply
   * compared to a download. */
  struct stat st;
  if (lstat(fin, &st) == 0) {
    char hex[GF_NODE_CACHE_HEX];
    uint64_t size = 0;
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size == f->size &&
        gf__mc_hash_file(fin, &size, hex, NULL) == 0 && size == f->size &&
        !strcmp(hex, f->hex)) {
      __atomic_add_fetch(&j->got, size, __ATOMIC_RELAXED);
      __atomic_add_fetch(&j->progress, size, __ATOMIC_RELAXED);
      return 0;
    }
    chmod(fin, 0644);
    unlink(fin);
  }

  char *url = file_url(h, j->source, f->path);
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (!url || !ctx) {
    rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
    goto out;
  }
  bool fresh_after_mismatch = false;
  /* Tries in a row that received nothing: a try that got bytes resets it
   * (and the backoff), so a source that drops the connection every few MB
   * is followed to the end; the deadline and the minimum rate bound it. */
  unsigned fails = 0;
  for (unsigned attempt = 0;; attempt++) {
    if (over_limit(j, now_s())) {
      rc = gf_diag_set(d, GF_ELIMIT, "%s", j->limit_msg);
      goto out;
    }
    int fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
      rc = gf_diag_set(d, GF_EIO, "%s: %s", part, strerror(errno));
      goto out;
    }
    uint64_t have = 0;
    if (fstat(fd, &st) == 0)
      have = (uint64_t)st.st_size;
    if (have > f->size) {
      if (ftruncate(fd, 0) != 0) {
        close(fd);
        rc = gf_diag_set(d, GF_EIO, "%s: %s", part, strerror(errno));
        goto out;
      }
      have = 0;
    }
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    if (have && hash_prefix(fd, have, ctx) != 0) {
      close(fd);
      rc = gf_diag_set(d, GF_EIO, "%s: cannot read back", part);
      goto out;
    }
    lseek(fd, (off_t)have, SEEK_SET);
    __atomic_add_fetch(&j->got, have, __ATOMIC_RELAXED);
    __atomic_add_fetch(&j->progress, have, __ATOMIC_RELAXED);
    xfer x = {.j = j,
              .fd = fd,
              .off = have,
              .size = f->size,
              .at = have,
              .ctx = ctx,
              .last_t = now_s()};
    char err[CURL_ERROR_SIZE] = "";
    CURLcode cr = CURLE_OK;
    long code = 0;
    if (j->local && (have < f->size || f->size == 0)) {
      int sfd = -1;
      rc = local_open(j->root, j->base, f->path, &sfd, d);
      if (rc) {
        close(fd);
        goto out;
      }
      cr = local_copy(sfd, &x);
      close(sfd);
    } else if (have < f->size || f->size == 0) {
      curl_easy_reset(h);
      common_opts(h, j->o);
      curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
      curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, file_write);
      curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
      curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, file_progress);
      curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
      curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(h, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)have);
      x.h = h;
      cr = perform(h, j->o, j->source, url, j->redir_allow, err, &code);
    }
    uint64_t at = x.at;
    __atomic_sub_fetch(&j->got, at, __ATOMIC_RELAXED);
    bool is_file = strncmp(url, "file:", 5) == 0;
    bool http_err = cr == CURLE_HTTP_RETURNED_ERROR;
    if (x.stalled)
      snprintf(err, sizeof(err), "no byte for %ld s", j->o->stall_timeout_s);
    if (__atomic_load_n(&j->limited, __ATOMIC_ACQUIRE)) {
      close(fd); /* the part stays: an operator's fetch resumes it */
      rc = gf_diag_set(d, GF_ELIMIT, "%s", j->limit_msg);
      goto out;
    }
    if (!x.stalled && __atomic_load_n(j->cancel, __ATOMIC_RELAXED)) {
      close(fd);
      rc =
          gf_diag_set(d, GF_ESTATE, "%s: stopped (the agent is stopping)", url);
      goto out;
    }
    if (!x.stalled && __atomic_load_n(&j->abort, __ATOMIC_RELAXED)) {
      close(fd);
      rc = gf_diag_set(d, GF_EIO, "%s: stopped (another file failed)", url);
      goto out;
    }
    if (x.no_space) {
      close(fd); /* the part stays for a try once there is room */
      rc = gf_diag_set(d, GF_ENOFIT,
                       "%s: stopped at byte %" PRIu64
                       ": the cache's filesystem is down to its last %" PRIu64
                       " free bytes (kept free for the node)",
                       f->path, x.at, j->o->keep_free);
      __atomic_store_n(&j->abort, 1, __ATOMIC_RELAXED);
      goto out;
    }
    if (x.io_error) {
      close(fd);
      rc = gf_diag_set(d, GF_EIO, "%s: %s", part, strerror(errno));
      goto out;
    }
    if (x.too_long) {
      close(fd);
      unlink(part);
      rc = gf_diag_set(d, GF_EIO,
                       "%s: the source sent more than the manifest's %" PRIu64
                       " bytes",
                       url, f->size);
      goto out;
    }
    /* whole: the transfer ended well (an empty file answered 404 is not
     * fetched), or it was already whole and nothing was asked */
    if (at == f->size && cr == CURLE_OK) {
      unsigned char md[EVP_MAX_MD_SIZE];
      unsigned mdn = 0;
      char hex[GF_NODE_CACHE_HEX];
      EVP_DigestFinal_ex(ctx, md, &mdn);
      gf__mc_to_hex(md, mdn, hex);
      if (strcmp(hex, f->hex) != 0) {
        close(fd);
        unlink(part);
        /* A resumed prefix may be what is wrong: one fresh try. */
        if (have > 0 && !fresh_after_mismatch) {
          fresh_after_mismatch = true;
          continue;
        }
        rc = gf_diag_set(d, GF_EIO,
                         "%s: sha256 %s, the manifest says %s (deleted)", url,
                         hex, f->hex);
        goto out;
      }
      if (fsync(fd) != 0 || fchmod(fd, 0444) != 0) {
        close(fd);
        rc = gf_diag_set(d, GF_EIO, "%s: %s", part, strerror(errno));
        goto out;
      }
      close(fd);
      if (rename(part, fin) != 0) {
        rc = gf_diag_set(d, GF_EIO, "rename %s: %s", part, strerror(errno));
        goto out;
      }
      __atomic_add_fetch(&j->got, f->size, __ATOMIC_RELAXED);
      rc = 0;
      goto out;
    }
    close(fd);
    /* Not whole: retry what may pass */
    bool retry = retriable(http_err, code, cr, is_file);
    if ((http_err && code == 416) || cr == CURLE_RANGE_ERROR) {
      /* Our part does not fit this source (416), or the source cannot
       * resume (answered a Range with the whole file): start over. */
      unlink(part);
      retry = true;
    }
    fails = at > have ? 0 : fails + 1;
    if (!retry || fails > j->o->retries) {
      rc = gave_up(url, http_err, code, cr, err, attempt + 1, at, f->size, d);
      goto out;
    }
    /* The try to come, and the most there can be: this one's number
     * and as many more as may still get no byte (--retries after one
     * that got none; bytes received reset it, raising the most). */
    gf__mc_log(j->o,
               "model %s: %s: %s at byte %" PRIu64
               ", resuming (try %u of at most %u)",
               j->name, f->path,
               err[0] ? err
               : cr   ? curl_easy_strerror(cr)
                      : "short",
               at, attempt + 2, attempt + 1 + j->o->retries + 1 - fails);
    /* 0.2 s after a try that got bytes; else 0.5 s doubling to 8 s */
    sleep_ms(!fails ? 200L : 500L << (fails > 5 ? 4 : fails - 1));
  }
out:
  EVP_MD_CTX_free(ctx);
  gf__free(url);
  return rc;
}

static void *worker(void *arg) {
  job *j = arg;
  CURL *h = curl_easy_init();
  for (;;) {
    pthread_mutex_lock(&j->mu);
    size_t i = j->next;
    bool stop = j->rc != 0 || i >= j->m->n;
    if (!stop)
      j->next++;
    if (!h && !j->rc) {
      j->rc = gf_diag_set(&j->d, GF_ENOMEM, "libcurl: no handle");
      stop = true;
    }
    pthread_mutex_unlock(&j->mu);
    if (stop)
      break;
    gf_diag d = {{0}};
    int rc = fetch_one(j, h, &j->m->files[i], &d);
    if (rc) {
      pthread_mutex_lock(&j->mu);
      if (!j->rc) {
        j->rc = rc;
        j->d = d;
      }
      pthread_mutex_unlock(&j->mu);
      __atomic_store_n(&j->abort, 1, __ATOMIC_RELAXED);
    }
  }
  if (h)
    curl_easy_cleanup(h);
  return NULL;
}

int gf__mc_fetch_files(const char *source, const char *beneath,
                       const char *redir_allow, const char *name,
                       const char *dir, const gf_node_cache_manifest *m,
                       const gf__mc_opts *o, uint64_t *fetched,
                       const int *cancel, gf_diag *d) {
  pthread_once(&g_curl_once, curl_init_once);
  if (g_curl_rc != CURLE_OK)
    return gf_diag_set(d, GF_EHTTP, "libcurl: %s",
                       curl_easy_strerror(g_curl_rc));
  job j = {.source = source,
           .redir_allow = redir_allow,
           .name = name,
           .dir = dir,
           .m = m,
           .o = o,
           .fetched = fetched,
           .cancel = cancel};
  if (strncmp(source, "file:", 5) == 0) {
    j.local = true;
    if (gf__mc_local_split(source, beneath, j.root, sizeof(j.root), j.base,
                           sizeof(j.base)))
      return gf_diag_set(d, GF_EINVAL, "%s: not a file:// path under %s",
                         source, beneath ? beneath : "itself");
  }
  pthread_mutex_init(&j.mu, NULL);
  j.start = j.last_log = now_s();
  unsigned nt = o->parallel;
  if (nt > m->n)
    nt = m->n ? (unsigned)m->n : 1;
  pthread_t th[64];
  unsigned started = 0;
  for (; started < nt; started++)
    if (pthread_create(&th[started], NULL, worker, &j) != 0)
      break;
  if (started == 0)
    worker(&j);
  for (unsigned i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  pthread_mutex_destroy(&j.mu);
  if (j.rc && d)
    *d = j.d;
  return j.rc;
}
