/*
 * The slice of the CUDA driver API and NVML that the interposer touches,
 * declared here from the published API (no CUDA or NVML headers are needed
 * to build).  With GF_SHIM_CHECK_CUDA_H defined, the types come from the
 * real cuda.h instead, so tests/shim/check_signatures.c can compare every
 * hooked signature with the PFN_ typedefs of cudaTypedefs.h.
 *
 * GF_SHIM_HOOKS is the one table of hooked driver functions, one row each:
 *   X(symbol, its PFN_ typedef in cudaTypedefs.h, (params), (args))
 * (every one returns CUresult).  A function with several variants (_v2,
 * the _ptsz / _ptds per-thread-default-stream ones) has a row per variant;
 * every name a CUDA runtime asks cuGetProcAddress for that is not hooked is
 * in pass_through.h with the reason (test_shim_hooks checks both).
 */
#ifndef GPUFRAC_SHIM_CUDA_API_H
#define GPUFRAC_SHIM_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef GF_SHIM_CHECK_CUDA_H
#include <cuda.h>
typedef CUresult gf_cu_result;
#else
typedef enum gf_cu_result_enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_UNKNOWN = 999,
} gf_cu_result;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUfunc_st *CUfunction;
typedef struct CUmod_st *CUmodule; /* the probes load a kernel (not hooked) */
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef uint64_t cuuint64_t;
typedef int CUdriverProcAddressQueryResult;
typedef struct CUuuid_st {
  char bytes[16];
} CUuuid;
typedef struct CUexecAffinityParam_st CUexecAffinityParam;
typedef struct CUctxCreateParams_st CUctxCreateParams;
typedef int CUmemPool_attribute;
typedef int CUdevice_attribute;
typedef void (*CUhostFn)(void *data);
typedef int CUstreamCaptureStatus; /* 0 = CU_STREAM_CAPTURE_STATUS_NONE */
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
typedef struct CUmemLocation_st {
  int type; /* 1 = device */
  int id;
} CUmemLocation;
typedef struct CUmemAllocationProp_st {
  int type;
  int requestedHandleTypes;
  CUmemLocation location;
  void *win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;
typedef struct CUDA_ARRAY_DESCRIPTOR_st {
  size_t Width;
  size_t Height;
  int Format;
  unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;
typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
  size_t Width;
  size_t Height;
  size_t Depth;
  int Format;
  unsigned int NumChannels;
  unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;
typedef struct CUlaunchConfig_st {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  void *attrs;
  unsigned int numAttrs;
} CUlaunchConfig;
typedef struct CUDA_LAUNCH_PARAMS_st {
  CUfunction function;
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  void **kernelParams;
} CUDA_LAUNCH_PARAMS;
#define CU_MEM_ATTACH_GLOBAL 0x1
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (1 << 1)
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT GF_CU_MEMPOOL_RESERVED_MEM_CURRENT
#define CU_MEMPOOL_ATTR_USED_MEM_CURRENT GF_CU_MEMPOOL_USED_MEM_CURRENT
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT                               \
  GF_CU_DEVICE_MULTIPROCESSOR_COUNT
#define CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR                      \
  GF_CU_DEVICE_MAX_BLOCKS_PER_MULTIPROCESSOR
#endif

/* Enum values the interposer passes to the driver, from cuda.h;
 * check_signatures.c asserts them against the real header. */
#define GF_CU_MEMPOOL_RESERVED_MEM_CURRENT 5
#define GF_CU_MEMPOOL_USED_MEM_CURRENT 7
#define GF_CU_DEVICE_MULTIPROCESSOR_COUNT 16
#define GF_CU_DEVICE_MAX_BLOCKS_PER_MULTIPROCESSOR 106

/* Bytes per element of a CUarray_format (0 for formats we do not size). */
static inline size_t gf__cu_format_bytes(int format) {
  switch (format) {
  case 0x01: /* UNSIGNED_INT8 */
  case 0x08: /* SIGNED_INT8 */
    return 1;
  case 0x02: /* UNSIGNED_INT16 */
  case 0x09: /* SIGNED_INT16 */
  case 0x10: /* HALF */
    return 2;
  case 0x03: /* UNSIGNED_INT32 */
  case 0x0a: /* SIGNED_INT32 */
  case 0x20: /* FLOAT */
    return 4;
  default:
    return 0;
  }
}

#define GF_SHIM_HOOKS(X)                                                       \
  X(cuInit, PFN_cuInit_v2000, (unsigned int flags), (flags))                   \
  X(cuMemAlloc_v2, PFN_cuMemAlloc_v3020, (CUdeviceptr * dptr, size_t bytes),   \
    (dptr, bytes))                                                             \
  X(cuMemAllocPitch_v2, PFN_cuMemAllocPitch_v3020,                             \
    (CUdeviceptr * dptr, size_t * pitch, size_t width, size_t height,          \
     unsigned int elem),                                                       \
    (dptr, pitch, width, height, elem))                                        \
  X(cuMemAllocManaged, PFN_cuMemAllocManaged_v6000,                            \
    (CUdeviceptr * dptr, size_t bytes, unsigned int flags),                    \
    (dptr, bytes, flags))                                                      \
  X(cuMemFree_v2, PFN_cuMemFree_v3020, (CUdeviceptr dptr), (dptr))             \
  X(cuMemAllocAsync, PFN_cuMemAllocAsync_v11020,                               \
    (CUdeviceptr * dptr, size_t bytes, CUstream s), (dptr, bytes, s))          \
  X(cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync_v11020_ptsz,                     \
    (CUdeviceptr * dptr, size_t bytes, CUstream s), (dptr, bytes, s))          \
  X(cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync_v11020,               \
    (CUdeviceptr * dptr, size_t bytes, CUmemoryPool pool, CUstream s),         \
    (dptr, bytes, pool, s))                                                    \
  X(cuMemAllocFromPoolAsync_ptsz, PFN_cuMemAllocFromPoolAsync_v11020_ptsz,     \
    (CUdeviceptr * dptr, size_t bytes, CUmemoryPool pool, CUstream s),         \
    (dptr, bytes, pool, s))                                                    \
  X(cuMemFreeAsync, PFN_cuMemFreeAsync_v11020, (CUdeviceptr dptr, CUstream s), \
    (dptr, s))                                                                 \
  X(cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync_v11020_ptsz,                       \
    (CUdeviceptr dptr, CUstream s), (dptr, s))                                 \
  X(cuMemCreate, PFN_cuMemCreate_v10020,                                       \
    (CUmemGenericAllocationHandle * h, size_t size,                            \
     const CUmemAllocationProp *prop, unsigned long long flags),               \
    (h, size, prop, flags))                                                    \
  X(cuMemRelease, PFN_cuMemRelease_v10020, (CUmemGenericAllocationHandle h),   \
    (h))                                                                       \
  X(cuMemMap, PFN_cuMemMap_v10020,                                             \
    (CUdeviceptr ptr, size_t size, size_t offset,                              \
     CUmemGenericAllocationHandle h, unsigned long long flags),                \
    (ptr, size, offset, h, flags))                                             \
  X(cuMemUnmap, PFN_cuMemUnmap_v10020, (CUdeviceptr ptr, size_t size),         \
    (ptr, size))                                                               \
  X(cuArrayCreate_v2, PFN_cuArrayCreate_v3020,                                 \
    (CUarray * a, const CUDA_ARRAY_DESCRIPTOR *desc), (a, desc))               \
  X(cuArray3DCreate_v2, PFN_cuArray3DCreate_v3020,                             \
    (CUarray * a, const CUDA_ARRAY3D_DESCRIPTOR *desc), (a, desc))             \
  X(cuArrayDestroy, PFN_cuArrayDestroy_v2000, (CUarray a), (a))                \
  X(cuMipmappedArrayCreate, PFN_cuMipmappedArrayCreate_v5000,                  \
    (CUmipmappedArray * h, const CUDA_ARRAY3D_DESCRIPTOR *desc,                \
     unsigned int levels),                                                     \
    (h, desc, levels))                                                         \
  X(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy_v5000,                \
    (CUmipmappedArray h), (h))                                                 \
  X(cuMemGetInfo_v2, PFN_cuMemGetInfo_v3020, (size_t * free, size_t * total),  \
    (free, total))                                                             \
  X(cuDeviceTotalMem_v2, PFN_cuDeviceTotalMem_v3020,                           \
    (size_t * bytes, CUdevice dev), (bytes, dev))                              \
  X(cuLaunchKernel, PFN_cuLaunchKernel_v4000,                                  \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,          \
     unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,    \
     CUstream s, void **params, void **extra),                                 \
    (f, gx, gy, gz, bx, by, bz, shmem, s, params, extra))                      \
  X(cuLaunchKernel_ptsz, PFN_cuLaunchKernel_v7000_ptsz,                        \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,          \
     unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,    \
     CUstream s, void **params, void **extra),                                 \
    (f, gx, gy, gz, bx, by, bz, shmem, s, params, extra))                      \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx_v11060,                             \
    (const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra),    \
    (cfg, f, params, extra))                                                   \
  X(cuLaunchCooperativeKernel, PFN_cuLaunchCooperativeKernel_v9000,            \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,          \
     unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,    \
     CUstream s, void **params),                                               \
    (f, gx, gy, gz, bx, by, bz, shmem, s, params))                             \
  X(cuLaunchKernelEx_ptsz, PFN_cuLaunchKernelEx_v11060_ptsz,                   \
    (const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra),    \
    (cfg, f, params, extra))                                                   \
  X(cuLaunchCooperativeKernel_ptsz, PFN_cuLaunchCooperativeKernel_v9000_ptsz,  \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,          \
     unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,    \
     CUstream s, void **params),                                               \
    (f, gx, gy, gz, bx, by, bz, shmem, s, params))                             \
  X(cuLaunchCooperativeKernelMultiDevice,                                      \
    PFN_cuLaunchCooperativeKernelMultiDevice_v9000,                            \
    (CUDA_LAUNCH_PARAMS * list, unsigned int ndev, unsigned int flags),        \
    (list, ndev, flags))                                                       \
  X(cuGraphLaunch, PFN_cuGraphLaunch_v10000, (CUgraphExec g, CUstream s),      \
    (g, s))                                                                    \
  X(cuGraphLaunch_ptsz, PFN_cuGraphLaunch_v10000_ptsz,                         \
    (CUgraphExec g, CUstream s), (g, s))                                       \
  X(cuCtxCreate_v2, PFN_cuCtxCreate_v3020,                                     \
    (CUcontext * pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev))  \
  X(cuCtxCreate_v3, PFN_cuCtxCreate_v11040,                                    \
    (CUcontext * pctx, CUexecAffinityParam * params, int nparams,              \
     unsigned int flags, CUdevice dev),                                        \
    (pctx, params, nparams, flags, dev))                                       \
  X(cuCtxCreate_v4, PFN_cuCtxCreate_v12050,                                    \
    (CUcontext * pctx, CUctxCreateParams * params, unsigned int flags,         \
     CUdevice dev),                                                            \
    (pctx, params, flags, dev))                                                \
  X(cuCtxDestroy_v2, PFN_cuCtxDestroy_v4000, (CUcontext ctx), (ctx))           \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000,              \
    (CUcontext * pctx, CUdevice dev), (pctx, dev))                             \
  X(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v11000,        \
    (CUdevice dev), (dev))                                                     \
  X(cuDevicePrimaryCtxReset_v2, PFN_cuDevicePrimaryCtxReset_v11000,            \
    (CUdevice dev), (dev))                                                     \
  /* The pre-11.0 symbols, which CUDA runtimes still ask for (version 7000);   \
   * their PFN_..._v7000 is internal to cudaTypedefs.h, of the same type. */   \
  X(cuDevicePrimaryCtxRelease, PFN_cuDevicePrimaryCtxRelease_v11000,           \
    (CUdevice dev), (dev))                                                     \
  X(cuDevicePrimaryCtxReset, PFN_cuDevicePrimaryCtxReset_v11000,               \
    (CUdevice dev), (dev))                                                     \
  X(cuMemPoolTrimTo, PFN_cuMemPoolTrimTo_v11020,                               \
    (CUmemoryPool pool, size_t keep), (pool, keep))                            \
  X(cuMemPoolDestroy, PFN_cuMemPoolDestroy_v11020, (CUmemoryPool pool),        \
    (pool))                                                                    \
  X(cuGetProcAddress, PFN_cuGetProcAddress_v11030,                             \
    (const char *sym, void **pfn, int ver, cuuint64_t flags),                  \
    (sym, pfn, ver, flags))                                                    \
  X(cuGetProcAddress_v2, PFN_cuGetProcAddress_v12000,                          \
    (const char *sym, void **pfn, int ver, cuuint64_t flags,                   \
     CUdriverProcAddressQueryResult *status),                                  \
    (sym, pfn, ver, flags, status))

