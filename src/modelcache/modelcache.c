/*
 * The node-local weight cache's store (modelcache.h, docs/modelcache.md):
 * manifests and their digest, the on-disk layout, the state file, recovery,
 * LRU eviction over the budget with pins, single flight.  The downloads
 * themselves are in modelcache_fetch.c.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "buf.h"
#include "gpufrac/error.h"
#include "gpufrac/node.h"
#include "gpufrac/quantity.h"
#include "modelcache_int.h"
#include "node_util.h"
#include "prom.h"

#define STATE_FILE "state.json"
/* Owners (entry.ns) that are no namespace (a namespace name is a DNS
 * label: it never starts with '-'): a model whose owner is not known
 * (adopted from the directories), and the requests of callers that name no
 * namespace (gf_node_cache_fetch_for_pod). */
#define GF_NODE_CACHE_NS_MAX 64
#define GF_NODE_CACHE_NS_NOBODY "-"
#define NS_UNNAMED "-unnamed"
#define STATE_MAX (64u << 20)
#define INVENTORY_MODELS 64

/* ---- digests ----------------------------------------------------------- */

void gf_node_cache_sha256_hex(const void *buf, size_t len,
                              char hex[GF_NODE_CACHE_HEX]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_Digest(buf, len, md, &n, EVP_sha256(), NULL);
  gf__mc_to_hex(md, n, hex);
}

static bool is_hex64(const char *s, size_t n) {
  if (n != 64)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return false;
  return true;
}

/* ---- manifests --------------------------------------------------------- */

static int cmp_path(const void *a, const void *b) {
  return strcmp(((const gf_node_cache_file *)a)->path,
                ((const gf_node_cache_file *)b)->path);
}

/* A path that is also another's directory ("a" and "a/b"), on m's paths
 * (sorted, no duplicates) in time linear in their total length.  If file P
 * is the directory of Q, every path sorted between them starts with P
 * (one that did not would differ from P at a byte where it is greater, and
 * so sort after Q too); so the paths that are prefixes of the current one
 * form a chain on a stack, popped as the walk leaves them, and only its top
 * needs comparing: a shorter P whose '/' follows in Q would be the
 * directory of the top too, found when the top was pushed.  Each path is
 * pushed and popped once, each comparison costs at most the shorter
 * path's length.  GF_ESYNTAX naming both; GF_ENOMEM. */
static int dir_conflicts(const gf_node_cache_manifest *m, gf_diag *d) {
  size_t *st = m->n ? gf__malloc(m->n * sizeof(*st)) : NULL;
  if (m->n && !st)
    return gf_diag_set(d, GF_ENOMEM, "manifest: out of memory");
  size_t top = 0;
  int rc = 0;
  for (size_t i = 0; i < m->n && !rc; i++) {
    const char *q = m->files[i].path;
    size_t ql = strlen(q);
    while (top > 0) {
      const char *p = m->files[st[top - 1]].path;
      size_t pl = strlen(p);
      if (pl < ql && memcmp(p, q, pl) == 0) {
        if (q[pl] == '/')
          rc = gf_diag_set(d, GF_ESYNTAX,
                           "manifest: '%s' is a file and the directory of "
                           "'%s'",
                           p, q);
        break;
      }
      top--;
    }
    st[top++] = i;
  }
  gf__free(st);
  return rc;
}

void gf_node_cache_manifest_release(gf_node_cache_manifest *m) {
  if (!m)
    return;
  for (size_t i = 0; i < m->n; i++)
    gf__free(m->files[i].path);
  gf__free(m->files);
  memset(m, 0, sizeof(*m));
}

int gf_node_cache_manifest_parse(const char *text, size_t len,
                                 gf_node_cache_manifest *m, gf_diag *d) {
  memset(m, 0, sizeof(*m));
  int rc = 0;
  size_t cap = 0, line = 0, pos = 0;
  if (len > GF_NODE_CACHE_MANIFEST_MAX)
    return gf_diag_set(d, GF_ELIMIT, "manifest: larger than %u bytes",
                       GF_NODE_CACHE_MANIFEST_MAX);
  if (len > 0 && text[len - 1] != '\n')
    return gf_diag_set(d, GF_ESYNTAX, "manifest: no newline at the end");
  while (pos < len) {
    line++;
    const char *l = text + pos;
    const char *nl = memchr(l, '\n', len - pos);
    size_t ll = (size_t)(nl - l);
    pos += ll + 1;
    const char *t1 = memchr(l, '\t', ll);
    const char *t2 =
        t1 ? memchr(t1 + 1, '\t', ll - (size_t)(t1 + 1 - l)) : NULL;
    if (!t1 || !t2) {
      rc = gf_diag_set(d, GF_ESYNTAX,
                       "manifest:%zu: not <path>\\t<size>\\t<sha256>", line);
      goto fail;
    }
    size_t pl = (size_t)(t1 - l);
    const char *why = gf__mc_path_problem(l, pl);
    if (!why && memchr(l, '\0', pl))
      why = "a NUL byte in the path";
    if (why) {
      rc = gf_diag_set(d, GF_ESYNTAX, "manifest:%zu: %s", line, why);
      goto fail;
    }
    const char *s = t1 + 1;
    size_t sl = (size_t)(t2 - s);
    uint64_t size = 0;
    if (sl == 0 || sl > 20 || (sl > 1 && s[0] == '0')) {
      rc = gf_diag_set(d, GF_ESYNTAX,
                       "manifest:%zu: size '%.*s' is not a "
                       "decimal byte count",
                       line, (int)(sl > 24 ? 24 : sl), s);
      goto fail;
    }
    for (size_t i = 0; i < sl; i++) {
      if (s[i] < '0' || s[i] > '9' ||
          size > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10) {
        rc = gf_diag_set(d, GF_ESYNTAX,
                         "manifest:%zu: size '%.*s' is not a decimal byte "
                         "count below 2^64",
                         line, (int)sl, s);
        goto fail;
      }
      size = size * 10 + (uint64_t)(s[i] - '0');
    }
    const char *h = t2 + 1;
    size_t hl = ll - (size_t)(h - l);
    if (!is_hex64(h, hl)) {
      rc = gf_diag_set(d, GF_ESYNTAX,
                       "manifest:%zu: the sha256 is not 64 lowercase hex "
                       "digits",
                       line);
      goto fail;
    }
    if (m->n > 0) {
      const char *prev = m->files[m->n - 1].path;
      size_t prevl = strlen(prev);
      int c = memcmp(prev, l, prevl < pl ? prevl : pl);
      if (c > 0 || (c == 0 && prevl >= pl)) {
        rc = gf_diag_set(d, GF_ESYNTAX, "manifest:%zu: path '%.*s' %s", line,
                         (int)pl, l,
                         c == 0 && prevl == pl ? "appears twice"
                                               : "is not sorted after the "
                                                 "line before (bytewise)");
        goto fail;
      }
    }
    if (m->n >= GF_NODE_CACHE_FILES_MAX) {
      rc = gf_diag_set(d, GF_ELIMIT, "manifest: more than %d files",
                       GF_NODE_CACHE_FILES_MAX);
      goto fail;
    }
    if (size > UINT64_MAX - m->bytes) {
      rc = gf_diag_set(d, GF_ESYNTAX, "manifest:%zu: sizes add up past 2^64",
                       line);
      goto fail;
    }
    if (m->n == cap) {
      size_t ncap = cap ? cap * 2 : 16;
      gf_node_cache_file *nf = gf__realloc(m->files, ncap * sizeof(*nf));
      if (!nf) {
        rc = gf_diag_set(d, GF_ENOMEM, "manifest: out of memory");
        goto fail;
      }
      m->files = nf;
      cap = ncap;
    }
    gf_node_cache_file *f = &m->files[m->n];
    f->path = gf__malloc(pl + 1);
    if (!f->path) {
      rc = gf_diag_set(d, GF_ENOMEM, "manifest: out of memory");
      goto fail;
    }
    memcpy(f->path, l, pl);
    f->path[pl] = '\0';
    f->size = size;
    memcpy(f->hex, h, 64);
    f->hex[64] = '\0';
    m->bytes += size;
    m->n++;
  }
  rc = dir_conflicts(m, d);
  if (rc)
    goto fail;
  gf_node_cache_sha256_hex(text, len, m->hex);
  return 0;
fail:
  gf_node_cache_manifest_release(m);
  return rc;
}

int gf_node_cache_ref_parse(const char *ref, char *name, size_t cap,
                            char hex[GF_NODE_CACHE_HEX], gf_diag *d) {
  const char *at = strrchr(ref, '@');
  if (!at)
    return gf_diag_set(d, GF_ESYNTAX, "model '%s': not <name>@sha256:<64 hex>",
                       ref);
  size_t nl = (size_t)(at - ref);
  char tmp[GF_NODE_CACHE_NAME_MAX];
  if (nl == 0 || nl >= sizeof(tmp) || nl >= cap)
    return gf_diag_set(d, GF_ESYNTAX,
                       "model '%s': the name is empty or "
                       "longer than %d bytes",
                       ref, GF_NODE_CACHE_NAME_MAX - 1);
  memcpy(tmp, ref, nl);
  tmp[nl] = '\0';
  if (!gf_node_safe_name(tmp))
    return gf_diag_set(d, GF_ESYNTAX,
                       "model '%s': the name may hold only "
                       "letters, digits, '.', '_', '-'",
                       ref);
  if (strncmp(at + 1, "sha256:", 7) != 0 || !is_hex64(at + 8, strlen(at + 8)))
    return gf_diag_set(d, GF_ESYNTAX,
                       "model '%s': the digest is not sha256:<64 lowercase "
                       "hex>",
                       ref);
  memcpy(name, tmp, nl + 1);
  memcpy(hex, at + 8, 65);
  return 0;
}

/* ---- building a manifest from a directory ------------------------------ */

typedef struct build_ctx {
  const char *root;
  size_t rootlen;
  gf_node_cache_file *files;
  size_t n, cap;
  int rc;
  gf_diag *d;
} build_ctx;

static build_ctx *g_build; /* nftw has no user pointer; guarded below */
static pthread_mutex_t g_build_mu = PTHREAD_MUTEX_INITIALIZER;

static int build_visit(const char *path, const struct stat *st, int type,
                       struct FTW *ftw) {
  (void)ftw;
  build_ctx *b = g_build;
  if (type == FTW_D || type == FTW_DP)
    return 0;
  if (type == FTW_SL || type == FTW_SLN) {
    b->rc = gf_diag_set(b->d, GF_EINVAL, "%s: a symlink (not followed)", path);
    return 1;
  }
  if (type != FTW_F || !S_ISREG(st->st_mode)) {
    b->rc = gf_diag_set(b->d, GF_EINVAL, "%s: not a regular file", path);
    return 1;
  }
  const char *rel = path + b->rootlen + 1;
  if (strcmp(rel, GF_NODE_CACHE_MANIFEST) == 0)
    return 0; /* the manifest itself, from an earlier build */
  const char *why = gf__mc_path_problem(rel, strlen(rel));
  if (!why && strchr(rel, '\t'))
    why = "a tab in the name";
  if (why) {
    b->rc = gf_diag_set(b->d, GF_EINVAL, "%s: %s", path, why);
    return 1;
  }
  if (b->n >= GF_NODE_CACHE_FILES_MAX) {
    b->rc = gf_diag_set(b->d, GF_ELIMIT, "%s: more than %d files", b->root,
                        GF_NODE_CACHE_FILES_MAX);
    return 1;
  }
  if (b->n == b->cap) {
    size_t ncap = b->cap ? b->cap * 2 : 16;
    gf_node_cache_file *nf = gf__realloc(b->files, ncap * sizeof(*nf));
    if (!nf) {
      b->rc = gf_diag_set(b->d, GF_ENOMEM, "out of memory");
      return 1;
    }
    b->files = nf;
    b->cap = ncap;
  }
  gf_node_cache_file *f = &b->files[b->n];
  f->path = gf__strdup(rel);
  if (!f->path) {
    b->rc = gf_diag_set(b->d, GF_ENOMEM, "out of memory");
    return 1;
  }
  b->n++;
  int rc = gf__mc_hash_file(path, &f->size, f->hex, b->d);
  if (rc) {
    b->rc = rc;
    return 1;
  }
  return 0;
}

