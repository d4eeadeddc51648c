/* libFuzzer target: the trace readers never crash or leak on any input, and
 * on error leave the pod list empty. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpufrac/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  gf_cluster *c = gf_cluster_new();
  if (!c)
    return 0;
  FILE *fp = fmemopen((void *)data, size, "r");
  if (fp) {
    gf_diag d;
    if (gf_trace_read_nodes(fp, "fuzz", c, &d) == 0 &&
        gf_cluster_check(c, NULL) != 0)
      abort();
    fclose(fp);
  }
  fp = fmemopen((void *)data, size, "r");
  if (fp) {
    gf_pod_list l = {NULL, 0};
    gf_diag d;
    int rc = gf_trace_read_pods(fp, "fuzz", c, &l, &d);
    if (rc != 0 && (l.pods != NULL || d.msg[0] == '\0'))
      abort();
    for (size_t i = 0; i < l.n; i++)
      if (gf_request_check(&l.pods[i].req, NULL) != 0)
        abort();
    gf_pod_list_release(&l);
    fclose(fp);
  }
  gf_cluster_free(c);
  return 0;
}
