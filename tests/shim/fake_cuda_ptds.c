/*
 * The fake driver's per-thread-default-stream symbols: every `_ptsz` /
 * `_ptds` name CUDA 13.0's cuda.h maps (tests/shim/data/ptds-variants.tsv),
 * each exported as its own function that counts its calls apart from its
 * legacy-stream twin, so a test sees which variant a call reached and a
 * variant the interposer does not wrap cannot hide behind another.  The
 * ones the interposer hooks have their real signatures in fake_cuda.c
 * (FAKE_PTDS_OWN); the rest only count (no caller passes them arguments
 * that matter: they are looked up and compared, or called to be counted).
 */
#include <stdatomic.h>
#include <string.h>

#include "cuda_api.h"
#include "fake_cuda.h"

/* X(base name, per-thread symbol) */
#define FAKE_PTDS_STUBS(X)                                                     \
  X(cuMemPrefetchAsync, cuMemPrefetchAsync_v2_ptsz)                            \
  X(cuMemPrefetchBatchAsync, cuMemPrefetchBatchAsync_ptsz)                     \
  X(cuMemDiscardBatchAsync, cuMemDiscardBatchAsync_ptsz)                       \
  X(cuMemDiscardAndPrefetchBatchAsync, cuMemDiscardAndPrefetchBatchAsync_ptsz) \
  X(cuMemcpyHtoD, cuMemcpyHtoD_v2_ptds)                                        \
  X(cuMemcpyDtoH, cuMemcpyDtoH_v2_ptds)                                        \
  X(cuMemcpyDtoD, cuMemcpyDtoD_v2_ptds)                                        \
  X(cuMemcpyDtoA, cuMemcpyDtoA_v2_ptds)                                        \
  X(cuMemcpyAtoD, cuMemcpyAtoD_v2_ptds)                                        \
  X(cuMemcpyHtoA, cuMemcpyHtoA_v2_ptds)                                        \
  X(cuMemcpyAtoH, cuMemcpyAtoH_v2_ptds)                                        \
  X(cuMemcpyAtoA, cuMemcpyAtoA_v2_ptds)                                        \
  X(cuMemcpyHtoAAsync, cuMemcpyHtoAAsync_v2_ptsz)                              \
  X(cuMemcpyAtoHAsync, cuMemcpyAtoHAsync_v2_ptsz)                              \
  X(cuMemcpy2D, cuMemcpy2D_v2_ptds)                                            \
  X(cuMemcpy2DUnaligned, cuMemcpy2DUnaligned_v2_ptds)                          \
  X(cuMemcpy3D, cuMemcpy3D_v2_ptds)                                            \
  X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2_ptsz)                              \
  X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2_ptsz)                              \
  X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2_ptsz)                              \
  X(cuMemcpy2DAsync, cuMemcpy2DAsync_v2_ptsz)                                  \
  X(cuMemcpy3DAsync, cuMemcpy3DAsync_v2_ptsz)                                  \
  X(cuMemcpyBatchAsync, cuMemcpyBatchAsync_v2_ptsz)                            \
  X(cuMemcpy3DBatchAsync, cuMemcpy3DBatchAsync_v2_ptsz)                        \
  X(cuMemcpyWithAttributesAsync, cuMemcpyWithAttributesAsync_ptsz)             \
  X(cuMemcpy3DWithAttributesAsync, cuMemcpy3DWithAttributesAsync_ptsz)         \
  X(cuMemsetD8, cuMemsetD8_v2_ptds)                                            \
  X(cuMemsetD16, cuMemsetD16_v2_ptds)                                          \
  X(cuMemsetD32, cuMemsetD32_v2_ptds)                                          \
  X(cuMemsetD2D8, cuMemsetD2D8_v2_ptds)                                        \
  X(cuMemsetD2D16, cuMemsetD2D16_v2_ptds)                                      \
  X(cuMemsetD2D32, cuMemsetD2D32_v2_ptds)                                      \
  X(cuStreamBeginCapture, cuStreamBeginCapture_v2_ptsz)                        \
  X(cuStreamWriteValue32, cuStreamWriteValue32_v2_ptsz)                        \
  X(cuStreamWaitValue32, cuStreamWaitValue32_v2_ptsz)                          \
  X(cuStreamWriteValue64, cuStreamWriteValue64_v2_ptsz)                        \
  X(cuStreamWaitValue64, cuStreamWaitValue64_v2_ptsz)                          \
  X(cuStreamBatchMemOp, cuStreamBatchMemOp_v2_ptsz)                            \
  X(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v3_ptsz)                    \
  X(cuStreamUpdateCaptureDependencies,                                         \
    cuStreamUpdateCaptureDependencies_v2_ptsz)                                 \
  X(cuMemcpy, cuMemcpy_ptds)                                                   \
  X(cuMemcpyAsync, cuMemcpyAsync_ptsz)                                         \
  X(cuMemcpyPeer, cuMemcpyPeer_ptds)                                           \
  X(cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz)                                 \
  X(cuMemcpy3DPeer, cuMemcpy3DPeer_ptds)                                       \
  X(cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync_ptsz)                             \
  X(cuMemsetD8Async, cuMemsetD8Async_ptsz)                                     \
  X(cuMemsetD16Async, cuMemsetD16Async_ptsz)                                   \
  X(cuMemsetD32Async, cuMemsetD32Async_ptsz)                                   \
  X(cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz)                                 \
  X(cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz)                               \
  X(cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz)                               \
  X(cuStreamGetPriority, cuStreamGetPriority_ptsz)                             \
  X(cuStreamGetId, cuStreamGetId_ptsz)                                         \
  X(cuStreamGetFlags, cuStreamGetFlags_ptsz)                                   \
  X(cuStreamGetDevice, cuStreamGetDevice_ptsz)                                 \
  X(cuStreamGetDevResource, cuStreamGetDevResource_ptsz)                       \
  X(cuStreamGetCtx, cuStreamGetCtx_ptsz)                                       \
  X(cuStreamGetCtx_v2, cuStreamGetCtx_v2_ptsz)                                 \
  X(cuStreamWaitEvent, cuStreamWaitEvent_ptsz)                                 \
  X(cuStreamEndCapture, cuStreamEndCapture_ptsz)                               \
  X(cuStreamIsCapturing, cuStreamIsCapturing_ptsz)                             \
  X(cuStreamAddCallback, cuStreamAddCallback_ptsz)                             \
  X(cuStreamAttachMemAsync, cuStreamAttachMemAsync_ptsz)                       \
  X(cuStreamQuery, cuStreamQuery_ptsz)                                         \
  X(cuStreamSynchronize, cuStreamSynchronize_ptsz)                             \
  X(cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz)                       \
  X(cuLaunchHostFunc, cuLaunchHostFunc_ptsz)                                   \
  X(cuLaunchHostFunc_v2, cuLaunchHostFunc_v2_ptsz)                             \
  X(cuGraphicsMapResources, cuGraphicsMapResources_ptsz)                       \
  X(cuGraphicsUnmapResources, cuGraphicsUnmapResources_ptsz)                   \
  X(cuSignalExternalSemaphoresAsync, cuSignalExternalSemaphoresAsync_ptsz)     \
  X(cuWaitExternalSemaphoresAsync, cuWaitExternalSemaphoresAsync_ptsz)         \
  X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams_ptsz)           \
  X(cuGraphUpload, cuGraphUpload_ptsz)                                         \
  X(cuStreamCopyAttributes, cuStreamCopyAttributes_ptsz)                       \
  X(cuStreamGetAttribute, cuStreamGetAttribute_ptsz)                           \
  X(cuStreamSetAttribute, cuStreamSetAttribute_ptsz)                           \
  X(cuMemMapArrayAsync, cuMemMapArrayAsync_ptsz)                               \
  X(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz)             \
  X(cuStreamBeginRecaptureToGraph, cuStreamBeginRecaptureToGraph_ptsz)         \
  X(cuFabricCpyBatchAsync, cuFabricCpyBatchAsync_ptsz)                         \
  X(cuStreamBeginCaptureToCig, cuStreamBeginCaptureToCig_ptsz)                 \
  X(cuStreamEndCaptureToCig, cuStreamEndCaptureToCig_ptsz)                     \
  X(cuMemBatchDecompressAsync, cuMemBatchDecompressAsync_ptsz)