int gf_node_cache_manifest_build(const char *dir, char **text, size_t *len,
                                 gf_diag *d) {
  *text = NULL;
  *len = 0;
  build_ctx b = {.root = dir, .rootlen = strlen(dir), .d = d};
  while (b.rootlen > 1 && dir[b.rootlen - 1] == '/')
    b.rootlen--;
  pthread_mutex_lock(&g_build_mu);
  g_build = &b;
  int r = nftw(dir, build_visit, 16, FTW_PHYS);
  g_build = NULL;
  pthread_mutex_unlock(&g_build_mu);
  int rc = b.rc;
  if (!rc && r != 0)
    rc = gf_diag_set(d, GF_EIO, "%s: %s", dir, strerror(errno));
  char *out = NULL;
  if (!rc) {
    qsort(b.files, b.n, sizeof(*b.files), cmp_path);
    size_t cap = 1;
    for (size_t i = 0; i < b.n; i++)
      cap += strlen(b.files[i].path) + 1 + 20 + 1 + 64 + 1;
    out = gf__malloc(cap);
    if (!out) {
      rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
    } else {
      size_t n = 0;
      for (size_t i = 0; i < b.n; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s\t%" PRIu64 "\t%s\n",
                              b.files[i].path, b.files[i].size, b.files[i].hex);
      *text = out;
      *len = n;
    }
  }
  for (size_t i = 0; i < b.n; i++)
    gf__free(b.files[i].path);
  gf__free(b.files);
  return rc;
}

/* ---- removing trees ---------------------------------------------------- */

static int rm_chmod(const char *p, const struct stat *st, int type,
                    struct FTW *f) {
  (void)f;
  if (type == FTW_D && !S_ISLNK(st->st_mode))
    chmod(p, 0700);
  return 0;
}

static int rm_visit(const char *p, const struct stat *st, int type,
                    struct FTW *f) {
  (void)st;
  (void)f;
  if (type == FTW_DP)
    rmdir(p);
  else
    unlink(p);
  return 0;
}

bool gf__mc_rmtree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return errno == ENOENT;
  if (!S_ISDIR(st.st_mode))
    return unlink(path) == 0;
  nftw(path, rm_chmod, 16, FTW_PHYS);
  nftw(path, rm_visit, 16, FTW_PHYS | FTW_DEPTH);
  return lstat(path, &st) != 0;
}

/* ---- the cache --------------------------------------------------------- */

/* One fetch under way, shared by the requests waiting for it (and one hub
 * resolution, in its hf_flight: flight_wait waits for either). */
typedef struct flight {
  int refs; /* the fetcher and each waiter */
  bool done;
  int rc;
  gf_diag d;
  uint64_t who; /* whose fetch: its source and namespace (req_who) */
} flight;

typedef struct entry {
  char hex[GF_NODE_CACHE_HEX];
  char name[GF_NODE_CACHE_NAME_MAX];
  uint64_t bytes;
  uint64_t used;
  int64_t last_unpin; /* unix seconds; 0 never */
  /* Whose it is: the namespace of the pod whose fetch brought it ("" for
   * an operator's fetch or prefetch), which its bytes count against
   * (ns_budget); shared: served to every namespace, else to ns only. */
  char ns[GF_NODE_CACHE_NS_MAX];
  bool shared;
  flight *fl;            /* non-NULL while fetching */
  bool on_disk_fetch;    /* read-only: a fetch's tmp/<hex> (no flight) */
  uint64_t have;         /* on_disk_fetch: its bytes on disk so far */
  bool warm;             /* kept in the page cache (keep-warm) */
  struct lock_map *maps; /* mlock'ed mappings of its files */
  size_t nmaps;
  uint64_t locked; /* bytes in maps */
} entry;

typedef struct lock_map {
  void *p;
  size_t n;
} lock_map;

typedef struct pin {
  char hex[GF_NODE_CACHE_HEX];
  char holder[GF_NODE_CACHE_NAME_MAX];
} pin;

/* A Hugging Face repository's resolution (and the fetch after it) under
 * way: the requests of the same model wait for it instead of asking the
 * hub again (one resolution per model in flight). */
typedef struct hf_flight {
  struct hf_flight *next;
  char key[GF_NODE_CACHE_HEX + 8 + 2048]; /* hf_flight_key */
  flight fl; /* who: req_who of the one resolving; refs: it and each waiter */
} hf_flight;

struct gf_node_cache {
  char root[4096 - 128];
  char pod_sources[1024];    /* gf_node_cache_opts.pod_sources */
  char shared_sources[1024]; /* gf_node_cache_opts.shared_sources */
  char hf_endpoint[1024];    /* gf_node_cache_opts.hf_endpoint */
  char hf_token_file[1024];  /* gf_node_cache_opts.hf_token_file */
  char ca_file[1024];        /* gf_node_cache_opts.ca_file */
  /* what messages call hf_endpoint and hf_token_file (the opts' names) */
  const char *hf_names[2];
  uint64_t budget, ns_budget;
  gf__mc_opts o;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  entry *e;
  size_t n, cap;
  pin *p;
  size_t np, pcap;
  uint64_t seq;
  uint64_t bytes_fetched; /* atomic */
  uint64_t fetch_ok, fetch_failed, fetch_hit, evictions;
  uint64_t locked; /* mlock'ed bytes, all models */
  int cancel;      /* atomic: fetches stop */
  hf_flight *hff;  /* hf:// resolutions under way */
  int lock_fd;     /* <root>/lock, flock'ed; -1: read-only */
  bool ro;         /* read_only: nothing changes on disk */
  void (*hook)(void *user, const char *point); /* tests */
  void *hook_user;
};

const char *gf_node_cache_root(const gf_node_cache *c) { return c->root; }

void gf__mc_set_hook(gf_node_cache *c,
                     void (*fn)(void *user, const char *point), void *user) {
  pthread_mutex_lock(&c->mu);
  c->hook = fn;
  c->hook_user = user;
  pthread_mutex_unlock(&c->mu);
}

static void run_hook(gf_node_cache *c, const char *point) {
  pthread_mutex_lock(&c->mu);
  void (*fn)(void *, const char *) = c->hook;
  void *user = c->hook_user;
  pthread_mutex_unlock(&c->mu);
  if (fn)
    fn(user, point);
}

void gf_node_cache_cancel(gf_node_cache *c) {
  __atomic_store_n(&c->cancel, 1, __ATOMIC_RELAXED);
}

static void default_log(void *user, const char *line) {
  (void)user;
  fprintf(stderr, "gpufrac node: cache: %s\n", line);
}

static entry *find(gf_node_cache *c, const char *hex) {
  for (size_t i = 0; i < c->n; i++)
    if (strcmp(c->e[i].hex, hex) == 0)
      return &c->e[i];
  return NULL;
}

static uint32_t pins_of(const gf_node_cache *c, const char *hex) {
  uint32_t k = 0;
  for (size_t i = 0; i < c->np; i++)
    if (strcmp(c->p[i].hex, hex) == 0)
      k++;
  return k;
}

static entry *add_entry(gf_node_cache *c, const char *hex) {
  if (c->n == c->cap) {
    size_t ncap = c->cap ? c->cap * 2 : 16;
    entry *ne = gf__realloc(c->e, ncap * sizeof(*ne));
    if (!ne)
      return NULL;
    c->e = ne;
    c->cap = ncap;
  }
  entry *e = &c->e[c->n++];
  memset(e, 0, sizeof(*e));
  gf__node_copy(e->hex, sizeof(e->hex), hex);
  return e;
}

static void unlock_maps(gf_node_cache *c, entry *e) {
  for (size_t i = 0; i < e->nmaps; i++) {
    munlock(e->maps[i].p, e->maps[i].n);
    munmap(e->maps[i].p, e->maps[i].n);
  }
  gf__free(e->maps);
  c->locked -= e->locked;
  e->maps = NULL;
  e->nmaps = 0;
  e->locked = 0;
}

static void drop_entry(gf_node_cache *c, entry *e) {
  unlock_maps(c, e);
  size_t i = (size_t)(e - c->e);
  c->e[i] = c->e[--c->n];
}

static int model_dir(const gf_node_cache *c, const char *sub, const char *hex,
                     char *out, size_t cap) {
  int n = snprintf(out, cap, "%s/%s/%s", c->root, sub, hex);
  return n > 0 && (size_t)n < cap ? 0 : GF_ELIMIT;
}

static uint64_t used_bytes(const gf_node_cache *c) {
  uint64_t u = 0;
  for (size_t i = 0; i < c->n; i++)
    u += c->e[i].bytes;
  return u;
}

/* Writes state.json; a failure is logged (the directories stay the truth,
 * so the next open recovers). Lock held. */
static void save_state(gf_node_cache *c) {
  if (c->ro)
    return;
  json_t *root = json_object(), *models = json_array(), *pins = json_array();
  int rc = !root || !models || !pins;
  for (size_t i = 0; !rc && i < c->n; i++) {
    const entry *e = &c->e[i];
    if (e->fl)
      continue;
    rc |= json_array_append_new(
        models,
        json_pack("{s:s,s:s,s:I,s:I,s:I,s:s,s:b}", "digest", e->hex, "name",
                  e->name, "bytes", (json_int_t)e->bytes, "used",
                  (json_int_t)e->used, "last_unpin", (json_int_t)e->last_unpin,
                  "namespace", e->ns, "shared", e->shared));
  }
  for (size_t i = 0; !rc && i < c->np; i++)
    rc |= json_array_append_new(pins,
                                json_pack("{s:s,s:s}", "digest", c->p[i].hex,
                                          "holder", c->p[i].holder));
  char *text = NULL;
  if (!rc) {
    json_object_set_new(root, "version", json_integer(2));
    json_object_set_new(root, "seq", json_integer((json_int_t)c->seq));
    json_object_set(root, "models", models);
    json_object_set(root, "pins", pins);
    text = gf__node_json_dumps(root, JSON_COMPACT);
  }
  gf_diag d = {{0}};
  if (!text)
    gf__mc_log(&c->o, "%s/%s: not saved: out of memory", c->root, STATE_FILE);
  else if (gf_node_write_atomic(c->root, STATE_FILE, text, strlen(text), &d))
    gf__mc_log(&c->o, "not saved: %s", d.msg);
  gf__free(text);
  json_decref(models);
  json_decref(pins);
  json_decref(root);
}

/* Removes the published model e (unpinned, not fetching). Lock held. The
 * directory is renamed out of sha256/ first, so it vanishes at once. */
static void remove_model(gf_node_cache *c, entry *e, const char *why) {
  char dir[4096], gone[4096];
  gf__mc_log(&c->o, "model %s (sha256:%.12s, %" PRIu64 " bytes): evicted, %s",
             e->name, e->hex, e->bytes, why);
  if (model_dir(c, "sha256", e->hex, dir, sizeof(dir)) == 0 &&
      snprintf(gone, sizeof(gone), "%s/tmp/evict-%s-%" PRIu64, c->root, e->hex,
               ++c->seq) < (int)sizeof(gone)) {
    if (rename(dir, gone) == 0)
      gf__mc_rmtree(gone);
    else
      gf__mc_rmtree(dir);
  }
  drop_entry(c, e);
  c->evictions++;
}

/* Moves model e's directory to <root>/quarantine/<hex>-<seq> and drops its
 * entry (its pins stay: the pods that hold them still mount the copy); the
 * quarantined copy goes once no pin names it (sweep_quarantine).  Lock
 * held.  GF_EIO. */
static int quarantine_locked(gf_node_cache *c, entry *e) {
  char dir[4096], q[4096 + 100];
  snprintf(q, sizeof(q), "%s/quarantine", c->root);
  if (mkdir(q, 0755) != 0 && errno != EEXIST)
    return GF_EIO;
  if (model_dir(c, "sha256", e->hex, dir, sizeof(dir)) ||
      snprintf(q, sizeof(q), "%s/quarantine/%s-%" PRIu64, c->root, e->hex,
               ++c->seq) >= (int)sizeof(q) ||
      rename(dir, q) != 0)
    return GF_EIO;
  gf__mc_log(&c->o,
             "model %s (sha256:%.12s): failed verification while in use: "
             "moved to %s, out of service",
             e->name, e->hex, q);
  drop_entry(c, e);
  return 0;
}

