/*
 * What the interposer's test programs (probe.c, probe_mem.c, check_hooks.c,
 * and tests/gpu/cudart_check.c for its report) share: the one-line-per-check
 * report, the one way they open the driver, and the fake driver's own record
 * of the device's peak use.
 */
#ifndef GPUFRAC_TESTS_SHIM_PROBE_UTIL_H
#define GPUFRAC_TESTS_SHIM_PROBE_UTIL_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int failures;
/* Prints "ok   ..." or "FAIL ..." and counts the failures. */
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (cond) {                                                                \
      printf("ok   ");                                                         \
    } else {                                                                   \
      printf("FAIL ");                                                         \
      failures++;                                                              \
    }                                                                          \
    printf(__VA_ARGS__);                                                       \
    printf("\n");                                                              \
    fflush(stdout);                                                            \
  } while (0)

/* libcuda.so.1 as a program finds it (with the interposer preloaded, its
 * dlsym answers through this handle); exits 2 with dlerror()'s words when
 * it cannot be opened.  flags: RTLD_NOW, with RTLD_GLOBAL where wanted. */
static inline void *probe_open_driver(int flags) {
  void *h = dlopen("libcuda.so.1", flags);
  if (!h) {
    fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
    exit(2);
  }
  return h;
}

/* The fake device's own peak usage (the second word of the file
 * FAKE_CUDA_SHARED names), 0 when unknown. */
static inline uint64_t probe_device_peak(void) {
  uint64_t words[2] = {0, 0};
  const char *shared = getenv("FAKE_CUDA_SHARED");
  FILE *fp = shared ? fopen(shared, "rb") : NULL;
  if (fp && fread(words, sizeof(words), 1, fp) != 1)
    words[1] = 0;
  if (fp)
    fclose(fp);
  return words[1];
}

#endif
