/*
 * Replays a run of the FGD paper's simulator decision by decision against
 * our fgd (docs/placement.md, "Our fgd against the published FGD").
 *
 * usage: replay NODES.csv PODS.csv STEPS [RANKS]
 *   STEPS: one line per arriving pod, in the reference's order:
 *          "POD NODE GPUS" (NODE "-" when it dropped the pod; GPUS "0-3",
 *          or "-" for a CPU-only pod)
 *   RANKS: "PREFIX NODE" lines, the random prefix the reference gave each
 *          node (its tie order: the smallest name wins)
 *
 * At each pod: every node is scored with our fgd on our state; the
 * reference's node must be one of the best (with RANKS, the first of them
 * in its order), our GPUs on it the reference's, and a pod it dropped must
 * fit nowhere here.  The pod is then placed where the reference put it.
 * Where the reference put a pod on GPUs that cannot hold it (it over-
 * committed them: it decided on a stale view of the node), our GPUs are
 * taken and that node is left out of the comparison from then on.
 * Prints each mismatch and a summary; exit status 1 if any.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/engine.h"
#include "gpufrac/frag.h"
#include "gpufrac/sim.h"
#include "gpufrac/trace.h"

static void gpus_text(const gf_placement *p, char *out, size_t cap) {
  size_t n = 0;
  out[0] = '\0';
  for (uint32_t g = 0; g < p->ngpus && n < cap; g++)
    n += (size_t)snprintf(out + n, cap - n, g ? "-%u" : "%u", p->gpus[g]);
  if (!out[0])
    snprintf(out, cap, "-");
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: replay NODES.csv PODS.csv STEPS [RANKS]\n");
    return 2;
  }
  gf_cluster *c = gf_cluster_new();
  gf_diag d = {""};
  gf_pod_list pods;
  gf_typical_set t;
  gf_engine *e;
  if (!c || gf_trace_load_nodes(argv[1], c, &d) ||
      gf_trace_load_pods(argv[2], c, &pods, &d) ||
      gf_sim_typical(&pods, 95.0, &t)) {
    fprintf(stderr, "replay: %s\n", d.msg);
    return 2;
  }
  gf_engine_config ec = {.policy = "fgd", .seed = 1, .typical = &t};
  if (gf_engine_new(c, &ec, &e, &d)) {
    fprintf(stderr, "replay: %s\n", d.msg);
    return 2;
  }
  uint32_t nn = gf_cluster_nnodes(c);
  int64_t *sc = calloc(nn, sizeof(*sc));
  gf_placement *pk = calloc(nn, sizeof(*pk));
  char *fit = calloc(nn, 1), *taint = calloc(nn, 1);
  long *rank = NULL;
  if (!sc || !pk || !fit || !taint)
    return 2;
  if (argc > 4) {
    FILE *rf = fopen(argv[4], "r");
    rank = malloc(nn * sizeof(*rank));
    if (!rf || !rank)
      return 2;
    for (uint32_t i = 0; i < nn; i++)
      rank[i] = -1;
    long pr;
    char sn[128];
    while (fscanf(rf, "%ld %127s", &pr, sn) == 2) {
      int i = gf_cluster_find_node(c, sn);
      if (i >= 0)
        rank[i] = pr;
    }
    fclose(rf);
  }
  FILE *st = fopen(argv[3], "r");
  if (!st)
    return 2;
  char name[128], node[128], rg[64];
  long k = 0, bad = 0, ties = 0, ordered = 0, skipped = 0;
  for (; fscanf(st, "%127s %127s %63s", name, node, rg) == 3; k++) {
    size_t pi;
    for (pi = 0; pi < pods.n; pi++)
      if (strcmp(pods.pods[pi].name, name) == 0)
        break;
    if (pi == pods.n) {
      fprintf(stderr, "replay: step %ld: no pod %s in %s\n", k, name, argv[2]);
      return 2;
    }
    gf_request r = pods.pods[pi].req;
    int64_t best = 0;
    int found = 0;
    uint32_t nbest = 0;
    for (uint32_t i = 0; i < nn; i++) {
      fit[i] = gf_engine_score(e, &r, i, &sc[i], &pk[i]) == 0;
      if (!fit[i] || taint[i])
        continue;
      if (!found || sc[i] > best) {
        best = sc[i];
        found = 1;
        nbest = 0;
      }
      nbest += sc[i] == best;
    }
    ties += nbest > 1;
    int ri = strcmp(node, "-") ? gf_cluster_find_node(c, node) : -1;
    if (ri < 0) {
      if (found) {
        printf(
            "step %ld %s: the reference dropped it; it fits here (best %lld)\n",
            k, name, (long long)best);
        bad++;
      }
      continue;
    }
    if (taint[ri] || !fit[ri]) {
      if (!taint[ri]) {
        printf("step %ld %s: the reference's node %s cannot hold it here\n", k,
               name, node);
        bad++;
      } else if (gf_engine_apply(e, &r, &pk[ri]) == 0) {
        skipped++;
      }
      continue;
    }
    if (sc[ri] != best) {
      printf("step %ld %s: the reference's node %s scores %lld here, the best "
             "%lld\n",
             k, name, node, (long long)sc[ri], (long long)best);
      bad++;
    } else if (rank) {
      uint32_t lo = (uint32_t)ri;
      for (uint32_t i = 0; i < nn; i++)
        if (fit[i] && !taint[i] && sc[i] == best && rank[i] < rank[lo])
          lo = i;
      if (lo != (uint32_t)ri) {
        printf("step %ld %s: the reference took %s, the first of the tied "
               "nodes in its order is %s\n",
               k, name, node, gf_cluster_node(c, lo)->name);
        bad++;
      }
      ordered++;
    }
    gf_placement p = pk[ri];
    char og[64];
    gpus_text(&p, og, sizeof(og));
    if (strcmp(og, rg)) {
      printf("step %ld %s on %s: our GPUs %s, the reference's %s\n", k, name,
             node, og, rg);
      bad++;
      gf_placement q = p;
      q.ngpus = 0;
      for (char *s = rg; *s && q.ngpus < GF_MAX_GPUS_PER_NODE;) {
        q.gpus[q.ngpus++] = (uint8_t)strtoul(s, &s, 10);
        if (*s == '-')
          s++;
      }
      if (q.ngpus == r.gpu_count && gf_engine_apply(e, &r, &q) == 0)
        continue;
      printf("step %ld %s: the reference's GPUs %s cannot hold it (it "
             "over-committed them); %s left out from here on\n",
             k, name, rg, node);
      taint[ri] = 1;
    }
    if (gf_engine_apply(e, &r, &p)) {
      fprintf(stderr, "replay: step %ld: placing %s failed\n", k, name);
      return 2;
    }
  }
  printf("%ld pods: %ld mismatches; %ld with tied best nodes, %ld choices "
         "checked against the reference's node order; %ld placed on "
         "left-out nodes, not compared\n",
         k, bad, ties, ordered, skipped);
  return bad != 0;
}
