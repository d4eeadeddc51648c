/*
 * Compile-time check: every hooked function's signature, as the interposer
 * declares it (cuda_api.h, GF_SHIM_HOOKS), equals the driver's own
 * function-pointer typedef in cudaTypedefs.h.  Built only where the CUDA
 * headers exist; a drift fails the build (-Werror=incompatible-pointer-types).
 */
#define GF_SHIM_CHECK_CUDA_H
#include "cuda_api.h"
#include "shim_compute.h"

#include <cudaTypedefs.h>

/* The symbol itself is not named: cuda.h #defines some of them to their
 * versioned names.  A null pointer of our type must convert to the PFN. */
#define GF__CHECK(name, pfn, params, args)                                     \
  static pfn check_##name __attribute__((unused)) = (gf_cu_result(*) params)0;
GF_SHIM_HOOKS(GF__CHECK)
GF_SHIM_REAL(GF__CHECK)
GF_SHIM_COMPUTE_REAL(GF__CHECK)

/* The enum values cuda_api.h declares for itself. */
_Static_assert(GF_CU_MEMPOOL_RESERVED_MEM_CURRENT ==
                   CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
               "CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT");
_Static_assert(GF_CU_MEMPOOL_USED_MEM_CURRENT ==
                   CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
               "CU_MEMPOOL_ATTR_USED_MEM_CURRENT");
_Static_assert(GF_CU_DEVICE_MULTIPROCESSOR_COUNT ==
                   CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
               "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT");
_Static_assert(GF_CU_DEVICE_MAX_BLOCKS_PER_MULTIPROCESSOR ==
                   CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
               "CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR");

_Static_assert(GF_CU_STREAM_CAPTURE_MODE_RELAXED ==
                   CU_STREAM_CAPTURE_MODE_RELAXED,
               "CU_STREAM_CAPTURE_MODE_RELAXED");
_Static_assert(GF_CU_EVENT_DEFAULT == CU_EVENT_DEFAULT, "CU_EVENT_DEFAULT");

int main(void) { return 0; }
