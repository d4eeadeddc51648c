/* Small builders shared by the unit tests (include after cmocka.h). */
#ifndef GPUFRAC_TESTS_HELPERS_H
#define GPUFRAC_TESTS_HELPERS_H

#include <string.h>

#include "gpufrac/frag.h"
#include "gpufrac/model.h"

/* A request for n GPUs of `milli` each and `cpu` milli-CPU, nothing else. */
static inline gf_request req(int64_t cpu, uint32_t n, int32_t milli) {
  gf_request r;
  memset(&r, 0, sizeof(r));
  r.cpu_milli = cpu;
  r.gpu_count = n;
  r.gpu_milli = milli;
  return r;
}

/* The typical set {share 500m with 1 CPU: p = .75, whole GPU with 2 CPUs:
 * p = .25}, from a workload of four pods. */
static inline void two_shapes(gf_typical_set *t) {
  gf_request w[4] = {req(1000, 1, 500), req(2000, 1, 1000), req(1000, 1, 500),
                     req(1000, 1, 500)};
  assert_int_equal(gf_typical_build(w, NULL, 4, 100.0, true, t), 0);
  assert_int_equal(t->n, 2);
}

#endif