/* Driver functions the interposer calls but does not hook, in the same
 * form (their signatures are checked the same way). */
#define GF_SHIM_REAL(X)                                                        \
  X(cuCtxGetDevice, PFN_cuCtxGetDevice_v2000, (CUdevice * dev), (dev))         \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000, (int *n), (n))               \
  X(cuDeviceGetUuid, PFN_cuDeviceGetUuid_v9020, (CUuuid * uuid, CUdevice dev), \
    (uuid, dev))                                                               \
  X(cuDeviceGetUuid_v2, PFN_cuDeviceGetUuid_v11040,                            \
    (CUuuid * uuid, CUdevice dev), (uuid, dev))                                \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000,                      \
    (int *value, CUdevice_attribute attr, CUdevice dev), (value, attr, dev))   \
  X(cuDeviceGetMemPool, PFN_cuDeviceGetMemPool_v11020,                         \
    (CUmemoryPool * pool, CUdevice dev), (pool, dev))                          \
  X(cuMemPoolGetAttribute, PFN_cuMemPoolGetAttribute_v11020,                   \
    (CUmemoryPool pool, CUmemPool_attribute attr, void *value),                \
    (pool, attr, value))                                                       \
  X(cuCtxPushCurrent_v2, PFN_cuCtxPushCurrent_v4000, (CUcontext ctx), (ctx))   \
  X(cuCtxPopCurrent_v2, PFN_cuCtxPopCurrent_v4000, (CUcontext * pctx), (pctx)) \
  X(cuLaunchHostFunc, PFN_cuLaunchHostFunc_v10000,                             \
    (CUstream s, CUhostFn fn, void *data), (s, fn, data))                      \
  X(cuStreamIsCapturing, PFN_cuStreamIsCapturing_v10000,                       \
    (CUstream s, CUstreamCaptureStatus * status), (s, status))                 \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000, (CUstream s), (s))

