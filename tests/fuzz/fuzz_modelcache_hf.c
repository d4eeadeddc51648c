/* libFuzzer target: a Hugging Face hub's tree listing page as the weight
 * cache reads it (src/modelcache/modelcache_hf.c, gf__mc_hf_page).  The
 * page comes from the network; reading it must never crash or leak, a
 * page it refuses says why, and what it accepts counts no more files than
 * the manifest may hold.  Seeds: tests/fuzz/seeds/modelcache_hf (a page
 * with LFS shards and small files, a directory item, a '..' path). */
#include <stdint.h>
#include <stdlib.h>

#include "gpufrac/diag.h"
#include "gpufrac/modelcache.h"
#include "modelcache_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t files = 9;
  uint64_t bytes = 9;
  gf_diag d = {""};
  int rc = gf__mc_hf_page((const char *)data, size, &files, &bytes, &d);
  if (rc && !d.msg[0])
    abort(); /* a refusal says why */
  if (rc && (files || bytes))
    abort();
  if (!rc && files > GF_NODE_CACHE_FILES_MAX)
    abort();
  return 0;
}
