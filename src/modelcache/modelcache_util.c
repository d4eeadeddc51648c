/*
 * The weight cache's small shared pieces (modelcache_int.h): hex digests,
 * a file's sha256, the log line.  Used by the store (modelcache.c) and the
 * downloads (modelcache_fetch.c), so that neither calls the other back.
 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "modelcache_int.h"

void gf__mc_to_hex(const unsigned char *md, unsigned n, char *hex) {
  static const char digits[] = "0123456789abcdef";
  for (unsigned i = 0; i < n; i++) {
    hex[2 * i] = digits[md[i] >> 4];
    hex[2 * i + 1] = digits[md[i] & 15];
  }
  hex[2 * n] = '\0';
}

int gf__mc_hash_file(const char *path, uint64_t *size,
                     char hex[GF_NODE_CACHE_HEX], gf_diag *d) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return gf_diag_set(d, GF_EIO, "%s: %s", path, strerror(errno));
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  unsigned char *buf = gf__malloc(1u << 20);
  int rc = 0;
  if (!ctx || !buf) {
    rc = gf_diag_set(d, GF_ENOMEM, "%s: out of memory", path);
    goto out;
  }
  EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
  uint64_t total = 0;
  for (;;) {
    ssize_t r = read(fd, buf, 1u << 20);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      rc = gf_diag_set(d, GF_EIO, "%s: %s", path, strerror(errno));
      goto out;
    }
    if (r == 0)
      break;
    EVP_DigestUpdate(ctx, buf, (size_t)r);
    total += (uint64_t)r;
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  gf__mc_to_hex(md, n, hex);
  *size = total;
out:
  EVP_MD_CTX_free(ctx);
  gf__free(buf);
  close(fd);
  return rc;
}

void gf__mc_log(const gf__mc_opts *o, const char *fmt, ...) {
  char line[GF_DIAG_MAX + 256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  o->log(o->log_user, line);
}

int gf__mc_fs_space(const char *path, uint64_t *free, uint64_t *total) {
  struct statvfs v;
  if (statvfs(path, &v) != 0)
    return GF_EIO;
  *free = (uint64_t)v.f_bavail * v.f_frsize;
  *total = (uint64_t)v.f_blocks * v.f_frsize;
  return 0;
}

/* A manifest path: relative, components neither empty nor "." nor "..",
 * no byte below 0x20 or 0x7f, not ending in ".part". NULL when fine, else
 * why not. */
const char *gf__mc_path_problem(const char *p, size_t n) {
  if (n == 0)
    return "an empty path";
  if (n > GF_NODE_CACHE_PATH_MAX)
    return "a path longer than 1024 bytes";
  if (p[0] == '/')
    return "an absolute path";
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
      return "a control byte in the path";
  size_t start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i < n && p[i] != '/')
      continue;
    size_t len = i - start;
    if (len == 0)
      return "an empty path component";
    if ((len == 1 && p[start] == '.') ||
        (len == 2 && p[start] == '.' && p[start + 1] == '.'))
      return "a '.' or '..' path component";
    start = i + 1;
  }
  /* the fetcher downloads <path> into <path>.part: a manifest naming both
   * "a" and "a.part" would have one file's part replace the other's */
  if (n >= 5 && memcmp(p + n - 5, ".part", 5) == 0)
    return "a path ending in '.part' (the fetcher's own suffix)";
  return NULL;
}
