/*
 * A pod's view of a model (gpufrac/modelcache.h, gf_node_cache_pod_view):
 * the model's files hard-linked into a directory of the pod's own, on the
 * cache's filesystem, so a directory mounted into the container before the
 * model was there shows the files once they are linked in.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpufrac/error.h"
#include "modelcache_int.h"

/* nftw has no user pointer: one view is built at a time per thread. */
static _Thread_local struct view_ctx {
  const char *src, *dst;
  size_t srclen;
  int err;
  char what[PATH_MAX + 64];
} * ctx;

static int link_one(const char *path, const struct stat *st, int type,
                    struct FTW *f) {
  (void)f;
  struct view_ctx *v = ctx;
  const char *rel = path + v->srclen; /* "" or "/sub/file" */
  char to[PATH_MAX];
  int n = snprintf(to, sizeof(to), "%s%s", v->dst, rel);
  if (n < 0 || (size_t)n >= sizeof(to)) {
    v->err = ENAMETOOLONG;
    snprintf(v->what, sizeof(v->what), "%s%s: path too long", v->dst, rel);
    return 1;
  }
  if (type == FTW_D) {
    if (mkdir(to, 0755) && errno != EEXIST) {
      v->err = errno;
      snprintf(v->what, sizeof(v->what), "mkdir %s: %s", to, strerror(errno));
      return 1;
    }
    return 0;
  }
  if (type == FTW_F && S_ISREG(st->st_mode)) {
    if (link(path, to) && errno != EEXIST) {
      v->err = errno;
      snprintf(v->what, sizeof(v->what), "link %s -> %s: %s", path, to,
               strerror(errno));
      return 1;
    }
    return 0;
  }
  v->err = EINVAL; /* a published model holds only files and directories */
  snprintf(v->what, sizeof(v->what), "%s: not a file or directory", path);
  return 1;
}

int gf_node_cache_pod_view(const char *files, const char *dst, gf_diag *d) {
  struct view_ctx v = {.src = files, .dst = dst, .srclen = strlen(files)};
  ctx = &v;
  int rc = nftw(files, link_one, 16, FTW_PHYS);
  ctx = NULL;
  if (rc == 0)
    return 0;
  if (!v.err)
    return gf_diag_set(d, GF_EIO, "model view %s from %s: %s", dst, files,
                       strerror(errno));
  return gf_diag_set(d, v.err == EXDEV ? GF_ESTATE : GF_EIO, "model view: %s%s",
                     v.what,
                     v.err == EXDEV ? " (the pods' directory must be on the "
                                      "cache's filesystem)"
                                    : "");
}

bool gf_node_cache_view_remove(const char *dir) { return gf__mc_rmtree(dir); }
