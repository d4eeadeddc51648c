/*
 * Small helpers of gf_node: bounded copies, paths, whole-file reads and the
 * atomic write (node_int.h, gpufrac/node.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "buf.h"
#include "contract_int.h"
#include "gpufrac/ctr_grant.h"
#include "gpufrac/error.h"
#include "gpufrac/region.h"
#include "node_util.h"

void gf__node_copy(char *dst, size_t cap, const char *src) {
  size_t n = strlen(src);
  if (n >= cap)
    n = cap - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

bool gf__node_join(char *out, size_t cap, const char *a, const char *b) {
  int n = snprintf(out, cap, "%s/%s", a, b);
  return n > 0 && (size_t)n < cap;
}

bool gf_node_safe_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 253 || s[0] == '.')
    return false;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    if (!ok)
      return false;
  }
  return true;
}

int gf__node_read_file(const char *path, size_t max, char **out, size_t *len,
                       gf_diag *d) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return gf_diag_set(d, GF_EIO, "%s: %s", path, strerror(errno));
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    int e = errno;
    close(fd);
    return gf_diag_set(d, GF_EIO, "%s: %s", path, strerror(e));
  }
  gf__buf b;
  gf__buf_init(&b, max);
  int rc = gf__buf_read_stream(&b, f);
  if (!rc && !b.p) /* an empty file: still an allocated "" */
    rc = gf__buf_append(&b, "", 0);
  fclose(f);
  if (rc) {
    gf__buf_release(&b);
    if (rc == GF_ELIMIT)
      return gf_diag_set(d, rc, "%s: larger than %zu bytes", path, max);
    if (rc == GF_EIO)
      return gf_diag_set(d, rc, "%s: read error", path);
    return gf_diag_set(d, rc, "%s: out of memory", path);
  }
  *len = b.len;
  *out = gf__buf_take(&b);
  return 0;
}

/* mkdir -p for an absolute or relative path of at most GF_NODE_PATH_MAX. */
int gf__node_mkdirs(const char *dir, unsigned mode, gf_diag *d) {
  char p[GF_NODE_PATH_MAX];
  if (strlen(dir) >= sizeof(p))
    return gf_diag_set(d, GF_ELIMIT, "%s: path too long", dir);
  gf__node_copy(p, sizeof(p), dir);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/')
      continue;
    *s = '\0';
    if (mkdir(p, (mode_t)mode) && errno != EEXIST)
      return gf_diag_set(d, GF_EIO, "%s: mkdir: %s", p, strerror(errno));
    *s = '/';
  }
  if (mkdir(p, (mode_t)mode) && errno != EEXIST)
    return gf_diag_set(d, GF_EIO, "%s: mkdir: %s", p, strerror(errno));
  return 0;
}

int gf_node_write_atomic(const char *dir, const char *name, const char *text,
                         size_t len, gf_diag *d) {
  char path[GF_NODE_PATH_MAX], tmp[GF_NODE_PATH_MAX];
  if (!gf_node_safe_name(name))
    return gf_diag_set(d, GF_EINVAL, "'%s' is not a safe file name", name);
  if (!gf__node_join(path, sizeof(path), dir, name) ||
      snprintf(tmp, sizeof(tmp), "%s/.%s.XXXXXX", dir, name) >=
          (int)sizeof(tmp))
    return gf_diag_set(d, GF_ELIMIT, "%s/%s: path too long", dir, name);
  int rc = gf__node_mkdirs(dir, 0755, d);
  if (rc)
    return rc;
  int fd = mkstemp(tmp);
  if (fd < 0)
    return gf_diag_set(d, GF_EIO, "%s: %s", tmp, strerror(errno));
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, text + off, len - off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      rc = gf_diag_set(d, GF_EIO, "%s: write: %s", tmp, strerror(errno));
      goto fail;
    }
    off += (size_t)w;
  }
  if (fchmod(fd, 0644) || fsync(fd)) {
    rc = gf_diag_set(d, GF_EIO, "%s: %s", tmp, strerror(errno));
    goto fail;
  }
  if (close(fd)) {
    fd = -1;
    rc = gf_diag_set(d, GF_EIO, "%s: close: %s", tmp, strerror(errno));
    goto fail;
  }
  fd = -1;
  if (rename(tmp, path)) {
    rc = gf_diag_set(d, GF_EIO, "%s: rename: %s", path, strerror(errno));
    goto fail;
  }
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  return 0;
fail:
  if (fd >= 0)
    close(fd);
  unlink(tmp);
  return rc;
}

int gf__node_region_open(const char *ctr_dir, gf_region **out) {
  *out = NULL;
  char path[GF_NODE_PATH_MAX];
  if (snprintf(path, sizeof(path), "%s/region/region", ctr_dir) >=
      (int)sizeof(path))
    return GF_ELIMIT;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : GF_EIO;
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            flock(fd, LOCK_SH | LOCK_NB) == 0;
  close(fd); /* drops the probe's lock */
  if (!ok)
    return GF_ESTATE;
  return gf_region_map(path, NULL, out, NULL);
}

