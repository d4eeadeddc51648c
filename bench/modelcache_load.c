/*
 * bench/modelcache_load: a model loader for bench/modelcache.sh.  Loads
 * every regular file under DIR into (fake) GPU memory through whatever
 * libcuda.so.1 the dynamic linker finds, with the interposer preloaded as
 * in a container: cuInit, a context, one cuMemAlloc per file (counted
 * against the container's limit), then the file read in 16 MiB chunks and
 * copied to the device.  tests/shim's fake driver has no cuMemcpyHtoD and
 * its device pointers are not backed, so when the driver exports none the
 * copy goes into a 256 MiB host buffer standing in for device memory (a
 * memcpy per chunk: what a copy costs the host side).
 *   modelcache_load [--drop] DIR
 * --drop first advises the files out of the page cache (posix_fadvise
 * DONTNEED; no root needed), for a cold page cache.
 * Prints "bytes=N seconds=S" (the load alone, after --drop).
 */
#define _XOPEN_SOURCE 700
#include <dlfcn.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int (*init_fn)(unsigned);
typedef int (*ctx_fn)(void **, unsigned, int);
typedef int (*alloc_fn)(unsigned long long *, size_t);
typedef int (*copy_fn)(unsigned long long, const void *, size_t);

#define CHUNK (16u << 20)
#define STAGE (256u << 20)

static char *g_files[4096];
static size_t g_nfiles;

static int collect(const char *p, const struct stat *st, int type,
                   struct FTW *f) {
  (void)f;
  if (type == FTW_F && S_ISREG(st->st_mode) && g_nfiles < 4096 &&
      !strstr(p, "gpufrac.manifest"))
    g_files[g_nfiles++] = strdup(p);
  return 0;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  int drop = argc == 3 && strcmp(argv[1], "--drop") == 0;
  if (argc != 2 + drop) {
    fprintf(stderr, "usage: modelcache_load [--drop] DIR\n");
    return 2;
  }
  if (nftw(argv[argc - 1], collect, 16, FTW_PHYS) != 0 || g_nfiles == 0) {
    fprintf(stderr, "modelcache_load: no files under %s\n", argv[argc - 1]);
    return 1;
  }
  if (drop)
    for (size_t i = 0; i < g_nfiles; i++) {
      int fd = open(g_files[i], O_RDONLY);
      if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
      }
    }
  double t0 = now();
  void *cu = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cu) {
    fprintf(stderr, "modelcache_load: %s\n", dlerror());
    return 1;
  }
  init_fn cu_init = (init_fn)dlsym(cu, "cuInit");
  ctx_fn cu_ctx = (ctx_fn)dlsym(cu, "cuCtxCreate_v2");
  alloc_fn cu_alloc = (alloc_fn)dlsym(cu, "cuMemAlloc_v2");
  copy_fn cu_copy = (copy_fn)dlsym(cu, "cuMemcpyHtoD_v2");
  void *ctx = NULL;
  if (!cu_init || !cu_ctx || !cu_alloc || cu_init(0) || cu_ctx(&ctx, 0, 0)) {
    fprintf(stderr, "modelcache_load: the driver did not initialise\n");
    return 1;
  }
  char *buf = malloc(CHUNK), *stage = cu_copy ? NULL : malloc(STAGE);
  if (!buf || (!cu_copy && !stage))
    return 1;
  memset(stage ? stage : buf, 0, stage ? STAGE : CHUNK); /* resident */
  uint64_t total = 0;
  size_t at = 0;
  for (size_t i = 0; i < g_nfiles; i++) {
    struct stat st;
    int fd = open(g_files[i], O_RDONLY);
    if (fd < 0 || fstat(fd, &st) != 0) {
      fprintf(stderr, "modelcache_load: %s: cannot open\n", g_files[i]);
      return 1;
    }
    unsigned long long dptr = 0;
    if (st.st_size > 0 && cu_alloc(&dptr, (size_t)st.st_size)) {
      fprintf(stderr, "modelcache_load: cuMemAlloc(%lld) refused\n",
              (long long)st.st_size);
      return 1;
    }
    for (;;) {
      ssize_t r = read(fd, buf, CHUNK);
      if (r < 0) {
        perror("read");
        return 1;
      }
      if (r == 0)
        break;
      if (cu_copy) {
        if (cu_copy(dptr, buf, (size_t)r))
          return 1;
        dptr += (unsigned long long)r;
      } else {
        if (at + (size_t)r > STAGE)
          at = 0;
        memcpy(stage + at, buf, (size_t)r);
        at += (size_t)r;
      }
      total += (uint64_t)r;
    }
    close(fd);
  }
  double t1 = now();
  printf("bytes=%llu seconds=%.3f\n", (unsigned long long)total, t1 - t0);
  return 0;
}
