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
