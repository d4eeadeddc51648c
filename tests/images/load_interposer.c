/* Loads the interposer an image holds (dlopen, as a CUDA program's loader
 * would under LD_PRELOAD) and calls its cuInit: tests/images builds it for
 * each image's architecture and runs it with that image's ld.so and
 * libraries (arm64 under qemu-user-static).  With no driver in the image
 * cuInit must answer CUDA_ERROR_NOT_INITIALIZED (3), not crash.
 * Prints "cuInit N"; exits 1 when the library or cuInit cannot be loaded.
 * Usage: load_interposer PATH */
#include <dlfcn.h>
#include <stdio.h>

typedef int (*cu_init_fn)(unsigned int);

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: load_interposer PATH\n");
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "load_interposer: %s\n", dlerror());
    return 1;
  }
  cu_init_fn cu_init;
  *(void **)&cu_init = dlsym(h, "cuInit");
  if (!cu_init) {
    fprintf(stderr, "load_interposer: no cuInit: %s\n", dlerror());
    return 1;
  }
  printf("cuInit %d\n", cu_init(0));
  return 0;
}