#ifndef GF_SHIM_CHECK_CUDA_H /* cuda.h #defines some of these names */
/* Declarations of the wrappers (the exported symbols). */
#define GF__SHIM_DECL(name, pfn, params, args) gf_cu_result name params;
GF_SHIM_HOOKS(GF__SHIM_DECL)
#undef GF__SHIM_DECL
#endif

/* NVML: the memory and process queries we answer.  Layouts from the
 * published nvml.h, pinned below. */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef int nvmlReturn_t; /* 0 = NVML_SUCCESS */
#define GF_NVML_SUCCESS 0
#define GF_NVML_ERROR_INVALID_ARGUMENT 2
#define GF_NVML_ERROR_INSUFFICIENT_SIZE 7
#define GF_NVML_ERROR_LIBRARY_NOT_FOUND 12
#define GF_NVML_VALUE_NOT_AVAILABLE 0xffffffffu
/* nvmlDeviceGet{Compute,Graphics}RunningProcesses (the unversioned, oldest
 * symbols) fill v1; their _v2 and _v3 fill v2 (nvml.h's nvmlProcessInfo_t). */
typedef struct gf_nvml_process_v1 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;
typedef struct gf_nvml_process_v2 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t");
_Static_assert(offsetof(nvmlProcessInfo_v1_t, usedGpuMemory) == 8,
               "nvmlProcessInfo_v1_t");
_Static_assert(sizeof(nvmlProcessInfo_v2_t) == 24, "nvmlProcessInfo_v2_t");
_Static_assert(offsetof(nvmlProcessInfo_v2_t, gpuInstanceId) == 16,
               "nvmlProcessInfo_v2_t");
_Static_assert(offsetof(nvmlProcessInfo_v2_t, computeInstanceId) == 20,
               "nvmlProcessInfo_v2_t");
typedef struct gf_nvml_memory {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct gf_nvml_memory_v2 {
  unsigned int version;
  unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *mem);

#endif