/* Removes the quarantined copies no pin names any more.  Lock held. */
static void sweep_quarantine(gf_node_cache *c) {
  char q[4096];
  snprintf(q, sizeof(q), "%s/quarantine", c->root);
  DIR *dh = opendir(q);
  if (!dh)
    return;
  struct dirent *de;
  while ((de = readdir(dh))) {
    char hex[GF_NODE_CACHE_HEX];
    if (strlen(de->d_name) < 66 || de->d_name[64] != '-')
      continue;
    memcpy(hex, de->d_name, 64);
    hex[64] = '\0';
    if (pins_of(c, hex))
      continue;
    char p[4096 + 300];
    snprintf(p, sizeof(p), "%s/%s", q, de->d_name);
    gf__mc_rmtree(p);
  }
  closedir(dh);
}

static bool evictable(const gf_node_cache *c, const entry *e,
                      const char *skip) {
  return !e->fl && !pins_of(c, e->hex) && !(skip && !strcmp(e->hex, skip));
}

/* Bytes of the models whose fetches namespace ns made (its share). */
static uint64_t ns_bytes(const gf_node_cache *c, const char *ns) {
  uint64_t u = 0;
  for (size_t i = 0; i < c->n; i++)
    if (!strcmp(c->e[i].ns, ns))
      u += c->e[i].bytes;
  return u;
}

/* The least recently used evictable model (of namespace ns when not
 * NULL). */
static entry *lru_of(gf_node_cache *c, const char *ns, const char *skip) {
  entry *lru = NULL;
  for (size_t i = 0; i < c->n; i++) {
    entry *e = &c->e[i];
    if (!evictable(c, e, skip) || (ns && strcmp(e->ns, ns)))
      continue;
    if (!lru || e->used < lru->used)
      lru = e;
  }
  return lru;
}

/* Makes room for `need` more bytes fetched for namespace ns (NULL or "":
 * an operator's): within ns's share (ns_budget) by evicting its own least
 * recently used unpinned models, then within the budget by evicting any.
 * Checks both before evicting anything.  GF_ENOFIT (with the numbers, and
 * the key for a namespace's share) when they cannot.  Lock held. */
static int make_room(gf_node_cache *c, uint64_t need, const char *skip,
                     const char *ns, gf_diag *d) {
  bool share = ns && ns[0] && c->ns_budget;
  if (share) {
    if (need > c->ns_budget)
      return gf_diag_set(d, GF_ENOFIT,
                         "%" PRIu64 " bytes do not fit namespace %s's share "
                         "of the cache, %" PRIu64 " bytes (model_ns_budget)",
                         need, ns, c->ns_budget);
    uint64_t keep = 0;
    for (size_t i = 0; i < c->n; i++)
      if (!strcmp(c->e[i].ns, ns) && !evictable(c, &c->e[i], skip))
        keep += c->e[i].bytes;
    if (keep > c->ns_budget - need)
      return gf_diag_set(d, GF_ENOFIT,
                         "%" PRIu64 " bytes do not fit namespace %s's share "
                         "of the cache (model_ns_budget %" PRIu64 "): %" PRIu64
                         " bytes of its models are pinned or being fetched",
                         need, ns, c->ns_budget, keep);
  }
  if (c->budget) {
    if (need > c->budget)
      return gf_diag_set(d, GF_ENOFIT,
                         "%" PRIu64 " bytes do not fit the cache's budget of "
                         "%" PRIu64,
                         need, c->budget);
    /* Is there room once every evictable model is gone? */
    uint64_t keep = 0;
    for (size_t i = 0; i < c->n; i++)
      if (!evictable(c, &c->e[i], skip))
        keep += c->e[i].bytes;
    if (keep > c->budget - need)
      return gf_diag_set(d, GF_ENOFIT,
                         "%" PRIu64 " bytes do not fit: %" PRIu64 " of the "
                         "budget's %" PRIu64 " are pinned or being fetched",
                         need, keep, c->budget);
  }
  while (share && ns_bytes(c, ns) > c->ns_budget - need) {
    entry *lru = lru_of(c, ns, skip);
    if (!lru)
      break; /* not reached: checked above */
    remove_model(c, lru, "its namespace's least recently used over its share");
  }
  while (c->budget && used_bytes(c) > c->budget - need) {
    entry *lru = lru_of(c, NULL, skip);
    if (!lru)
      break; /* not reached: keep fits */
    remove_model(c, lru, "least recently used over the budget");
  }
  return 0;
}

/* Bytes of model m already in tmp (files verified or parts of an earlier
 * try): what a resumed fetch need not write again. */
static uint64_t bytes_present(const char *tmp,
                              const gf_node_cache_manifest *m) {
  uint64_t have = 0;
  char p[8192];
  struct stat st;
  for (size_t i = 0; i < m->n; i++) {
    uint64_t got = 0;
    if (snprintf(p, sizeof(p), "%s/files/%s", tmp, m->files[i].path) <
            (int)sizeof(p) &&
        lstat(p, &st) == 0 && S_ISREG(st.st_mode))
      got = (uint64_t)st.st_size;
    else if (snprintf(p, sizeof(p), "%s/files/%s.part", tmp, m->files[i].path) <
                 (int)sizeof(p) &&
             lstat(p, &st) == 0 && S_ISREG(st.st_mode))
      got = (uint64_t)st.st_size;
    have += got < m->files[i].size ? got : m->files[i].size;
  }
  return have;
}

/* Whether the bytes model m still needs fit on the cache's filesystem with
 * keep_free left over (the budget counts what the cache holds; this, what
 * the disk has: other things use it too).  GF_ENOFIT with the numbers. */
static int disk_room(gf_node_cache *c, const char *tmp,
                     const gf_node_cache_manifest *m, gf_diag *d) {
  uint64_t fr = 0, tot = 0;
  if (!c->o.keep_free || gf__mc_fs_space(c->root, &fr, &tot) != 0)
    return 0;
  uint64_t have = bytes_present(tmp, m);
  uint64_t need = m->bytes > have ? m->bytes - have : 0;
  if (fr >= need && fr - need >= c->o.keep_free)
    return 0;
  return gf_diag_set(d, GF_ENOFIT,
                     "%" PRIu64 " bytes to fetch, %" PRIu64
                     " free on the filesystem of %s, which keeps %" PRIu64
                     " free (a tenth of it, for kubelet and the node): "
                     "refused",
                     need, fr, c->root, c->o.keep_free);
}

/* ---- open and recovery ------------------------------------------------- */

static int read_manifest(const char *dir, gf_node_cache_manifest *m,
                         gf_diag *d) {
  char path[4096];
  char *text = NULL;
  size_t len = 0;
  if (!gf__node_join(path, sizeof(path), dir, "manifest"))
    return gf_diag_set(d, GF_ELIMIT, "%s: path too long", dir);
  memset(m, 0, sizeof(*m));
  int rc = gf__node_read_file(path, GF_NODE_CACHE_MANIFEST_MAX, &text, &len, d);
  if (!rc) {
    rc = gf_node_cache_manifest_parse(text, len, m, d);
    if (rc)
      gf_diag_prefix(d, "%s", path);
  }
  gf__free(text);
  return rc;
}

static void load_state(gf_node_cache *c) {
  char path[4096];
  char *text = NULL;
  size_t len = 0;
  gf_diag d = {{0}};
  if (!gf__node_join(path, sizeof(path), c->root, STATE_FILE))
    return;
  if (access(path, F_OK) != 0)
    return;
  if (gf__node_read_file(path, STATE_MAX, &text, &len, &d)) {
    gf__mc_log(&c->o, "%s (rebuilt from the directories)", d.msg);
    return;
  }
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  gf__free(text);
  json_t *models = json_object_get(root, "models");
  json_t *pins = json_object_get(root, "pins");
  json_int_t seq = json_integer_value(json_object_get(root, "seq"));
  json_int_t version = json_integer_value(json_object_get(root, "version"));
  if (!json_is_object(root) || (version != 1 && version != 2) ||
      !json_is_array(models) || !json_is_array(pins) || seq < 0) {
    gf__mc_log(&c->o,
               "%s: not a version 1 or 2 state file%s%s (rebuilt from the "
               "directories)",
               path, root ? "" : ": ", root ? "" : je.text);
    json_decref(root);
    return;
  }
  c->seq = (uint64_t)seq;
  size_t i;
  json_t *v;
  json_array_foreach(models, i, v) {
    const char *hex = json_string_value(json_object_get(v, "digest"));
    const char *name = json_string_value(json_object_get(v, "name"));
    json_int_t used = json_integer_value(json_object_get(v, "used"));
    json_int_t lu = json_integer_value(json_object_get(v, "last_unpin"));
    if (!hex || !is_hex64(hex, strlen(hex)) || find(c, hex) || used < 0)
      continue;
    entry *e = add_entry(c, hex);
    if (!e)
      break;
    gf__node_copy(e->name, sizeof(e->name), name ? name : "");
    e->used = (uint64_t)used;
    e->last_unpin = lu;
    e->bytes = UINT64_MAX; /* "listed, directory not seen yet" */
    /* Version 1 kept no owner: its models were cached before namespaces
     * were told apart, and stay everyone's.  In version 2 a model without
     * a valid owner is nobody's but the operator's. */
    const char *ns = json_string_value(json_object_get(v, "namespace"));
    json_t *sh = json_object_get(v, "shared");
    e->shared = version == 1 || json_is_true(sh);
    if (!e->shared && ns && strlen(ns) < sizeof(e->ns) &&
        (!ns[0] || gf_node_safe_name(ns)))
      gf__node_copy(e->ns, sizeof(e->ns), ns);
    else if (!e->shared)
      gf__node_copy(e->ns, sizeof(e->ns), GF_NODE_CACHE_NS_NOBODY);
    else if (ns && strlen(ns) < sizeof(e->ns) && gf_node_safe_name(ns))
      gf__node_copy(e->ns, sizeof(e->ns), ns);
    if (e->used > c->seq)
      c->seq = e->used;
  }
  json_array_foreach(pins, i, v) {
    const char *hex = json_string_value(json_object_get(v, "digest"));
    const char *holder = json_string_value(json_object_get(v, "holder"));
    if (!hex || !holder || !holder[0] || !is_hex64(hex, strlen(hex)) ||
        strlen(holder) >= GF_NODE_CACHE_NAME_MAX)
      continue;
    if (c->np == c->pcap) {
      size_t ncap = c->pcap ? c->pcap * 2 : 16;
      pin *np = gf__realloc(c->p, ncap * sizeof(*np));
      if (!np)
        break;
      c->p = np;
      c->pcap = ncap;
    }
    gf__node_copy(c->p[c->np].hex, sizeof(c->p[c->np].hex), hex);
    gf__node_copy(c->p[c->np].holder, sizeof(c->p[c->np].holder), holder);
    c->np++;
  }
  json_decref(root);
}

/* Whether the directory sub (named name, under one of the cache's
 * folders) stays; when not, why may say why (else the walk's default). */
typedef bool (*dir_keep)(gf_node_cache *c, const char *sub, const char *name,
                         gf_diag *why);

/* Every directory in <root>/<folder>: kept when keep says so, else logged
 * ("<sub>: removed (<why>)") and removed.  0, or the folder's error. */
static int walk_dirs(gf_node_cache *c, const char *folder, dir_keep keep,
                     const char *dflt, gf_diag *d) {
  char dir[4096];
  if (!gf__node_join(dir, sizeof(dir), c->root, folder))
    return gf_diag_set(d, GF_ELIMIT, "%s: path too long", c->root);
  DIR *dp = opendir(dir);
  if (!dp)
    return gf_diag_set(d, GF_EIO, "%s: %s", dir, strerror(errno));
  struct dirent *de;
  while ((de = readdir(dp))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
      continue;
    char sub[4096];
    if (!gf__node_join(sub, sizeof(sub), dir, de->d_name))
      continue;
    gf_diag why = {{0}};
    if (!keep(c, sub, de->d_name, &why)) {
      gf__mc_log(&c->o, "%s: removed (%s)", sub, why.msg[0] ? why.msg : dflt);
      gf__mc_rmtree(sub);
    }
  }
  closedir(dp);
  return 0;
}

/* sha256/<hex>: a manifest hashing to <hex> with every file there at its
 * size; one not in the state file is added as nobody's. */
