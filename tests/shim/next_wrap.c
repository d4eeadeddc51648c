/* A preloaded library that wraps getpid and finds the original with
 * dlsym(RTLD_NEXT), as profilers and sanitizers' interposers do. Preloaded
 * after libgpufrac-cuda.so, whose dlsym stands in front of the C library's:
 * the lookup must still mean "next after this library", not "next after
 * the interposer" (which would hand back this very getpid). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

static pid_t (*next_getpid)(void);
static int depth;

pid_t getpid(void) {
  if (!next_getpid)
    *(void **)&next_getpid = dlsym(RTLD_NEXT, "getpid");
  if (!next_getpid || (void *)next_getpid == (void *)getpid || depth > 0) {
    static const char msg[] = "FAIL RTLD_NEXT gave back the wrapper itself\n";
    if (write(2, msg, sizeof(msg) - 1) < 0)
      _exit(4);
    _exit(3);
  }
  depth++;
  pid_t p = next_getpid();
  depth--;
  return p;
}

__attribute__((constructor)) static void check(void) {
  if (getpid() <= 0) {
    static const char msg[] = "FAIL getpid through RTLD_NEXT\n";
    if (write(2, msg, sizeof(msg) - 1) < 0)
      _exit(4);
    _exit(3);
  }
}
