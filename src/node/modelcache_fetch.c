/*
 * The weight cache's downloads (modelcache_int.h): libcurl easy handles on
 * a few threads taking files from a shared queue; each file resumed from its
 * .part with a Range (CURLOPT_RESUME_FROM_LARGE, which libcurl also honours
 * for file://), hashed as it arrives, checked against the manifest's size
 * and sha256 and only then renamed into place.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "modelcache_int.h"
#include "node_int.h"

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
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https,file");
  /* a redirect never leaves TLS: a plain-http hop is how a source reaches
   * an instance metadata service or a node port */
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "https");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, o->connect_timeout_s);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "gpufrac-node-cache");
  /* No error page ever lands in a file: a status >= 400 ends the
   * transfer (CURLE_HTTP_RETURNED_ERROR) before its body. */
  curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
}

/* ---- the manifest ------------------------------------------------------ */

typedef struct membuf {
  char *p;
  size_t n, cap, max;
  bool over;
} membuf;

static size_t mem_write(char *data, size_t sz, size_t nm, void *user) {
  membuf *b = user;
  size_t k = sz * nm;
  if (b->n + k > b->max) {
    b->over = true;
    return 0;
  }
  if (b->n + k + 1 > b->cap) {
    size_t ncap = b->cap ? b->cap : 4096;
    while (ncap < b->n + k + 1)
      ncap *= 2;
    char *np = gf__realloc(b->p, ncap);
    if (!np)
      return 0;
    b->p = np;
    b->cap = ncap;
  }
  memcpy(b->p + b->n, data, k);
  b->n += k;
  b->p[b->n] = '\0';
  return k;
}

int gf__mc_get_manifest(const char *source, const gf__mc_opts *o, char **out,
                        size_t *len, gf_diag *d) {
  *out = NULL;
  *len = 0;
  pthread_once(&g_curl_once, curl_init_once);
  if (g_curl_rc != CURLE_OK)
    return gf_diag_set(d, GF_EHTTP, "libcurl: %s",
                       curl_easy_strerror(g_curl_rc));
  CURL *h = curl_easy_init();
  if (!h)
    return gf_diag_set(d, GF_ENOMEM, "libcurl: no handle");
  int rc = 0;
  membuf b = {.max = GF_NODE_CACHE_MANIFEST_MAX};
  char *url = file_url(h, source, GF_NODE_CACHE_MANIFEST);
  if (!url) {
    rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
    goto out;
  }
  char err[CURL_ERROR_SIZE] = "";
  common_opts(h, o);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mem_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(h, CURLOPT_TIMEOUT, o->stall_timeout_s * 4);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, o->stall_timeout_s);
  CURLcode cr = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  if (b.over)
    rc = gf_diag_set(d, GF_ELIMIT, "%s: larger than %u bytes", url,
                     GF_NODE_CACHE_MANIFEST_MAX);
  else if (cr != CURLE_OK)
    rc = gf_diag_set(d, GF_EHTTP, "%s: %s", url,
                     err[0] ? err : curl_easy_strerror(cr));
  else if (strncmp(url, "file:", 5) != 0 && code != 200)
    rc = gf_diag_set(d, GF_EHTTP, "%s: HTTP status %ld", url, code);
  if (!rc) {
    *out = b.p ? b.p : gf__calloc(1, 1);
    *len = b.n;
    b.p = NULL;
    if (!*out)
      rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
  }
out:
  gf__free(b.p);
  gf__free(url);
  curl_easy_cleanup(h);
  return rc;
}

/* ---- the files --------------------------------------------------------- */

typedef struct job {
  const char *source, *name, *dir;
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
} job;

/* One try at one file. */
typedef struct xfer {
  job *j;
  int fd;
  uint64_t off, size; /* where this try starts; the manifest's size */
  uint64_t at;        /* bytes of the file on disk now */
  EVP_MD_CTX *ctx;
  bool too_long, io_error, stalled;
  curl_off_t last_dn; /* bytes received when last seen moving */
  double last_t;
} xfer;

static size_t file_write(char *data, size_t sz, size_t nm, void *user) {
  xfer *x = user;
  size_t k = sz * nm;
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
  __atomic_add_fetch(x->j->fetched, k, __ATOMIC_RELAXED);
  __atomic_add_fetch(&x->j->got, k, __ATOMIC_RELAXED);
  return k;
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
  for (unsigned attempt = 0;; attempt++) {
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
    if (have < f->size || f->size == 0) {
      curl_easy_reset(h);
      common_opts(h, j->o);
      curl_easy_setopt(h, CURLOPT_URL, url);
      curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
      curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, file_write);
      curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
      curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, file_progress);
      curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
      curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(h, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)have);
      cr = curl_easy_perform(h);
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    }
    uint64_t at = x.at;
    __atomic_sub_fetch(&j->got, at, __ATOMIC_RELAXED);
    bool is_file = strncmp(url, "file:", 5) == 0;
    bool http_err = cr == CURLE_HTTP_RETURNED_ERROR;
    if (x.stalled)
      snprintf(err, sizeof(err), "no byte for %ld s", j->o->stall_timeout_s);
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
    if (at == f->size && (cr == CURLE_OK || have == f->size)) {
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
    /* Not whole: retry what may pass (a dropped connection, a stall, a
     * server error, a short answer); not a 4xx, a missing file:// file or
     * a short file:// source. */
    bool retry;
    if (http_err)
      retry = code >= 500 || code == 429 || code == 416;
    else if (cr != CURLE_OK)
      retry = cr != CURLE_REMOTE_FILE_NOT_FOUND &&
              cr != CURLE_FILE_COULDNT_READ_FILE &&
              cr != CURLE_UNSUPPORTED_PROTOCOL && cr != CURLE_URL_MALFORMAT;
    else
      retry = !is_file;
    if ((http_err && code == 416) || cr == CURLE_RANGE_ERROR) {
      /* Our part does not fit this source (416), or the source cannot
       * resume (answered a Range with the whole file): start over. */
      unlink(part);
      retry = true;
    }
    if (!retry || attempt >= j->o->retries) {
      if (http_err)
        rc = gf_diag_set(d, GF_EHTTP, "%s: HTTP status %ld (after %u tries)",
                         url, code, attempt + 1);
      else if (cr != CURLE_OK)
        rc = gf_diag_set(d, GF_EHTTP, "%s: %s (after %u tries)", url,
                         err[0] ? err : curl_easy_strerror(cr), attempt + 1);
      else
        rc = gf_diag_set(d, GF_EIO,
                         "%s: %" PRIu64 " bytes, the manifest says %" PRIu64,
                         url, at, f->size);
      goto out;
    }
    gf__mc_log(j->o,
               "model %s: %s: %s at byte %" PRIu64 ", resuming (try "
               "%u of %u)",
               j->name, f->path,
               err[0] ? err
               : cr   ? curl_easy_strerror(cr)
                      : "short",
               at, attempt + 2, j->o->retries + 1);
    sleep_ms(100L << (attempt < 5 ? attempt : 5));
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

int gf__mc_fetch_files(const char *source, const char *name, const char *dir,
                       const gf_node_cache_manifest *m, const gf__mc_opts *o,
                       uint64_t *fetched, const int *cancel, gf_diag *d) {
  pthread_once(&g_curl_once, curl_init_once);
  if (g_curl_rc != CURLE_OK)
    return gf_diag_set(d, GF_EHTTP, "libcurl: %s",
                       curl_easy_strerror(g_curl_rc));
  job j = {.source = source,
           .name = name,
           .dir = dir,
           .m = m,
           .o = o,
           .fetched = fetched,
           .cancel = cancel};
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