static bool keep_model(gf_node_cache *c, const char *sub, const char *name,
                       gf_diag *md) {
  gf_node_cache_manifest m = {0};
  bool ok = is_hex64(name, strlen(name)) && read_manifest(sub, &m, md) == 0;
  if (ok && strcmp(m.hex, name) != 0) {
    gf_diag_set(md, GF_ESYNTAX, "%s: the manifest's digest is %s", sub, m.hex);
    ok = false;
  }
  /* Sizes only (verify re-hashes): a truncated file is caught here. */
  for (size_t i = 0; ok && i < m.n; i++) {
    char fp[8192];
    struct stat st;
    snprintf(fp, sizeof(fp), "%s/files/%s", sub, m.files[i].path);
    if (lstat(fp, &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size != m.files[i].size) {
      gf_diag_set(md, GF_EIO, "%s: missing or of the wrong size", fp);
      ok = false;
    }
  }
  entry *e = ok ? find(c, name) : NULL;
  if (ok && !e) {
    /* not in the state file (a crash between publish and save, or a
     * copy): whose it was is unknown, so it is served to no pod until an
     * operator's fetch or prefetch of it shares it */
    e = add_entry(c, name);
    if (e) {
      gf__node_copy(e->name, sizeof(e->name), "");
      gf__node_copy(e->ns, sizeof(e->ns), GF_NODE_CACHE_NS_NOBODY);
    }
  }
  if (ok && e)
    e->bytes = m.bytes;
  gf_node_cache_manifest_release(&m); /* also when a check failed */
  return ok && e;
}

/* Checks the published directories against the state. */
static int scan_models(gf_node_cache *c, gf_diag *d) {
  int rc = walk_dirs(c, "sha256", keep_model, "not a model directory", d);
  if (rc)
    return rc;
  for (size_t i = 0; i < c->n;) {
    if (c->e[i].bytes == UINT64_MAX) {
      gf__mc_log(&c->o, "model %s (sha256:%.12s): listed but not on disk",
                 c->e[i].name, c->e[i].hex);
      drop_entry(c, &c->e[i]);
    } else {
      i++;
    }
  }
  for (size_t i = 0; i < c->np;) {
    if (!find(c, c->p[i].hex))
      c->p[i] = c->p[--c->np];
    else
      i++;
  }
  return 0;
}

/* tmp/<hex>: an unfinished fetch, kept when its manifest hashes to <hex>
 * (it can be resumed). */
static bool keep_tmp(gf_node_cache *c, const char *sub, const char *name,
                     gf_diag *why) {
  (void)c;
  (void)why;
  gf_node_cache_manifest m;
  bool keep = is_hex64(name, strlen(name)) && read_manifest(sub, &m, NULL) == 0;
  if (keep) {
    keep = strcmp(m.hex, name) == 0;
    gf_node_cache_manifest_release(&m);
  }
  return keep;
}

/* tmp/ keeps <hex> directories whose manifest hashes to <hex>. */
static int scan_tmp(gf_node_cache *c, gf_diag *d) {
  return walk_dirs(c, "tmp", keep_tmp,
                   "an unfinished fetch that cannot be resumed", d);
}

/* Takes <root>/lock (flock, exclusive, not waiting) for c's lifetime and
 * writes "<pid> <owner>" into it; GF_ESTATE naming the holder's pid when
 * another process has it. */
static int take_lock(gf_node_cache *c, const char *owner, gf_diag *d) {
  char path[4096];
  if (!gf__node_join(path, sizeof(path), c->root, "lock"))
    return gf_diag_set(d, GF_ELIMIT, "%s: path too long", c->root);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    return gf_diag_set(d, GF_EIO, "%s: %s", path, strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    char who[256] = "";
    ssize_t r = pread(fd, who, sizeof(who) - 1, 0);
    close(fd);
    if (e != EWOULDBLOCK)
      return gf_diag_set(d, GF_EIO, "%s: flock: %s", path, strerror(e));
    who[r > 0 ? r : 0] = '\0';
    who[strcspn(who, "\n")] = '\0';
    char *sp = strchr(who, ' ');
    if (sp)
      *sp++ = '\0';
    return gf_diag_set(d, GF_ESTATE,
                       "cache directory %s is in use by pid %s (%s; the pid as "
                       "that process sees it): one process changes a cache "
                       "at a time. With the node agent running, prefetch "
                       "through the agent (gpufrac cache prefetch) or stop it "
                       "first; gpufrac cache ls reads without the lock",
                       c->root, who[0] ? who : "?", sp && *sp ? sp : "gpufrac");
  }
  char line[256];
  int n = snprintf(line, sizeof(line), "%ld %s\n", (long)getpid(),
                   owner ? owner : "gpufrac");
  if (ftruncate(fd, 0) != 0 || n < 0 ||
      pwrite(fd, line, (size_t)n, 0) != (ssize_t)n)
    gf__mc_log(&c->o, "%s: the holder's pid not written: %s", path,
               strerror(errno)); /* the lock itself holds */
  c->lock_fd = fd;
  return 0;
}

/* Read-only: the fetches under way (or stopped with their parts) as
 * tmp/<hex> shows them, with the bytes on disk so far. */
static void scan_read_only_tmp(gf_node_cache *c) {
  char tdir[4096];
  snprintf(tdir, sizeof(tdir), "%s/tmp", c->root);
  DIR *dh = opendir(tdir);
  if (!dh)
    return;
  struct dirent *de;
  while ((de = readdir(dh))) {
    if (!is_hex64(de->d_name, strlen(de->d_name)) || find(c, de->d_name))
      continue;
    char dir[4096 + 80], nf[4096 + 80], nm[GF_NODE_CACHE_NAME_MAX] = "?";
    gf_node_cache_manifest m;
    /* the name is 64 hex digits (checked above) */
    snprintf(dir, sizeof(dir), "%s/%.64s", tdir, de->d_name);
    if (read_manifest(dir, &m, NULL) != 0)
      continue;
    snprintf(nf, sizeof(nf), "%s/%.64s/name", tdir, de->d_name);
    FILE *f = fopen(nf, "re");
    if (f) { /* longer than a name, unreadable, empty or unsafe: "?" */
      gf__buf b;
      gf__buf_init_fixed(&b, nm, sizeof(nm));
      int rc = gf__buf_read_stream(&b, f);
      fclose(f);
      if (rc || !b.len || !gf_node_safe_name(nm))
        snprintf(nm, sizeof(nm), "?");
    }
    entry *e = add_entry(c, de->d_name);
    if (e) {
      gf__node_copy(e->name, sizeof(e->name), nm);
      e->bytes = m.bytes;
      e->on_disk_fetch = true;
      e->have = bytes_present(dir, &m);
    }
    gf_node_cache_manifest_release(&m);
  }
  closedir(dh);
}

static void scan_read_only(gf_node_cache *c) {
  for (size_t i = 0; i < c->n;) {
    char dir[4096];
    gf_node_cache_manifest m;
    if (model_dir(c, "sha256", c->e[i].hex, dir, sizeof(dir)) == 0 &&
        read_manifest(dir, &m, NULL) == 0) {
      c->e[i].bytes = m.bytes;
      gf_node_cache_manifest_release(&m);
      i++;
    } else {
      drop_entry(c, &c->e[i]);
    }
  }
  scan_read_only_tmp(c);
}

/* The pod and shared source prefixes, the hub's endpoint, its token file
 * and the CA file of o into c. */
static int source_opts(gf_node_cache *c, const gf_node_cache_opts *o,
                       gf_diag *d) {
  if (o && o->pod_sources) {
    if (strlen(o->pod_sources) >= sizeof(c->pod_sources))
      return gf_diag_set(d, GF_ELIMIT,
                         "cache: pod sources longer than %zu bytes",
                         sizeof(c->pod_sources) - 1);
    gf__node_copy(c->pod_sources, sizeof(c->pod_sources), o->pod_sources);
  }
  if (o && o->shared_sources) {
    if (strlen(o->shared_sources) >= sizeof(c->shared_sources))
      return gf_diag_set(d, GF_ELIMIT,
                         "cache: shared sources longer than %zu bytes",
                         sizeof(c->shared_sources) - 1);
    gf__node_copy(c->shared_sources, sizeof(c->shared_sources),
                  o->shared_sources);
  }
  const char *strs[3] = {o ? o->hf_endpoint : NULL, o ? o->hf_token_file : NULL,
                         o ? o->ca_file : NULL};
  char *dsts[3] = {c->hf_endpoint, c->hf_token_file, c->ca_file};
  for (int k = 0; k < 3; k++) {
    if (strs[k] && strlen(strs[k]) >= sizeof(c->ca_file))
      return gf_diag_set(d, GF_ELIMIT, "cache: %s longer than %zu bytes",
                         k == 0 ? "the hub endpoint" : "a file name",
                         sizeof(c->ca_file) - 1);
    gf__node_copy(dsts[k], sizeof(c->ca_file),
                  strs[k] && strs[k][0] ? strs[k]
                  : k == 0              ? GF_NODE_CACHE_HF_ENDPOINT
                                        : "");
  }
  c->o.ca_file = c->ca_file;
  gf_node_cache_scheme_lower(c->hf_endpoint);
  /* static strings: the config's keys, or the command's options */
  c->hf_names[0] =
      o && o->hf_endpoint_name ? o->hf_endpoint_name : "model_hf_endpoint";
  c->hf_names[1] = o && o->hf_token_file_name ? o->hf_token_file_name
                                              : "model_hf_token_file";
  /* refused here, not at the first request: the command's options or the
   * node config say what is wrong while they are being read */
  return gf__mc_hf_endpoint_check(c->hf_endpoint, c->hf_token_file[0] != '\0',
                                  c->hf_names, d);
}

int gf_node_cache_open(const gf_node_cache_opts *o, gf_node_cache **out,
                       gf_diag *d) {
  *out = NULL;
  gf_node_cache *c = gf__calloc(1, sizeof(*c));
  if (!c)
    return gf_diag_set(d, GF_ENOMEM, "cache: out of memory");
  const char *root = o && o->root ? o->root : GF_NODE_CACHE_ROOT;
  int rc = 0;
  if (strlen(root) >= sizeof(c->root) - 200) {
    rc = gf_diag_set(d, GF_ELIMIT, "%s: path too long", root);
    goto fail;
  }
  gf__node_copy(c->root, sizeof(c->root), root);
  if ((rc = source_opts(c, o, d)))
    goto fail;
  c->budget = o ? o->budget : 0;
  c->ns_budget = o ? o->ns_budget : 0;
  c->o.parallel = o && o->parallel ? o->parallel : 4;
  if (c->o.parallel > 64)
    c->o.parallel = 64;
  c->o.retries = o && o->retries ? o->retries : 5;
  c->o.connect_timeout_s =
      o && o->connect_timeout_s > 0 ? o->connect_timeout_s : 10;
  c->o.stall_timeout_s = o && o->stall_timeout_s > 0 ? o->stall_timeout_s : 30;
  c->o.progress_s = o && o->progress_s > 0 ? o->progress_s : 5;
  c->o.deadline_s = !o || o->deadline_s == 0 ? 7200
                    : o->deadline_s < 0      ? 0
                                             : o->deadline_s;
  c->o.min_rate = !o || o->min_rate == 0 ? 1000000
                  : o->min_rate < 0      ? 0
                                         : (uint64_t)o->min_rate;
  c->o.min_rate_after_s =
      o && o->min_rate_after_s > 0 ? o->min_rate_after_s : 60;
  c->o.log = o && o->log ? o->log : default_log;
  c->o.log_user = o && o->log ? o->log_user : NULL;
  c->lock_fd = -1;
  c->ro = o && o->read_only;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  if (c->ro) {
    struct stat st;
    if (stat(c->root, &st) != 0 || !S_ISDIR(st.st_mode)) {
      rc = gf_diag_set(d, GF_ENOTFOUND, "%s: no cache directory", c->root);
      goto fail_lock;
    }
    load_state(c);
    scan_read_only(c);
    *out = c;
    return 0;
  }
  char sub[4096];
  const char *subs[] = {"", "sha256", "tmp"};
  for (size_t i = 0; i < 3; i++) {
    snprintf(sub, sizeof(sub), "%s/%s", c->root, subs[i]);
    rc = gf__node_mkdirs(sub, 0755, d);
    if (rc)
      goto fail_lock;
  }
  /* The disk is usually the node's (kubelet's, the images'): without a
   * budget the cache takes at most half of its filesystem, and any fetch
   * leaves a tenth of it free (kubelet's default eviction threshold,
   * nodefs.available < 10%). */
  {
    uint64_t fr = 0, tot = 0;
    if (gf__mc_fs_space(c->root, &fr, &tot) == 0 && tot > 0) {
      c->o.keep_free = tot / GF_NODE_CACHE_KEEP_FREE_DIV;
      if (!c->budget) {
        c->budget = tot / GF_NODE_CACHE_BUDGET_DIV;
        gf__mc_log(&c->o,
                   "no budget set: %" PRIu64 " bytes, half of the %" PRIu64
                   " of %s's filesystem",
                   c->budget, tot, c->root);
      }
    }
  }
  /* before recovery: it removes what another process's fetch is writing */
  rc = take_lock(c, o ? o->lock_owner : NULL, d);
  if (rc)
    goto fail_lock;
  load_state(c);
  sweep_quarantine(c); /* copies out of service no pin names any more */
  rc = scan_tmp(c, d);
  if (!rc)
    rc = scan_models(c, d);
  if (rc)
    goto fail_lock;
  if (c->budget && used_bytes(c) > c->budget) {
    gf_diag ed = {{0}};
    /* Make room for nothing: shrink to the budget. */
    if (make_room(c, 0, NULL, NULL, &ed))
      gf__mc_log(&c->o, "over the budget of %" PRIu64 " bytes: %s", c->budget,
                 ed.msg);
  }
  save_state(c);
  *out = c;
  return 0;
fail_lock:
  if (c->lock_fd >= 0)
    close(c->lock_fd);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
fail:
  gf__free(c->e);
  gf__free(c->p);
  gf__free(c);
  return rc;
}

void gf_node_cache_free(gf_node_cache *c) {
  if (!c)
    return;
  for (size_t i = 0; i < c->n; i++)
    unlock_maps(c, &c->e[i]);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  if (c->lock_fd >= 0)
    close(c->lock_fd); /* releases the lock */
  gf__free(c->e);
  gf__free(c->p);
  gf__free(c);
}

/* ---- fetch (single flight) --------------------------------------------- */

static void flight_put(flight *f) {
  if (--f->refs == 0)
    gf__free(f);
}

/* Waits, c->mu held, until the flight f another request runs (a fetch, or
 * a hub resolution's hf_flight.fl) is done: a reference taken for the
 * wait, which the caller drops (flight_put, hf_flight_put) once it has
 * read f; the tests' "flight-wait" hook run first, without the lock.
 * f's rc. */
static int flight_wait(gf_node_cache *c, flight *f) {
  f->refs++;
  if (c->hook) { /* tests: "flight-wait", without the lock */
    pthread_mutex_unlock(&c->mu);
    run_hook(c, "flight-wait");
    pthread_mutex_lock(&c->mu);
  }
  while (!f->done)
    pthread_cond_wait(&c->cv, &c->mu);
  return f->rc;
}

/* Makes the tree under dir read-only (files 0444, directories 0555). */
static int ro_visit(const char *p, const struct stat *st, int type,
                    struct FTW *f) {
  (void)f;
  if (type == FTW_DP)
    chmod(p, 0555);
  else if (type == FTW_F && S_ISREG(st->st_mode))
    chmod(p, 0444);
  return 0;
}

static int fsync_path(const char *p, int flags) {
  int fd = open(p, O_RDONLY | O_CLOEXEC | flags);
  if (fd < 0)
    return -1;
  int r = fsync(fd);
  close(fd);
  return r;
}

/* What a source brought before the fetch (a Hugging Face repository,
 * resolved): its manifest text and the options to fetch it with (its
 * token); NULL fields: the source's gpufrac.manifest and the cache's. */
typedef struct src_pre {
  const char *manifest;
  size_t len;
  const gf__mc_opts *o;
} src_pre;

/* Beside a fetch's parts in tmp (NULL name: removed, before the publish):
 * the model's name, for `gpufrac cache ls` (read-only: it sees the fetch
 * only on disk), and whose parts they are: a pod's (ns) are dropped once
 * no pod wants them (gf_node_cache_drop_stale_parts), an operator's are
 * kept to resume. */
static void tmp_labels(const char *tmp, const char *name, const char *ns) {
  if (!name) {
    char path[4200];
    snprintf(path, sizeof(path), "%.4090s/name", tmp);
    unlink(path);
    snprintf(path, sizeof(path), "%.4090s/owner", tmp);
    unlink(path);
    return;
  }
  const char *owner = ns ? "pod" : "operator";
  (void)gf_node_write_atomic(tmp, "name", name, strlen(name), NULL);
  (void)gf_node_write_atomic(tmp, "owner", owner, strlen(owner), NULL);
}

/* The fetch proper, without the lock: manifest, room, files, publish. */
static int do_fetch(gf_node_cache *c, const char *name, const char *hex,
                    const char *source, const char *beneath, const char *ns,
                    const src_pre *pre, bool *no_room, gf_diag *d) {
  /* a pod's source redirects only to its own host or under the prefixes
   * pods may name (docs/modelcache.md); a hub's (resolved by the cache,
   * from the operator's endpoint) as an operator's */
  const char *redir = ns && !pre->manifest ? c->pod_sources : NULL;
  const gf__mc_opts *o = pre->o ? pre->o : &c->o;
  char tmp[4096], dst[4096], path[8192];
  char *text = NULL;
  size_t len = 0;
  gf_node_cache_manifest m = {0};
  int rc = 0;
  if (model_dir(c, "tmp", hex, tmp, sizeof(tmp)) ||
      model_dir(c, "sha256", hex, dst, sizeof(dst)))
    return gf_diag_set(d, GF_ELIMIT, "%s: path too long", c->root);
  if (__atomic_load_n(&c->cancel, __ATOMIC_RELAXED))
    return gf_diag_set(d, GF_ESTATE, "the cache is stopping");
  if (pre->manifest) {
    text = gf__malloc(pre->len + 1);
    if (!text) {
      rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
      goto out;
    }
    memcpy(text, pre->manifest, pre->len);
    len = pre->len;
  } else {
    rc = gf__mc_get_manifest(source, beneath, redir, o, &text, &len, d);
  }
  if (rc)
    goto out;
  rc = gf_node_cache_manifest_parse(text, len, &m, d);
  if (rc) {
    gf_diag_prefix(d, "%s/%s", source, GF_NODE_CACHE_MANIFEST);
    goto out;
  }
  if (strcmp(m.hex, hex) != 0) {
    rc = gf_diag_set(d, GF_ESYNTAX,
                     "%s/%s: its digest is sha256:%s, not the sha256:%s "
                     "asked for",
                     source, GF_NODE_CACHE_MANIFEST, m.hex, hex);
    goto out;
  }
  pthread_mutex_lock(&c->mu);
  rc = make_room(c, m.bytes, hex, ns, d);
  if (!rc)
    rc = disk_room(c, tmp, &m, d);
  if (!rc) {
    entry *e = find(c, hex);
    if (e)
      e->bytes = m.bytes; /* reserved */
    save_state(c);
  }
  pthread_mutex_unlock(&c->mu);
  if (rc) {
    *no_room = true; /* the cache's numbers, not the source's: the pod may
                        see them */
    gf_diag_prefix(d, "model %s", name);
    goto out;
  }
  /* A resumable tmp/<hex> keeps its parts; its manifest is the same text
   * (same digest), so rewriting it is harmless. */
  rc = gf__node_mkdirs(tmp, 0755, d);
  if (!rc)
    rc = gf_node_write_atomic(tmp, "manifest", text, len, d);
  if (rc)
    goto out;
  tmp_labels(tmp, name, ns); /* removed before the publish */
  gf__mc_log(&c->o,
             "model %s (sha256:%.12s): fetching %zu files, %" PRIu64
             " bytes from %s",
             name, hex, m.n, m.bytes, source);
  rc = gf__mc_fetch_files(source, beneath, redir, name, tmp, &m, o,
                          &c->bytes_fetched, &c->cancel, d);
  if (rc)
    goto out;
  tmp_labels(tmp, NULL, NULL);
  /* Publish: make read-only, fsync the tree's directories, rename. */
  nftw(tmp, ro_visit, 16, FTW_PHYS | FTW_DEPTH);
  snprintf(path, sizeof(path), "%s/manifest", tmp);
  chmod(path, 0444);
  fsync_path(path, 0);
  fsync_path(tmp, O_DIRECTORY);
  gf__mc_rmtree(dst); /* a leftover never listed (cannot be: scan) */
  if (rename(tmp, dst) != 0) {
    rc = gf_diag_set(d, GF_EIO, "rename %s -> %s: %s", tmp, dst,
                     strerror(errno));
    goto out;
  }
  snprintf(path, sizeof(path), "%s/sha256", c->root);
  fsync_path(path, O_DIRECTORY);
out:
  gf_node_cache_manifest_release(&m);
  gf__free(text);
  return rc;
}

/* One request for a model (gf_node_cache_fetch, gf_node_cache_fetch_for_pod
 * and gf_node_cache_acquire). */
typedef struct req {
  const char *name, *hex, *source;
  const char *beneath; /* file://: the allowed prefix; NULL: the source */
  const char *ns;      /* a pod's namespace; NULL: an operator's request */
  bool shared;         /* a model this fetches is everyone's */
  const char *holder;  /* pinned for it when ready; NULL: no pin */
  char *dir;           /* the model's directory into dir[dcap]; NULL: not */
  size_t dcap;
  bool downloaded; /* out: the failure came from a download */
  bool keep_parts; /* a pod's failed fetch keeps its parts (it retries) */
  char *hex_out;   /* the digest fetched (an hf:// source's); NULL: not */
} req;

static int pin_locked(gf_node_cache *c, entry *e, const char *holder) {
  e->used = ++c->seq;
  for (size_t i = 0; i < c->np; i++)
    if (!strcmp(c->p[i].hex, e->hex) && !strcmp(c->p[i].holder, holder))
      return 0;
  if (c->np == c->pcap) {
    size_t ncap = c->pcap ? c->pcap * 2 : 16;
    pin *np = gf__realloc(c->p, ncap * sizeof(*np));
    if (!np)
      return GF_ENOMEM;
    c->p = np;
    c->pcap = ncap;
  }
  gf__node_copy(c->p[c->np].hex, sizeof(c->p[c->np].hex), e->hex);
  gf__node_copy(c->p[c->np].holder, sizeof(c->p[c->np].holder), holder);
  c->np++;
  return 0;
}

static int path_locked(const gf_node_cache *c, const char *hex, char *dir,
                       size_t cap) {
  int n = snprintf(dir, cap, "%s/sha256/%s/files", c->root, hex);
  return n > 0 && (size_t)n < cap ? 0 : GF_ELIMIT;
}

/* What a request gets of ready model e: the namespace check, then (an
 * operator's request) sharing it, the pin and the path, in one step under
 * the lock. */
static int serve_locked(gf_node_cache *c, entry *e, const req *r, gf_diag *d) {
  if (r->ns && !e->shared && !strcmp(e->ns, GF_NODE_CACHE_NS_NOBODY))
    return gf_diag_set(d, GF_ENOTFOUND,
                       "model %s (sha256:%.12s) is on this node's disk but "
                       "not in its state file, so whose it is is not known: "
                       "it is served to pods once an operator fetches or "
                       "prefetches it (docs/modelcache.md)",
                       r->name, r->hex);
  if (r->ns && !e->shared && strcmp(e->ns, r->ns) != 0)
    return gf_diag_set(d, GF_ENOTFOUND,
                       "model %s (sha256:%.12s) is cached on this node for "
                       "another namespace only: it is served to every "
                       "namespace once an operator fetches or prefetches it, "
                       "or when its source is under model_shared_sources "
                       "(docs/modelcache.md)",
                       r->name, r->hex);
  if (!r->ns && (!e->shared || e->ns[0])) {
    gf__mc_log(&c->o,
               "model %s (sha256:%.12s): an operator's fetch shares it with "
               "every namespace (it was %s's)",
               r->name, r->hex, e->ns[0] ? e->ns : "nobody");
    e->shared = true;
    e->ns[0] = '\0'; /* the operator's now: out of the namespace's share */
  }
  e->used = ++c->seq;
  if (strcmp(e->name, r->name) != 0)
    gf__node_copy(e->name, sizeof(e->name), r->name);
  int rc = r->holder ? pin_locked(c, e, r->holder) : 0;
  if (!rc && r->dir)
    rc = path_locked(c, e->hex, r->dir, r->dcap);
  if (rc == GF_ENOMEM)
    gf_diag_set(d, rc, "model %s: out of memory", r->name);
  else if (rc)
    gf_diag_set(d, rc, "model %s: its path is too long", r->name);
  return rc;
}

/* Whose fetch a request would start: its source and namespace (FNV-1a). */
static uint64_t req_who(const req *r) {
  uint64_t h = 1469598103934665603ull;
  for (int k = 0; k < 2; k++) {
    const char *p = k ? (r->ns ? r->ns : "") : (r->source ? r->source : "");
    for (; *p; p++)
      h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ 0xffu) * 1099511628211ull; /* a separator */
  }
  return h;
}

