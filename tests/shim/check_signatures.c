/*
 * Compile-time check: every hooked function's signature, as the interposer
 * declares it (cuda_api.h, GF_SHIM_HOOKS), equals the driver's own
 * function-pointer typedef in cudaTypedefs.h.  Built only where the CUDA
 * headers exist; a drift fails the build (-Werror=incompatible-pointer-types).
 */
#define GF_SHIM_CHECK_CUDA_H
#include "cuda_api.h"

#include <cudaTypedefs.h>

/* The symbol itself is not named: cuda.h #defines some of them to their
 * versioned names.  A null pointer of our type must convert to the PFN. */
#define GF__CHECK(name, pfn, params, args)                                     \
  static pfn check_##name __attribute__((unused)) = (gf_cu_result(*) params)0;
GF_SHIM_HOOKS(GF__CHECK)
GF_SHIM_REAL(GF__CHECK)

int main(void) { return 0; }
