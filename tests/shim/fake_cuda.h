/* What the fake driver's files share (tests only). */
#ifndef GPUFRAC_TESTS_FAKE_CUDA_H
#define GPUFRAC_TESTS_FAKE_CUDA_H

#define FAKE_EXPORT __attribute__((visibility("default")))

/* The per-thread symbols fake_cuda.c defines with their real signatures
 * (the interposer hooks them): X(base name, per-thread symbol). */
#define FAKE_PTDS_OWN(X)                                                       \
  X(cuLaunchKernel, cuLaunchKernel_ptsz)                                       \
  X(cuLaunchKernelEx, cuLaunchKernelEx_ptsz)                                   \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz)                 \
  X(cuGraphLaunch, cuGraphLaunch_ptsz)                                         \
  X(cuMemFreeAsync, cuMemFreeAsync_ptsz)                                       \
  X(cuMemAllocAsync, cuMemAllocAsync_ptsz)                                     \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz)                     \
  X(cuEventRecord, cuEventRecord_ptsz)

/* Not hooked, but defined with its signature in fake_cuda.c: the timing
 * samples' events (shim_compute.c) land on the fake GPU's timeline. */
struct CUevent_st;
gf_cu_result cuEventRecord_ptsz(struct CUevent_st *e, CUstream s);

/* Index of a per-thread symbol's call counter (-1: none), counting one
 * call, the function a per-thread caller of base gets (NULL: none). */
int fake_ptds_index(const char *sym);
void fake_ptds_count(int idx);
void *fake_ptds_for(const char *base);
gf_cu_result fake_unimplemented(void);

/* Counts a call of the per-thread symbol sym (one of FAKE_PTDS_OWN). */
#define FAKE_HIT(sym)                                                          \
  do {                                                                         \
    static _Atomic int i_ = -2;                                                \
    int v_ = atomic_load_explicit(&i_, memory_order_relaxed);                  \
    if (v_ == -2) {                                                            \
      v_ = fake_ptds_index(#sym);                                              \
      atomic_store_explicit(&i_, v_, memory_order_relaxed);                    \
    }                                                                          \
    if (v_ >= 0)                                                               \
      fake_ptds_count(v_);                                                     \
  } while (0)

#endif