static int fetch_req(gf_node_cache *c, req *r, const src_pre *pre, gf_diag *d);

/* Whether model hex is ready (not fetching). */
static bool ready(gf_node_cache *c, const char *hex) {
  pthread_mutex_lock(&c->mu);
  entry *e = hex && is_hex64(hex, strlen(hex)) ? find(c, hex) : NULL;
  bool ok = e && !e->fl;
  pthread_mutex_unlock(&c->mu);
  return ok;
}

/* A request whose source is a Hugging Face repository (hf://): unless
 * the digest it names is ready, the repository is resolved into its
 * manifest (the hub token, when configured, to the hub's host only) and
 * the fetch goes on from the hub's files with that manifest. */
static int hf_req_run(gf_node_cache *c, req *r, gf_diag *d) {
  if (ready(c, r->hex))
    return fetch_req(c, r, &(src_pre){0}, d);
  if (c->ro)
    return gf_diag_set(d, GF_ESTATE, "model %s: the cache is open read-only",
                       r->name ? r->name : "?");
  gf__mc_opts o = c->o;
  char auth[4200], origin[1200];
  if (c->hf_token_file[0]) {
    int rc = gf__mc_hf_token(c->hf_token_file, c->hf_names[1], auth,
                             sizeof(auth), d);
    if (rc)
      return rc;
    if (!gf__mc_origin(c->hf_endpoint, origin, sizeof(origin)))
      return gf_diag_set(d, GF_EINVAL, "%s %s: not a URL", c->hf_names[0],
                         c->hf_endpoint);
    if (!gf__mc_hf_token_safe(origin))
      return gf_diag_set(d, GF_EINVAL,
                         "%s %s: the hub token (%s) is sent only over "
                         "https:// or to a loopback http:// endpoint",
                         c->hf_names[0], c->hf_endpoint, c->hf_names[1]);
    o.auth = auth;
    o.auth_origin = origin;
  }
  /* a hub that trickles its answers is bounded by the fetch's deadline */
  if (o.deadline_s > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    o.until =
        (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + (double)o.deadline_s;
  }
  gf__mc_hf hf;
  const char *asked = r->source, *asked_hex = r->hex;
  int rc = gf__mc_hf_resolve(c->hf_endpoint, asked, &o, &hf, d);
  o.until = 0;
  /* what the hub answered is for the log, not a pod's events (pod_req) */
  r->downloaded = rc != GF_EINVAL;
  if (rc) {
    gf_diag_prefix(d, "model %s", r->name ? r->name : "?");
    return rc;
  }
  gf_node_cache_manifest m = {0};
  rc = gf_node_cache_manifest_parse(hf.manifest, hf.len, &m, d);
  if (rc) {
    gf_diag_prefix(d, "model %s: %s at %.12s: its file list", r->name, asked,
                   hf.commit);
  } else if (r->hex && r->hex[0] && strcmp(r->hex, m.hex)) {
    rc = gf_diag_set(d, GF_ESYNTAX,
                     "model %s: %s is commit %.12s, whose manifest is "
                     "sha256:%s, not the sha256:%s asked for",
                     r->name, asked, hf.commit, m.hex, r->hex);
  } else {
    gf__node_copy(hf.hex, sizeof(hf.hex), m.hex);
    gf__mc_log(&c->o,
               "model %s: %s is commit %s, %zu files, %" PRIu64
               " bytes, manifest sha256:%s",
               r->name, asked, hf.commit, m.n, m.bytes, m.hex);
    r->hex = hf.hex;
    r->source = hf.base;
    src_pre pre = {.manifest = hf.manifest, .len = hf.len, .o = &o};
    r->downloaded = false; /* the fetch says for itself */
    rc = fetch_req(c, r, &pre, d);
    if (!rc && r->hex_out)
      gf__node_copy(r->hex_out, GF_NODE_CACHE_HEX, hf.hex);
    r->source = asked;
    r->hex = asked_hex;
  }
  gf_node_cache_manifest_release(&m);
  gf__mc_hf_release(&hf);
  return rc;
}

/* What one resolution of r is known by: the digest it names, else its
 * source. */
static void hf_flight_key(const req *r, char *out, size_t cap) {
  if (r->hex && r->hex[0])
    snprintf(out, cap, "sha256:%s", r->hex);
  else
    snprintf(out, cap, "%s", r->source);
}

static void hf_flight_put(hf_flight *f) {
  if (--f->fl.refs == 0)
    gf__free(f);
}

/* hf_req_run with one resolution per model in flight: a request for a
 * model whose repository another request is resolving (and fetching)
 * waits for that one and then looks again (the model is ready: a hit, with
 * the namespace rule and the pin); when that one failed, a request of the
 * same source and namespace has its failure, another tries its own. */
static int hf_req(gf_node_cache *c, req *r, gf_diag *d) {
  char key[sizeof(((hf_flight *)0)->key)];
  hf_flight_key(r, key, sizeof(key));
  uint64_t who = req_who(r);
  pthread_mutex_lock(&c->mu);
  for (;;) {
    hf_flight *f = c->hff;
    while (f && strcmp(f->key, key) != 0)
      f = f->next;
    if (!f)
      break;
    int rc = flight_wait(c, &f->fl);
    bool same = f->fl.who == who;
    if (rc && same && d)
      *d = f->fl.d;
    hf_flight_put(f);
    if (rc && same) {
      r->downloaded = true; /* its details are for the log (pod_req) */
      pthread_mutex_unlock(&c->mu);
      return rc;
    }
    if (!rc)
      break; /* ready now: hf_req_run finds it without the hub */
  }
  hf_flight *mine = gf__calloc(1, sizeof(*mine));
  if (mine) {
    gf__node_copy(mine->key, sizeof(mine->key), key);
    mine->fl.who = who;
    mine->fl.refs = 1;
    mine->next = c->hff;
    c->hff = mine;
  }
  pthread_mutex_unlock(&c->mu);
  int rc = hf_req_run(c, r, d);
  if (!mine)
    return rc;
  pthread_mutex_lock(&c->mu);
  for (hf_flight **pp = &c->hff; *pp; pp = &(*pp)->next)
    if (*pp == mine) {
      *pp = mine->next;
      break;
    }
  mine->fl.done = true;
  mine->fl.rc = rc;
  if (rc && d)
    mine->fl.d = *d;
  pthread_cond_broadcast(&c->cv);
  hf_flight_put(mine);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* r->source with its scheme in lower case (a scheme is case-insensitive:
 * "HTTPS://h/x" is "https://h/x" to the prefixes, the fetch and the
 * flights) through buf[cap] when it has a capital letter. */
static void req_scheme_lower(req *r, char *buf, size_t cap) {
  const char *s = r->source, *e = s ? strstr(s, "://") : NULL;
  bool upper = false;
  for (const char *p = s; e && p < e; p++)
    upper = upper || (*p >= 'A' && *p <= 'Z');
  if (!upper || strlen(s) >= cap)
    return; /* too long: refused by the check as it is */
  gf__node_copy(buf, cap, s);
  gf_node_cache_scheme_lower(buf);
  r->source = buf;
}

static int request(gf_node_cache *c, req *r, gf_diag *d) {
  char lower[2048];
  req_scheme_lower(r, lower, sizeof(lower));
  /* every source the one way (pod_req checked a pod's before its prefix) */
  gf_diag sd = {{0}};
  if (r->source && *r->source && gf_node_cache_source_check(r->source, &sd))
    return gf_diag_set(d, GF_EINVAL, "model %s: source %s",
                       r->name ? r->name : "?", sd.msg);
  if (gf__mc_is_hf(r->source))
    return hf_req(c, r, d);
  int rc = fetch_req(c, r, &(src_pre){0}, d);
  if (!rc && r->hex_out)
    gf__node_copy(r->hex_out, GF_NODE_CACHE_HEX, r->hex);
  return rc;
}

static int fetch_req(gf_node_cache *c, req *r, const src_pre *pre, gf_diag *d) {
  const char *name = r->name, *hex = r->hex, *source = r->source;
  if (!hex || !is_hex64(hex, strlen(hex)))
    return gf_diag_set(d, GF_EINVAL,
                       "model %s: the digest is not 64 lowercase hex digits",
                       name ? name : "?");
  if (!name || !gf_node_safe_name(name))
    return gf_diag_set(d, GF_EINVAL, "model '%s': not a valid name",
                       name ? name : "");
  if (c->ro)
    return gf_diag_set(d, GF_ESTATE, "model %s: the cache is open read-only",
                       name);
  pthread_mutex_lock(&c->mu);
  bool waited = false;
  entry *e;
  while ((e = find(c, hex)) && e->fl) {
    /* single flight: wait for the fetch under way, then look again (it
     * may be another namespace's, or gone already) */
    flight *f = e->fl;
    int rc = flight_wait(c, f);
    /* Someone else's fetch (another source or namespace) that failed is
     * not this request's failure: it looks again and fetches from its own
     * source.  The same request's failure is (no second try of it). */
    bool own_try = rc && source && *source && f->who != req_who(r);
    if (rc && d && !own_try)
      *d = f->d;
    flight_put(f);
    if (rc && !own_try) {
      r->downloaded = true;
      pthread_mutex_unlock(&c->mu);
      return rc;
    }
    waited = !rc;
  }
  if (e) {
    int rc = serve_locked(c, e, r, d);
    if (rc != GF_ENOTFOUND) { /* a refusal changes nothing to save */
      if (!waited)
        c->fetch_hit++;
      save_state(c);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
  }
  if (!source || !*source) {
    pthread_mutex_unlock(&c->mu);
    return gf_diag_set(d, GF_EINVAL,
                       "model %s (sha256:%.12s) is not cached here and no "
                       "source was given (gpufrac.io/model-source)",
                       name, hex);
  }
  if (!gf__mc_source_ok(source)) {
    pthread_mutex_unlock(&c->mu);
    return gf_diag_set(d, GF_EINVAL,
                       "model %s: source '%s' is not an "
                       "http://, https:// or file:// URL",
                       name, source ? source : "");
  }
  flight *f = gf__calloc(1, sizeof(*f));
  e = f ? add_entry(c, hex) : NULL;
  if (!e) {
    gf__free(f);
    pthread_mutex_unlock(&c->mu);
    return gf_diag_set(d, GF_ENOMEM, "model %s: out of memory", name);
  }
  gf__node_copy(e->name, sizeof(e->name), name);
  gf__node_copy(e->ns, sizeof(e->ns), r->ns ? r->ns : "");
  e->shared = !r->ns || r->shared;
  f->refs = 1;
  f->who = req_who(r);
  e->fl = f;
  pthread_mutex_unlock(&c->mu);
  run_hook(c, "fetch-started");

  gf_diag fd = {{0}};
  bool no_room = false;
  int rc =
      do_fetch(c, name, hex, source, r->beneath, r->ns, pre, &no_room, &fd);

  pthread_mutex_lock(&c->mu);
  e = find(c, hex);
  f->done = true;
  f->rc = rc;
  f->d = fd;
  if (rc) {
    r->downloaded = !no_room;
    c->fetch_failed++;
    drop_entry(c, e);
    gf__mc_log(&c->o, "model %s (sha256:%.12s): fetch failed: %s", name, hex,
               fd.msg);
  } else {
    c->fetch_ok++;
    e->fl = NULL;
    gf__mc_log(&c->o, "model %s (sha256:%.12s): ready, %" PRIu64 " bytes", name,
               hex, e->bytes);
    /* the pin in the same step as the publish: nothing evicts it between */
    rc = serve_locked(c, e, r, &fd);
  }
  save_state(c);
  flight_put(f);
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (rc && d)
    *d = fd;
  return rc;
}

int gf_node_cache_fetch(gf_node_cache *c, const char *name, const char *hex,
                        const char *source, gf_diag *d) {
  req r = {.name = name, .hex = hex, .source = source};
  return request(c, &r, d);
}

int gf_node_cache_fetch_source(gf_node_cache *c, const char *name,
                               const char *hex, const char *source,
                               char hex_out[GF_NODE_CACHE_HEX], gf_diag *d) {
  hex_out[0] = '\0';
  if ((!hex || !hex[0]) && !gf__mc_is_hf(source))
    return gf_diag_set(d, GF_EINVAL,
                       "model %s: a digest is needed unless the source is "
                       "hf://",
                       name ? name : "?");
  req r = {.name = name, .hex = hex, .source = source, .hex_out = hex_out};
  return request(c, &r, d);
}

/* ---- pins, lookups, eviction ------------------------------------------- */

int gf_node_cache_path(gf_node_cache *c, const char *hex, char *dir,
                       size_t cap) {
  pthread_mutex_lock(&c->mu);
  entry *e = find(c, hex);
  int rc = e && !e->fl ? path_locked(c, hex, dir, cap) : GF_ENOTFOUND;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int gf_node_cache_pin(gf_node_cache *c, const char *hex, const char *holder) {
  if (!holder || !holder[0] || strlen(holder) >= GF_NODE_CACHE_NAME_MAX)
    return GF_EINVAL;
  if (c->ro)
    return GF_ESTATE;
  pthread_mutex_lock(&c->mu);
  entry *e = find(c, hex);
  int rc = !e || e->fl ? GF_ENOTFOUND : pin_locked(c, e, holder);
  if (!rc)
    save_state(c);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int gf_node_cache_unpin(gf_node_cache *c, const char *hex, const char *holder) {
  if (!hex && !holder)
    return 0;
  pthread_mutex_lock(&c->mu);
  int k = 0;
  for (size_t i = 0; i < c->np;) {
    pin *p = &c->p[i];
    if ((!holder || !strcmp(p->holder, holder)) &&
        (!hex || !strcmp(p->hex, hex))) {
      entry *e = find(c, p->hex);
      if (e) {
        e->used = ++c->seq;
        e->last_unpin = (int64_t)time(NULL);
      }
      c->p[i] = c->p[--c->np];
      k++;
    } else {
      i++;
    }
  }
  if (k)
    save_state(c);
  pthread_mutex_unlock(&c->mu);
  return k;
}

int gf_node_cache_evict(gf_node_cache *c, const char *hex, gf_diag *d) {
  if (c->ro)
    return gf_diag_set(d, GF_ESTATE, "sha256:%s: the cache is open read-only",
                       hex);
  pthread_mutex_lock(&c->mu);
  entry *e = find(c, hex);
  int rc = 0;
  if (!e)
    rc = gf_diag_set(d, GF_ENOTFOUND, "sha256:%s: not in the cache", hex);
  else if (e->fl)
    rc = gf_diag_set(d, GF_ESTATE, "model %s: being fetched", e->name);
  else if (pins_of(c, hex))
    rc = gf_diag_set(d, GF_ESTATE, "model %s: pinned by %u running pod(s)",
                     e->name, pins_of(c, hex));
  else {
    remove_model(c, e, "on request");
    save_state(c);
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int gf_node_cache_verify(gf_node_cache *c,
                         void (*report)(void *user, const char *hex,
                                        const char *name, const char *why),
                         void *user) {
  if (c->ro)
    return GF_ESTATE;
  /* The list is copied so hashing runs without the lock. */
  gf_node_cache_entry *list = NULL;
  size_t n = 0;
  int rc = gf_node_cache_list(c, &list, &n);
  if (rc)
    return rc;
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (list[i].state != GF_NODE_CACHE_READY)
      continue;
    char dir[4096];
    gf_node_cache_manifest m = {0};
    gf_diag d = {{0}};
    bool ok = model_dir(c, "sha256", list[i].hex, dir, sizeof(dir)) == 0 &&
              read_manifest(dir, &m, &d) == 0;
    for (size_t j = 0; ok && j < m.n; j++) {
      char fp[8192], hex[GF_NODE_CACHE_HEX];
      uint64_t size = 0;
      snprintf(fp, sizeof(fp), "%s/files/%s", dir, m.files[j].path);
      if (gf__mc_hash_file(fp, &size, hex, &d)) {
        ok = false;
      } else if (size != m.files[j].size || strcmp(hex, m.files[j].hex)) {
        gf_diag_set(&d, GF_EIO,
                    "%s: %" PRIu64 " bytes, sha256 %s; the "
                    "manifest says %" PRIu64 ", %s",
                    m.files[j].path, size, hex, m.files[j].size,
                    m.files[j].hex);
        ok = false;
      }
    }
    gf_node_cache_manifest_release(&m);
    if (ok)
      continue;
    bad++;
    char why[sizeof(d.msg) + 400];
    pthread_mutex_lock(&c->mu);
    entry *e = find(c, list[i].hex);
    uint32_t np = e ? pins_of(c, e->hex) : 0;
    if (e && !e->fl && !np) {
      remove_model(c, e, "it failed verification");
      snprintf(why, sizeof(why), "%s (removed)", d.msg);
      save_state(c);
    } else if (e && !e->fl) {
      /* In use: out of service.  The running pods keep what they mount (a
       * renamed directory, hard links); no new pod gets it, and the next
       * one that names it has it fetched again. */
      int q = quarantine_locked(c, e);
      snprintf(why, sizeof(why), "%s; in use by %u pod(s) or claim(s): %s",
               d.msg, np,
               q ? "could not be taken out of service"
                 : "taken out of service ("
                   "moved to quarantine/), the next "
                   "pod that names it fetches it again");
      save_state(c);
    } else {
      snprintf(why, sizeof(why), "%s", d.msg);
    }
    pthread_mutex_unlock(&c->mu);
    if (report)
      report(user, list[i].hex, list[i].name, why);
  }
  gf__free(list);
  return bad;
}

static int cmp_recent(const void *a, const void *b) {
  const gf_node_cache_entry *x = a, *y = b;
  return x->used < y->used ? 1 : x->used > y->used ? -1 : 0;
}

int gf_node_cache_list(gf_node_cache *c, gf_node_cache_entry **out, size_t *n) {
  pthread_mutex_lock(&c->mu);
  gf_node_cache_entry *l = gf__calloc(c->n ? c->n : 1, sizeof(*l));
  if (!l) {
    pthread_mutex_unlock(&c->mu);
    return GF_ENOMEM;
  }
  for (size_t i = 0; i < c->n; i++) {
    const entry *e = &c->e[i];
    gf__node_copy(l[i].name, sizeof(l[i].name), e->name);
    gf__node_copy(l[i].hex, sizeof(l[i].hex), e->hex);
    l[i].bytes = e->bytes;
    l[i].state = e->fl || e->on_disk_fetch ? GF_NODE_CACHE_FETCHING
                                           : GF_NODE_CACHE_READY;
    l[i].have = e->on_disk_fetch ? e->have : 0;
    l[i].shared = e->shared;
    gf__node_copy(l[i].ns, sizeof(l[i].ns), e->ns);
    l[i].pins = pins_of(c, e->hex);
    l[i].used = e->used;
  }
  *n = c->n;
  pthread_mutex_unlock(&c->mu);
  qsort(l, *n, sizeof(*l), cmp_recent);
  *out = l;
  return 0;
}

void gf_node_cache_stats_get(gf_node_cache *c, gf_node_cache_stats *s) {
  memset(s, 0, sizeof(*s));
  pthread_mutex_lock(&c->mu);
  s->budget = c->budget;
  s->used = used_bytes(c);
  for (size_t i = 0; i < c->n; i++) {
    if (c->e[i].fl || c->e[i].on_disk_fetch)
      s->fetching++;
    else
      s->models++;
  }
  s->fetch_ok = c->fetch_ok;
  s->fetch_failed = c->fetch_failed;
  s->fetch_hit = c->fetch_hit;
  s->evictions = c->evictions;
  s->locked = c->locked;
  pthread_mutex_unlock(&c->mu);
  s->bytes_fetched = __atomic_load_n(&c->bytes_fetched, __ATOMIC_RELAXED);
}

/* One sample of a family with one label: name{label="value"} n. */
static void prom_labelled(gf__buf *b, const char *name, const char *label,
                          const char *value, uint64_t n) {
  gf__buf_appendf(b, "%s", name);
  gf__prom_label(b, true, label, value);
  gf__prom_close(b);
  gf__buf_appendf(b, " %" PRIu64 "\n", n);
}

int gf_node_cache_metrics_text(gf_node_cache *c, char **out, size_t *len) {
  gf_node_cache_stats s;
  gf_node_cache_stats_get(c, &s);
  gf__buf b;
  gf__buf_init(&b, GF__BUF_CACHE_METRICS_MAX);
  gf__prom_u64(&b, "gpufrac_model_cache_bytes_fetched_total", "counter",
               "Bytes received from model sources.", s.bytes_fetched);
  static const char fetches[] = "gpufrac_model_cache_fetches_total";
  gf__prom_head(&b, fetches, "counter",
                "Model requests by result (hit: already cached).");
  prom_labelled(&b, fetches, "result", "ok", s.fetch_ok);
  prom_labelled(&b, fetches, "result", "failed", s.fetch_failed);
  prom_labelled(&b, fetches, "result", "hit", s.fetch_hit);
  gf__prom_u64(&b, "gpufrac_model_cache_evictions_total", "counter",
               "Models evicted.", s.evictions);
  gf__prom_u64(&b, "gpufrac_model_cache_used_bytes", "gauge",
               "Bytes of cached models and fetches under way.", s.used);
  gf__prom_u64(&b, "gpufrac_model_cache_budget_bytes", "gauge",
               "The cache's byte budget (0: none).", s.budget);
  static const char models[] = "gpufrac_model_cache_models";
  gf__prom_head(&b, models, "gauge", "Models by state.");
  prom_labelled(&b, models, "state", "ready", s.models);
  prom_labelled(&b, models, "state", "fetching", s.fetching);
  if (gf__buf_error(&b)) {
    gf__buf_release(&b);
    return GF_ENOMEM;
  }
  *len = b.len;
  *out = gf__buf_take(&b);
  return 0;
}

int gf_node_cache_models_json(gf_node_cache *c, char **out) {
  gf_node_cache_entry *l = NULL;
  size_t n = 0;
  *out = NULL;
  int rc = gf_node_cache_list(c, &l, &n);
  if (rc)
    return rc;
  json_t *a = json_array();
  for (size_t i = 0; a && i < n && i < INVENTORY_MODELS; i++) {
    char dg[80];
    snprintf(dg, sizeof(dg), "sha256:%s", l[i].hex);
    json_t *o =
        json_pack("{s:s,s:s,s:I,s:s,s:b}", "name", l[i].name, "digest", dg,
                  "bytes", (json_int_t)l[i].bytes, "state",
                  l[i].state == GF_NODE_CACHE_READY ? "ready" : "fetching",
                  "shared", l[i].shared);
    if (o && !l[i].shared &&
        json_object_set_new(o, "namespace", json_string(l[i].ns)))
      rc = GF_ENOMEM;
    if (json_array_append_new(a, o))
      rc = GF_ENOMEM;
  }
  gf__free(l);
  char *t = a && !rc ? gf__node_json_dumps(a, JSON_COMPACT) : NULL;
  json_decref(a);
  if (!t)
    return GF_ENOMEM;
  *out = t;
  return 0;
}

/* ---- pins of pods that are gone; keep-warm ----------------------------- */

int gf_node_cache_prune(gf_node_cache *c,
                        bool (*alive)(void *user, const char *holder),
                        void *user) {
  int k = 0;
  for (;;) {
    char holder[GF_NODE_CACHE_NAME_MAX] = "";
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->np && !holder[0]; i++)
      if (!alive(user, c->p[i].holder))
        gf__node_copy(holder, sizeof(holder), c->p[i].holder);
    if (!holder[0]) {
      if (k && !c->ro)
        sweep_quarantine(c);
      pthread_mutex_unlock(&c->mu);
      return k;
    }
    pthread_mutex_unlock(&c->mu);
    k += gf_node_cache_unpin(c, NULL, holder);
  }
}

/* posix_fadvise(advice) on every file of model dir; with lock, also maps
 * and mlocks them while *budget allows, appending to *maps. */
static void advise_model(const char *dir, int advice, bool lock,
                         uint64_t *budget, lock_map **maps, size_t *nmaps,
                         uint64_t *locked) {
  gf_node_cache_manifest m;
  if (read_manifest(dir, &m, NULL))
    return;
  for (size_t i = 0; i < m.n; i++) {
    char fp[8192];
    snprintf(fp, sizeof(fp), "%s/files/%s", dir, m.files[i].path);
    int fd = open(fp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
      continue;
    posix_fadvise(fd, 0, 0, advice);
    size_t n = (size_t)m.files[i].size;
    if (lock && n > 0 && n <= *budget) {
      void *p = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
      lock_map *nm = p != MAP_FAILED
                         ? gf__realloc(*maps, (*nmaps + 1) * sizeof(**maps))
                         : NULL;
      if (nm && mlock(p, n) == 0) {
        *maps = nm;
        nm[(*nmaps)++] = (lock_map){p, n};
        *budget -= n;
        *locked += n;
      } else {
        if (nm)
          *maps = nm;
        if (p != MAP_FAILED)
          munmap(p, n);
      }
    }
    close(fd);
  }
  gf_node_cache_manifest_release(&m);
}

int gf_node_cache_keep_warm(gf_node_cache *c, long keep_s,
                            uint64_t mlock_budget, int64_t now) {
  int changed = 0;
  for (;;) {
    /* One model at a time, the I/O without the lock. */
    char hex[GF_NODE_CACHE_HEX] = "";
    bool warm_it = false;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n && !hex[0]; i++) {
      entry *e = &c->e[i];
      if (e->fl)
        continue;
      bool within = keep_s > 0 && e->last_unpin > 0 &&
                    pins_of(c, e->hex) == 0 && now - e->last_unpin < keep_s;
      if (within && !e->warm) {
        gf__node_copy(hex, sizeof(hex), e->hex);
        warm_it = true;
        e->warm = true;
      } else if (!within && e->warm) {
        e->warm = false;
        unlock_maps(c, e);
        changed++;
      }
    }
    uint64_t budget = mlock_budget > c->locked ? mlock_budget - c->locked : 0;
    pthread_mutex_unlock(&c->mu);
    if (!hex[0])
      return changed;
    char dir[4096];
    lock_map *maps = NULL;
    size_t nmaps = 0;
    uint64_t locked = 0;
    if (warm_it && model_dir(c, "sha256", hex, dir, sizeof(dir)) == 0)
      advise_model(dir, POSIX_FADV_WILLNEED, budget > 0, &budget, &maps, &nmaps,
                   &locked);
    pthread_mutex_lock(&c->mu);
    entry *e = find(c, hex);
    if (e && e->warm && !e->maps) {
      e->maps = maps;
      e->nmaps = nmaps;
      e->locked = locked;
      c->locked += locked;
      maps = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; maps && i < nmaps; i++) {
      munlock(maps[i].p, maps[i].n);
      munmap(maps[i].p, maps[i].n);
    }
    gf__free(maps);
    changed++;
  }
}

int gf_node_cache_drop_page_cache(gf_node_cache *c, const char *hex) {
  char dir[4096];
  if (model_dir(c, "sha256", hex, dir, sizeof(dir)))
    return GF_ELIMIT;
  struct stat st;
  if (stat(dir, &st) != 0)
    return GF_ENOTFOUND;
  uint64_t none = 0;
  advise_model(dir, POSIX_FADV_DONTNEED, false, &none, NULL, NULL, NULL);
  return 0;
}

/* The prefix in allow that source starts with into out[cap] (the first);
 * false when none. */
static bool source_prefix(const char *allow, const char *source, char *out,
                          size_t cap) {
  if (!allow || !source)
    return false;
  for (const char *p = allow; *p;) {
    size_t n = strcspn(p, ",");
    /* a prefix that does not end in '/' would let "https://a.example" pass
     * "https://a.example.attacker.net": never matches; an hf:// one names
     * an organisation or one repository (gf__mc_hf_prefix_match) */
    bool hf = n > 5 && !strncmp(p, "hf://", 5);
    if (hf ? gf__mc_hf_prefix_match(p, n, source)
           : n > 1 && p[n - 1] == '/' && strncmp(source, p, n) == 0) {
      if (n >= cap)
        return false;
      memcpy(out, p, n);
      out[n] = '\0';
      return true;
    }
    p += n;
    if (*p == ',')
      p++;
  }
  return false;
}

bool gf_node_cache_source_allowed(const char *allow, const char *source) {
  char pre[1024];
  return source_prefix(allow, source, pre, sizeof(pre));
}

/* A pod's request r (r->ns set): its source under pod_sources, the fetch,
 * the pod's view of a failure, no parts left by a failed download. */
static int pod_req(gf_node_cache *c, req *r, gf_diag *d) {
  char lower[2048];
  req_scheme_lower(r, lower, sizeof(lower));
  const char *name = r->name, *hex = r->hex, *source = r->source;
  char pre[1024], shpre[1024];
  gf_diag sd = {{0}};
  if (source && gf_node_cache_source_check(source, &sd))
    return gf_diag_set(d, GF_EINVAL, "model %s: source %s", name, sd.msg);
  if (source && !source_prefix(c->pod_sources, source, pre, sizeof(pre)))
    return gf_diag_set(d, GF_EINVAL,
                       "model %s: source '%.200s' is not under the node's "
                       "model_pod_sources (%s): pods may name only those "
                       "(docs/modelcache.md)",
                       name, source,
                       c->pod_sources[0] ? c->pod_sources : "none set");
  if (source && gf__mc_is_hf(source) && !gf__mc_hf_pinned(source))
    return gf_diag_set(d, GF_EINVAL,
                       "model %s: source '%.200s' does not pin a commit: a "
                       "pod names hf://ORG/NAME@<the 40-hex commit> (a branch "
                       "or tag moves, and its manifest with it; `gpufrac cache "
                       "fetch` prints the commit and the digest; "
                       "docs/modelcache.md)",
                       name, source);
  gf_diag fd = {{0}};
  /* a file:// source is read beneath the prefix's directory: a symlink or
   * '..' in it does not lead out (docs/modelcache.md) */
  r->beneath = source && !strncmp(source, "file:", 5) ? pre : NULL;
  r->shared =
      source && source_prefix(c->shared_sources, source, shpre, sizeof(shpre));
  int rc = request(c, r, &fd);
  if (rc && r->downloaded) {
    /* What a failed download says (a file's real size and sha256, a
     * server's answer) is for the operator's log, not the pod's events:
     * repeated tries with adjusted manifests would read a file out.  Also
     * when this pod named no source and only waited for another's fetch:
     * that one's details are not this pod's to see. */
    gf__mc_log(&c->o, "model %s (sha256:%.12s) for a pod: %s", name, hex,
               fd.msg);
    gf_diag_set(d, rc,
                "model %s: fetching it %sfailed (%s); the node agent's log "
                "says why",
                name, source ? "from its gpufrac.io/model-source " : "",
                gf_err_name(rc));
  } else if (rc && d) {
    *d = fd;
  }
  if (rc && rc != GF_ESTATE && !r->keep_parts &&
      !__atomic_load_n(&c->cancel, __ATOMIC_RELAXED)) {
    /* A failed fetch a pod asked for leaves no parts: their bytes are not
     * in the budget, so a tenant naming new digests whose sources stop
     * short would fill the disk.  (An operator's fetch keeps them, to
     * resume.)  Only while no fetch of it runs again. */
    char tmp[4096];
    pthread_mutex_lock(&c->mu);
    if (!find(c, hex) && model_dir(c, "tmp", hex, tmp, sizeof(tmp)) == 0 &&
        !gf__mc_rmtree(tmp))
      gf__mc_log(&c->o, "model %s: cannot remove %s", name, tmp);
    pthread_mutex_unlock(&c->mu);
  }
  return rc;
}

int gf_node_cache_drop_parts(gf_node_cache *c, const char *hex) {
  char tmp[4096];
  if (c->ro || !is_hex64(hex, strlen(hex)))
    return GF_EINVAL;
  pthread_mutex_lock(&c->mu);
  int rc = find(c, hex) ? GF_ESTATE : 0;
  if (!rc && model_dir(c, "tmp", hex, tmp, sizeof(tmp)) == 0 &&
      !gf__mc_rmtree(tmp))
    rc = GF_EIO;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* Whether tmp/<hex> (its path) holds an operator's fetch (its "owner"
 * file says so; one without it, from before the file, is a pod's). */
static bool operators_parts(const char *tmp) {
  char path[4400];
  snprintf(path, sizeof(path), "%.4200s/owner", tmp);
  char *text = NULL;
  size_t n = 0;
  if (gf__node_read_file(path, 64, &text, &n, NULL))
    return false;
  bool op = n == 8 && memcmp(text, "operator", 8) == 0;
  gf__free(text);
  return op;
}

int gf_node_cache_drop_stale_parts(gf_node_cache *c,
                                   bool (*wanted)(void *user, const char *hex),
                                   void *user) {
  if (c->ro)
    return 0;
  char tdir[4096];
  snprintf(tdir, sizeof(tdir), "%s/tmp", c->root);
  DIR *dh = opendir(tdir);
  if (!dh)
    return 0;
  int dropped = 0;
  pthread_mutex_lock(&c->mu);
  struct dirent *de;
  while ((de = readdir(dh)) != NULL) {
    const char *hex = de->d_name;
    char tmp[4200];
    if (!is_hex64(hex, strlen(hex)) || find(c, hex))
      continue; /* not a fetch's parts, or its fetch runs (or it is ready) */
    bool pinned = false;
    for (size_t i = 0; i < c->np && !pinned; i++)
      pinned = strcmp(c->p[i].hex, hex) == 0;
    snprintf(tmp, sizeof(tmp), "%s/%s", tdir, hex);
    if (pinned || operators_parts(tmp) || (wanted && wanted(user, hex)))
      continue;
    if (gf__mc_rmtree(tmp)) {
      dropped++;
      gf__mc_log(&c->o,
                 "the parts of a pod's fetch of sha256:%.12s removed: no pod "
                 "wants that model any more (its pod left while no agent ran)",
                 hex);
    } else {
      gf__mc_log(&c->o, "cannot remove %s", tmp);
    }
  }
  pthread_mutex_unlock(&c->mu);
  closedir(dh);
  return dropped;
}

int gf_node_cache_fetch_for_pod(gf_node_cache *c, const char *name,
                                const char *hex, const char *source,
                                gf_diag *d) {
  /* no namespace named: one pseudo-namespace for all such callers */
  req r = {.name = name, .hex = hex, .source = source, .ns = NS_UNNAMED};
  return pod_req(c, &r, d);
}

int gf_node_cache_acquire(gf_node_cache *c, const gf_node_cache_req *q,
                          char *dir, size_t cap, gf_diag *d) {
  const char *name = q->name ? q->name : "?";
  if (!q->ns || !q->ns[0] || strlen(q->ns) >= GF_NODE_CACHE_NS_MAX ||
      !gf_node_safe_name(q->ns) || q->ns[0] == '-')
    return gf_diag_set(d, GF_EINVAL, "model %s: namespace '%s' is not valid",
                       name, q->ns ? q->ns : "");
  if (!q->holder || !q->holder[0] ||
      strlen(q->holder) >= GF_NODE_CACHE_NAME_MAX)
    return gf_diag_set(d, GF_EINVAL, "model %s: no pin holder (pod uid)", name);
  req r = {.name = q->name,
           .hex = q->hex,
           .source = q->source,
           .ns = q->ns,
           .holder = q->holder,
           .dir = dir,
           .dcap = cap,
           .keep_parts = q->keep_parts};
  int rc = pod_req(c, &r, d);
  if (!rc)
    run_hook(c, "acquire-found"); /* tests: the pin is already there */
  return rc;
}
