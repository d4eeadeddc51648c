/*
 * How long the DRA feed's model rebuild takes (gf_dra_model_new_for, which
 * mode 2 runs after any slice or claim changed), at NODES nodes of 8
 * shared H100-80GB (one ResourceSlice each, as the node agent publishes
 * it) and CLAIMS claims of 8Gi and 10 cores, ALLOCATED of them allocated
 * (spread over the GPUs), the rest pending.
 *
 * Usage: bench_dra_model [NODES [CLAIMS [ALLOCATED [RUNS]]]]
 *        (defaults 1000 5000 2500 5)
 * Prints the median and the range of RUNS builds of both of the feed's
 * models (gpufrac's devices and kube-scheduler's), in milliseconds.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpufrac/sched_dra.h"

#define GPUS 8
#define GIB (INT64_C(1) << 30)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static json_t *slice_json(int k) {
  char node[64];
  snprintf(node, sizeof(node), "node-%05d", k);
  json_t *devs = json_array();
  for (int g = 0; g < GPUS; g++) {
    char name[16], uuid[64];
    snprintf(name, sizeof(name), "gpu-%d", g);
    snprintf(uuid, sizeof(uuid), "GPU-fa4e0000-0000-4000-8000-%08x%04x", k, g);
    json_array_append_new(
        devs,
        json_pack("{s:s,s:{s:{s:s},s:{s:s},s:{s:s}},s:{s:{s:s},s:{s:s}},s:b}",
                  "name", name, "attributes", "type", "string", "gpu",
                  "productName", "string", "NVIDIA H100-80GB", "uuid", "string",
                  uuid, "capacity", "memory", "value", "80Gi", "cores", "value",
                  "100", "allowMultipleAllocations", 1));
  }
  char sname[128];
  snprintf(sname, sizeof(sname), "%s-gpu.gpufrac.io-0", node);
  return json_pack("{s:s,s:s,s:{s:s},s:{s:s,s:s,s:{s:s,s:i,s:i},s:o}}",
                   "apiVersion", "resource.k8s.io/v1", "kind", "ResourceSlice",
                   "metadata", "name", sname, "spec", "driver", GF_DRA_DRIVER,
                   "nodeName", node, "pool", "name", node, "generation", 1,
                   "resourceSliceCount", 1, "devices", devs);
}

static json_t *claim_json(int i, int allocated, int nodes) {
  char name[64], uid[64];
  snprintf(name, sizeof(name), "claim-%d", i);
  snprintf(uid, sizeof(uid), "uid-%d", i);
  json_t *req =
      json_pack("{s:s,s:{s:{s:s,s:s}}}", "deviceClassName", GF_DRA_CLASS_SHARE,
                "capacity", "requests", "memory", "8Gi", "cores", "10");
  json_t *c = json_pack("{s:{s:s,s:s,s:s,s:s},s:{s:{s:[{s:s,s:o}]}}}",
                        "metadata", "name", name, "namespace", "bench", "uid",
                        uid, "resourceVersion", "7", "spec", "devices",
                        "requests", "name", "gpu", "exactly", req);
  if (allocated) {
    /* 9 shares of 8Gi fit one 80Gi GPU */
    int gpu = i / 9;
    char pool[64], dev[16], share[64];
    snprintf(pool, sizeof(pool), "node-%05d", (gpu / GPUS) % nodes);
    snprintf(dev, sizeof(dev), "gpu-%d", gpu % GPUS);
    snprintf(share, sizeof(share), "00000000-0000-4000-8000-%012d", i);
    json_object_set_new(
        c, "status",
        json_pack("{s:{s:{s:[{s:s,s:s,s:s,s:s,s:s,s:{s:s,s:s}}]}}}",
                  "allocation", "devices", "results", "request", "gpu",
                  "driver", GF_DRA_DRIVER, "pool", pool, "device", dev,
                  "shareID", share, "consumedCapacity", "memory", "8Gi",
                  "cores", "10"));
  }
  return c;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int nodes = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 1000;
  int nclaims = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 5000;
  int nalloc = argc > 3 ? (int)strtol(argv[3], NULL, 10) : 2500;
  int runs = argc > 4 ? (int)strtol(argv[4], NULL, 10) : 5;
  if (nodes < 1 || nclaims < 0 || nalloc < 0 || nalloc > nclaims || runs < 1 ||
      runs > 1000) {
    fprintf(stderr, "usage: bench_dra_model [NODES [CLAIMS [ALLOCATED "
                    "[RUNS]]]] (ALLOCATED <= CLAIMS)\n");
    return 2;
  }
  gf_dra_slice *sl = calloc((size_t)nodes, sizeof(*sl));
  const gf_dra_slice **slp = calloc((size_t)nodes, sizeof(*slp));
  gf_dra_claim *cl = calloc((size_t)nclaims + 1, sizeof(*cl));
  const gf_dra_claim **clp = calloc((size_t)nclaims + 1, sizeof(*clp));
  double *ms = calloc((size_t)runs, sizeof(*ms));
  if (!sl || !slp || !cl || !clp || !ms)
    return 1;
  gf_diag d = {""};
  for (int k = 0; k < nodes; k++) {
    json_t *j = slice_json(k);
    if (gf_dra_slice_parse(j, &sl[k], &d)) {
      fprintf(stderr, "slice %d: %s\n", k, d.msg);
      return 1;
    }
    json_decref(j);
    slp[k] = &sl[k];
  }
  for (int i = 0; i < nclaims; i++) {
    json_t *j = claim_json(i, i < nalloc, nodes);
    if (gf_dra_claim_parse(j, &cl[i], &d)) {
      fprintf(stderr, "claim %d: %s\n", i, d.msg);
      return 1;
    }
    json_decref(j);
    clp[i] = &cl[i];
  }
  for (int r = 0; r < runs; r++) {
    double t0 = now_ms();
    gf_dra_model *m = NULL, *km = NULL;
    if (gf_dra_model_new_for(slp, (uint32_t)nodes, clp, (uint32_t)nclaims, NULL,
                             GF_DRA_BY_GPUFRAC, &m, &d) ||
        gf_dra_model_new_for(slp, (uint32_t)nodes, clp, (uint32_t)nclaims, NULL,
                             GF_DRA_BY_KUBE, &km, &d)) {
      fprintf(stderr, "model: %s\n", d.msg);
      return 1;
    }
    ms[r] = now_ms() - t0;
    gf_dra_model_free(m);
    gf_dra_model_free(km);
  }
  qsort(ms, (size_t)runs, sizeof(*ms), cmp_d);
  printf("{\"nodes\": %d, \"claims\": %d, \"allocated\": %d, \"runs\": %d, "
         "\"rebuild_ms_median\": %.1f, \"min\": %.1f, \"max\": %.1f}\n",
         nodes, nclaims, nalloc, runs, ms[runs / 2], ms[0], ms[runs - 1]);
  free(ms);
  free(clp);
  free(cl);
  free(slp);
  free(sl);
  return 0;
}
