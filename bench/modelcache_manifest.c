/*
 * bench/modelcache_manifest: how long gf_node_cache_manifest_parse takes on
 * the largest manifests a source may send (16 MiB), shaped to cost the most:
 *   deep   every path 512 components deep ("d/d/.../d/NNNNNN", ~1 KiB),
 *   chain  each path the one before plus a byte ("p", "p!", "p!!", ...:
 *          every path a prefix of the next, never a directory of it),
 *   flat   65536 short paths (the file limit).
 *   bench_modelcache_manifest [--runs N]
 * Prints per shape: lines, bytes, the median seconds of N parses (default
 * 5) and MB/s.  docs/benchmarks.md has the figures.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpufrac/diag.h"
#include "gpufrac/modelcache.h"

#define HEX64 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define MAX (16u << 20)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Appends lines made by line(i, buf) until the next would pass MAX or the
 * file limit; returns the length. */
static size_t build(char *t, size_t (*line)(size_t i, char *out),
                    size_t *lines) {
  size_t n = 0, i = 0;
  char l[2048];
  for (; i < GF_NODE_CACHE_FILES_MAX; i++) {
    size_t k = line(i, l);
    if (k == 0 || n + k > MAX)
      break;
    memcpy(t + n, l, k);
    n += k;
  }
  *lines = i;
  return n;
}

static size_t deep(size_t i, char *out) {
  size_t n = 0;
  for (int k = 0; k < 505; k++) {
    out[n++] = 'd';
    out[n++] = '/';
  }
  return n + (size_t)snprintf(out + n, 100, "%06zu\t1\t" HEX64 "\n", i);
}

static size_t chain(size_t i, char *out) {
  if (i >= GF_NODE_CACHE_PATH_MAX)
    return 0; /* paths up to the 1024-byte limit */
  out[0] = 'p';
  memset(out + 1, '!', i);
  return 1 + i + (size_t)snprintf(out + 1 + i, 100, "\t1\t" HEX64 "\n");
}

static size_t flat(size_t i, char *out) {
  return (size_t)snprintf(out, 200, "w/%08zu.bin\t1\t" HEX64 "\n", i);
}

int main(int argc, char **argv) {
  int runs = 5;
  if (argc == 3 && !strcmp(argv[1], "--runs"))
    runs = (int)strtol(argv[2], NULL, 10);
  if (runs < 1 || runs > 100) {
    fprintf(stderr, "usage: bench_modelcache_manifest [--runs 1..100]\n");
    return 2;
  }
  char *t = malloc(MAX);
  double *dt = malloc(sizeof(double) * (size_t)runs);
  if (!t || !dt)
    return 1;
  struct {
    const char *name;
    size_t (*line)(size_t, char *);
  } shapes[] = {{"deep", deep}, {"chain", chain}, {"flat", flat}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    size_t lines = 0, len = build(t, shapes[s].line, &lines);
    for (int r = 0; r < runs; r++) {
      gf_node_cache_manifest m;
      gf_diag d = {""};
      double t0 = now_s();
      int rc = gf_node_cache_manifest_parse(t, len, &m, &d);
      dt[r] = now_s() - t0;
      if (rc) {
        fprintf(stderr, "%s: %s\n", shapes[s].name, d.msg);
        return 1;
      }
      gf_node_cache_manifest_release(&m);
    }
    qsort(dt, (size_t)runs, sizeof(double), cmp_d);
    double med = dt[runs / 2];
    printf("%-6s lines=%zu bytes=%zu median_s=%.4f MB/s=%.1f\n", shapes[s].name,
           lines, len, med, (double)len / med / 1e6);
  }
  free(dt);
  free(t);
  return 0;
}