#define FAKE_PTDS_COUNTED(X) FAKE_PTDS_STUBS(X) FAKE_PTDS_OWN(X)

enum {
#define X(base, sym) FAKE_IDX_##sym,
  FAKE_PTDS_COUNTED(X)
#undef X
      FAKE_NPTDS
};
static _Atomic unsigned long calls[FAKE_NPTDS];

#define X(base, sym)                                                           \
  FAKE_EXPORT gf_cu_result sym(void);                                          \
  gf_cu_result sym(void) {                                                     \
    atomic_fetch_add(&calls[FAKE_IDX_##sym], 1);                               \
    return CUDA_SUCCESS;                                                       \
  }
FAKE_PTDS_STUBS(X)
#undef X

static const struct {
  const char *base, *sym;
  int idx;
  void *fn;
} table[] = {
#define X(base, sym) {#base, #sym, FAKE_IDX_##sym, (void *)sym},
    FAKE_PTDS_COUNTED(X)
#undef X
};

void fake_ptds_count(int idx) { atomic_fetch_add(&calls[idx], 1); }

int fake_ptds_index(const char *sym) {
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
    if (strcmp(table[i].sym, sym) == 0)
      return table[i].idx;
  return -1;
}

void *fake_ptds_for(const char *base) {
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
    if (strcmp(table[i].base, base) == 0)
      return table[i].fn;
  return NULL;
}

/* Calls of a per-thread symbol so far (-1: the fake has no such symbol). */
FAKE_EXPORT long fake_cuda_calls(const char *sym) {
  int i = sym ? fake_ptds_index(sym) : -1;
  return i < 0 ? -1 : (long)atomic_load(&calls[i]);
}

/* Whatever a runtime asks for that the fake does not implement: looked up
 * and compared by the tests, never expected to work. */
gf_cu_result fake_unimplemented(void) { return CUDA_ERROR_NOT_SUPPORTED; }
