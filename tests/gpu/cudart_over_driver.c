/*
 * The runtime calls cudart_check.c makes, each made straight to the driver
 * API: a stand-in for libcudart, so tests/gpu/run.sh's cudart program runs
 * here on the fake driver (NVIDIA's runtime does not start over it) before
 * it meets a GPU.  Error codes are the runtime's where they differ
 * (cudaErrorMemoryAllocation is the driver's CUDA_ERROR_OUT_OF_MEMORY, 2).
 * The driver is reached by dlopen + dlsym, as a runtime does, so the
 * interposer under LD_PRELOAD sees every call.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda_api.h"

typedef int cudaError_t;
typedef struct cudart_dim3 {
  unsigned int x, y, z;
} dim3;
typedef struct cudart_launch_config {
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes;
  CUstream stream;
  void *attrs;
  unsigned int numAttrs;
} cudaLaunchConfig_t;

static void *drv;
static void *sym(const char *name) {
  if (!drv)
    drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  return drv ? dlsym(drv, name) : NULL;
}
/* Calls driver function `name` of parameter types PARAMS. */
#define CALL(name, PARAMS, ...)                                                \
  do {                                                                         \
    gf_cu_result(*f_) PARAMS;                                                  \
    *(void **)&f_ = sym(name);                                                 \
    return f_ ? (cudaError_t)f_(__VA_ARGS__) : 999;                            \
  } while (0)

static cudaError_t last;
cudaError_t cudaGetLastError(void) {
  cudaError_t e = last;
  last = 0;
  return e;
}
const char *cudaGetErrorString(cudaError_t e) {
  static char b[32];
  snprintf(b, sizeof(b), "error %d", e);
  return e ? b : "no error";
}

cudaError_t cudaSetDevice(int dev) {
  gf_cu_result (*init)(unsigned);
  gf_cu_result (*retain)(CUcontext *, CUdevice);
  gf_cu_result (*set)(CUcontext);
  *(void **)&init = sym("cuInit");
  *(void **)&retain = sym("cuDevicePrimaryCtxRetain");
  *(void **)&set = sym("cuCtxSetCurrent");
  CUcontext c;
  if (!init || !retain || !set || init(0) || retain(&c, dev))
    return last = 3;
  return (cudaError_t)set(c);
}
cudaError_t cudaMalloc(void **p, size_t b) {
  CALL("cuMemAlloc_v2", (CUdeviceptr *, size_t), (CUdeviceptr *)p, b);
}
cudaError_t cudaMallocManaged(void **p, size_t b, unsigned int f) {
  CALL("cuMemAllocManaged", (CUdeviceptr *, size_t, unsigned), (CUdeviceptr *)p,
       b, f);
}
cudaError_t cudaMallocAsync(void **p, size_t b, CUstream s) {
  CALL("cuMemAllocAsync", (CUdeviceptr *, size_t, CUstream), (CUdeviceptr *)p,
       b, s);
}
cudaError_t cudaFree(void *p) {
  CALL("cuMemFree_v2", (CUdeviceptr), (CUdeviceptr)p);
}
cudaError_t cudaFreeAsync(void *p, CUstream s) {
  CALL("cuMemFreeAsync", (CUdeviceptr, CUstream), (CUdeviceptr)p, s);
}
cudaError_t cudaStreamSynchronize(CUstream s) {
  CALL("cuStreamSynchronize", (CUstream), s);
}
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) {
  CALL("cuMemGetInfo_v2", (size_t *, size_t *), f, t);
}
cudaError_t cudaDeviceGetAttribute(int *v, int a, int dev) {
  CALL("cuDeviceGetAttribute", (int *, int, CUdevice), v, a, dev);
}
cudaError_t cudaDeviceSynchronize(void) { CALL("cuCtxSynchronize", (void)); }
/* A library is the module, a kernel its function. */
cudaError_t cudaLibraryLoadData(void **lib, const void *code, void *jo,
                                void **jv, unsigned nj, void *lo, void **lv,
                                unsigned nl) {
  (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
  CALL("cuModuleLoadData", (CUmodule *, const void *), (CUmodule *)lib, code);
}
cudaError_t cudaLibraryGetKernel(void **k, void *lib, const char *name) {
  CALL("cuModuleGetFunction", (CUfunction *, CUmodule, const char *),
       (CUfunction *)k, (CUmodule)lib, name);
}
typedef gf_cu_result (*launch_fn)(CUfunction, unsigned, unsigned, unsigned,
                                  unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void **, void **);
static cudaError_t launch(const char *name, const void *f, dim3 g, dim3 b,
                          void **args, size_t sh, CUstream s) {
  launch_fn fn;
  *(void **)&fn = sym(name);
  return fn ? (cudaError_t)fn((CUfunction)(uintptr_t)f, g.x, g.y, g.z, b.x, b.y,
                              b.z, (unsigned)sh, s, args, NULL)
            : 999;
}
cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args,
                             size_t sh, CUstream s) {
  return launch("cuLaunchKernel", f, g, b, args, sh, s);
}
cudaError_t cudaLaunchKernel_ptsz(const void *f, dim3 g, dim3 b, void **args,
                                  size_t sh, CUstream s) {
  return launch("cuLaunchKernel_ptsz", f, g, b, args, sh, s);
}
static cudaError_t launch_ex(const char *name, const cudaLaunchConfig_t *c,
                             const void *f, void **args) {
  CUlaunchConfig dc = {c->gridDim.x,
                       c->gridDim.y,
                       c->gridDim.z,
                       c->blockDim.x,
                       c->blockDim.y,
                       c->blockDim.z,
                       (unsigned)c->dynamicSmemBytes,
                       c->stream,
                       NULL,
                       0};
  CALL(name, (const CUlaunchConfig *, CUfunction, void **, void **), &dc,
       (CUfunction)(uintptr_t)f, args, NULL);
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *f,
                                void **args) {
  return launch_ex("cuLaunchKernelEx", c, f, args);
}
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *c, const void *f,
                                     void **args) {
  return launch_ex("cuLaunchKernelEx_ptsz", c, f, args);
}