/* Calls fn(user, name, path) for each entry of directory dir whose name
 * is a safe path component. */
static void each_entry(const char *dir,
                       void (*fn)(void *user, const char *name,
                                  const char *path),
                       void *user) {
  DIR *dh = opendir(dir);
  if (!dh)
    return;
  struct dirent *e;
  while ((e = readdir(dh))) {
    char path[GF_NODE_PATH_MAX];
    if (gf_node_safe_name(e->d_name) &&
        gf__node_join(path, sizeof(path), dir, e->d_name))
      fn(user, e->d_name, path);
  }
  closedir(dh);
}

void gf__node_each_pod(const char *state_dir,
                       void (*fn)(void *user, const char *uid,
                                  const char *pod_dir),
                       void *user) {
  char pods[GF_NODE_PATH_MAX];
  if (gf__node_join(pods, sizeof(pods), state_dir, "pods"))
    each_entry(pods, fn, user);
}

typedef struct each_ctr {
  void (*fn)(void *, const char *, const char *, const char *);
  void *user;
  const char *uid;
} each_ctr;

static void ctr_of_pod(void *user, const char *ctr, const char *ctr_dir) {
  each_ctr *ec = user;
  ec->fn(ec->user, ec->uid, ctr, ctr_dir);
}

static void each_ctr_in_pod(void *user, const char *uid, const char *pod_dir) {
  each_ctr *ec = user;
  ec->uid = uid;
  each_entry(pod_dir, ctr_of_pod, ec);
}

void gf__node_each_container(const char *state_dir,
                             void (*fn)(void *user, const char *uid,
                                        const char *ctr, const char *ctr_dir),
                             void *user) {
  each_ctr ec = {fn, user, NULL};
  gf__node_each_pod(state_dir, each_ctr_in_pod, &ec);
}

_Static_assert(GF_CTR_GRANT_MAX_GPUS == GF_REGION_DEVICES,
               "a grant.json's GPUs are the region's devices");

int gf__node_read_ctr_grant(const char *ctr_dir, gf_ctr_grant *g) {
  memset(g, 0, sizeof(*g));
  char path[GF_NODE_PATH_MAX];
  if (!gf__node_join(path, sizeof(path), ctr_dir, GF_CTR_GRANT_FILE))
    return GF_ELIMIT;
  char *text;
  size_t len;
  int rc = gf__node_read_file(path, GF_CTR_GRANT_MAX, &text, &len, NULL);
  if (rc)
    return rc;
  rc = gf_ctr_grant_parse(text, len, g, NULL);
  gf__free(text);
  return rc;
}

/* The minor of /dev/nvidia-caps/nvidia-cap<N> for one capability file:
 * the value of its "DeviceFileMinor:" line.  GF_EIO naming the file. */
static int cap_minor(const char *path, unsigned *minor, gf_diag *d) {
  char *text = NULL;
  size_t len = 0;
  int rc = gf__node_read_file(path, 4096, &text, &len, d);
  if (rc)
    return rc;
  bool found = false, ok = false;
  for (char *line = text; line && *line && !found;) {
    char *nl = strchr(line, '\n');
    if (nl)
      *nl = '\0';
    unsigned v = 0;
    char tail = 0;
    if (strncmp(line, "DeviceFileMinor:", 16) == 0) {
      found = true;
      ok = sscanf(line + 16, " %u %c", &v, &tail) == 1 && v < (1u << 20);
      if (ok)
        *minor = v;
    }
    line = nl ? nl + 1 : NULL;
  }
  gf__free(text);
  if (!ok)
    return gf_diag_set(d, GF_EIO, "%s: %s", path,
                       found ? "bad DeviceFileMinor line"
                             : "no DeviceFileMinor line");
  return 0;
}

int gf__node_mig_cap_minor(const char *proc, const gf_node_gpu *g,
                           const gf_node_mig *m, int level, unsigned *minor,
                           gf_diag *d) {
  char path[GF_NODE_PATH_MAX];
  int w = level == 0
              ? snprintf(path, sizeof(path),
                         "%s/driver/nvidia/capabilities/gpu%u/mig/gi%u/access",
                         proc, g->minor, m->gi)
              : snprintf(path, sizeof(path),
                         "%s/driver/nvidia/capabilities/gpu%u/mig/gi%u/ci%u/"
                         "access",
                         proc, g->minor, m->gi, m->ci);
  if (w < 0 || (size_t)w >= sizeof(path))
    return gf_diag_set(d, GF_ELIMIT, "capability path under %s too long", proc);
  return cap_minor(path, minor, d);
}

char *gf__node_json_dumps(const json_t *j, size_t flags) {
  return gf__json_dumps(j, flags);
}
