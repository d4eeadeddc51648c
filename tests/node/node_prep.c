/*
 * node_prep: makes what a running container leaves on a node, for the
 * tests and benchmarks that drive the real agent (test_prometheus.py,
 * agent_e2e.py --bench-rss).
 *
 *   node_prep container STATE UID CTR GPU-UUID LIMIT USED COMPUTE
 *       the agent's files for one container (gf_node_prepare_container:
 *       shim.conf, grant.json, region/) and a region in it
 *   node_prep region DIR LIMIT USED
 *       only the region file DIR/region (DIR made by the agent's Allocate)
 * COMPUTE 0 means no share: the region gets 100 (no throttling).
 *
 * The region is made as the interposer makes it in the container: created
 * with one device limited to LIMIT bytes, one slot attached, USED bytes
 * reserved on it.  This process then exits; the slot's usage stays (only
 * an attaching process reaps dead slots, and the agent never attaches).
 * Exit 0, or 1 with a sentence on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/error.h"
#include "gpufrac/node.h"
#include "gpufrac/quantity.h"
#include "gpufrac/region.h"

static int num(const char *s, int64_t max, int64_t *out) {
  gf_diag d = {""};
  if (gf_parse_int64(s, 0, max, out, &d)) {
    fprintf(stderr, "node_prep: '%s': %s\n", s, d.msg);
    return 1;
  }
  return 0;
}

static int make_region(const char *dir, int64_t limit, int64_t used,
                       int64_t compute) {
  char path[GF_NODE_PATH_MAX + 16];
  snprintf(path, sizeof(path), "%s/region", dir);
  gf_region_limits lim;
  memset(&lim, 0, sizeof(lim));
  lim.ndevices = 1;
  lim.limit[0] = (uint64_t)limit;
  lim.compute_pct = (uint32_t)compute;
  gf_region *r = NULL;
  gf_diag d = {""};
  if (gf_region_map(path, &lim, &r, &d)) {
    fprintf(stderr, "node_prep: %s: %s\n", path, d.msg);
    return 1;
  }
  int slot = gf_region_attach(r);
  bool ok = slot >= 0 &&
            gf_region_reserve(r, slot, 0, (uint64_t)used, (uint64_t)limit);
  gf_region_unmap(r);
  if (!ok) {
    fprintf(stderr, "node_prep: %s: cannot attach or reserve %lld bytes\n",
            path, (long long)used);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  int64_t limit, used, compute = 0;
  if (argc == 5 && strcmp(argv[1], "region") == 0) {
    if (num(argv[3], INT64_MAX, &limit) || num(argv[4], limit, &used))
      return 1;
    return make_region(argv[2], limit, used, 100);
  }
  if (argc != 9 || strcmp(argv[1], "container") != 0) {
    fprintf(stderr, "usage: node_prep container STATE UID CTR GPU-UUID LIMIT "
                    "USED COMPUTE | node_prep region DIR LIMIT USED\n");
    return 2;
  }
  if (num(argv[6], INT64_MAX, &limit) || num(argv[7], limit, &used) ||
      num(argv[8], 100, &compute))
    return 1;
  gf_grant_container c;
  memset(&c, 0, sizeof(c));
  if (strlen(argv[4]) >= sizeof(c.name) || strlen(argv[5]) >= GF_UUID_MAX) {
    fprintf(stderr, "node_prep: container name or uuid too long\n");
    return 1;
  }
  snprintf(c.name, sizeof(c.name), "%s", argv[4]);
  c.ngpus = 1;
  snprintf(c.gpus[0].uuid, sizeof(c.gpus[0].uuid), "%s", argv[5]);
  c.gpus[0].mem_bytes = limit;
  c.gpus[0].compute_pct = (int32_t)compute;
  gf_node_ctr_paths p;
  gf_diag d = {""};
  if (gf_node_prepare_container(argv[2], argv[3], &c, NULL, &p, &d)) {
    fprintf(stderr, "node_prep: %s\n", d.msg);
    return 1;
  }
  return make_region(p.region_dir, limit, used, compute ? compute : 100);
}
