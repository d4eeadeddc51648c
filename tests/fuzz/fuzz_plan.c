/* libFuzzer target: the planner's readers and everything after them
 * (gpufrac/plan.h).  The input is a snapshot, optionally followed by a line
 * "---" and Prometheus usage JSON, and optionally another "---" and node
 * types for the fleet what-if.  A refused input must say why (a
 * non-empty diag); an accepted one must run to figures that hold the
 * planner's invariants (nothing negative, used <= held, requests in range)
 * and be written as text and JSON without a crash or a leak. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/error.h"
#include "gpufrac/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define EPS 1e-6

static void invariants(const gf_plan *p) {
  const gf_plan_totals *t = gf_plan_today(p);
  if (!(t->gpus_held >= 0) || !(t->gpus_used >= 0) ||
      !(t->waste_gpus >= -EPS) || !(t->gpus_idle >= 0) ||
      t->gpus_used > t->gpus_held + EPS || !isfinite(t->waste_per_month))
    abort();
  for (size_t i = 0; i < gf_plan_nworkloads(p); i++) {
    const gf_plan_workload *w = gf_plan_workload_at(p, i);
    if (w->gpus_used > w->gpus_held + EPS || w->waste_gpus < -EPS ||
        w->rec_compute < 0 || w->rec_compute > 100 || w->rec_mem_mib < 0 ||
        (w->action == GF_PLAN_SHARE &&
         (w->rec_compute < 1 || w->rec_mem_mib < 256 ||
          w->rec_mem_mib >= w->gpu_mem_mib)))
      abort();
  }
  for (size_t i = 0; i < gf_plan_nwhatif(p); i++) {
    const gf_plan_whatif *w = gf_plan_whatif_at(p, i);
    if (w->gpus_needed > t->gpus + EPS ||
        w->pods_placed + w->pods_unplaced > t->gpu_pods)
      abort();
    if (w->has_fleet) {
      uint32_t nodes = 0;
      for (size_t k = 0; k < w->nfleet; k++)
        nodes += w->fleet[k].nodes;
      if (nodes != w->fleet_nodes || !(w->fleet_per_month >= 0) ||
          w->fleet_unplaced > t->gpu_pods)
        abort();
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  size_t cut[3] = {size, size, size}; /* ends of the up to three parts */
  int parts = 0;
  for (size_t i = 0; i + 4 <= size && parts < 2; i++)
    if (memcmp(text + i, "\n---", 4) == 0) {
      cut[parts++] = i;
      i += 3;
    }
  gf_plan *p = gf_plan_new();
  if (!p)
    return 0;
  gf_diag d = {""};
  int rc = gf_plan_add_snapshot(p, text, cut[0], "snap", &d);
  if (!rc && parts >= 1)
    rc = gf_plan_add_usage(p, text + cut[0] + 4, cut[1] - cut[0] - 4, "usage",
                           &d);
  if (!rc && parts >= 2)
    rc = gf_plan_add_node_types(p, text + cut[1] + 4, size - cut[1] - 4,
                                "types", &d);
  if (!rc)
    rc = gf_plan_run(p, NULL, &d);
  if (rc) {
    if (!d.msg[0])
      abort();
  } else {
    invariants(p);
    FILE *null = fopen("/dev/null", "w");
    if (null) {
      gf_plan_write_text(p, null);
      gf_plan_write_json(p, null);
      fclose(null);
    }
  }
  gf_plan_free(p);
  return 0;
}
