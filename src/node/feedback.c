/*
 * Utilisation feedback (node_feedback.h): each container's observed
 * share of its GPUs, written into its region for the interposer's bucket.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/region.h"
#include "node_feedback.h"
#include "node_util.h"

#define FEEDBACK_CTRS 512  /* containers looked at per round */
#define FEEDBACK_PIDS 1024 /* distinct pids resolved per round */

bool gf__node_pid_pod(const char *proc, uint32_t pid, char *uid, size_t cap) {
  char path[GF_NODE_PATH_MAX];
  if (snprintf(path, sizeof(path), "%s/%u/cgroup", proc, pid) >=
      (int)sizeof(path))
    return false;
  char *text = NULL;
  size_t len = 0;
  if (gf__node_read_file(path, 16384, &text, &len, NULL))
    return false;
  bool found = false;
  /* "pod" followed by a uid: 36 characters of hex digits and '-' (cgroupfs)
   * or '_' (the systemd driver's slice names). */
  for (const char *p = strstr(text, "pod"); p && !found;
       p = strstr(p + 3, "pod")) {
    const char *u = p + 3;
    size_t n = 0;
    while (u[n] &&
           (isxdigit((unsigned char)u[n]) || u[n] == '-' || u[n] == '_'))
      n++;
    if (n != 36 || n >= cap)
      continue;
    for (size_t i = 0; i < n; i++)
      uid[i] = u[i] == '_' ? '-' : (char)tolower((unsigned char)u[i]);
    uid[n] = '\0';
    found = true;
  }
  gf__free(text);
  return found;
}

typedef struct fb_ctr {
  char dir[GF_NODE_PATH_MAX];
  char pod[GF_NODE_UID_MAX];
  gf_ctr_grant g;
} fb_ctr;

typedef struct fb_scan {
  fb_ctr *ctrs;
  size_t n, max;
} fb_scan;

/* One container with a readable grant into the next record. */
static void scan_one(void *user, const char *uid, const char *ctr,
                     const char *dir) {
  fb_scan *sc = user;
  (void)ctr;
  if (sc->n >= sc->max || strlen(uid) >= sizeof(sc->ctrs[0].pod))
    return;
  fb_ctr *c = &sc->ctrs[sc->n];
  if (gf__node_read_ctr_grant(dir, &c->g))
    return;
  gf__node_copy(c->dir, sizeof(c->dir), dir);
  gf__node_copy(c->pod, sizeof(c->pod), uid);
  sc->n++;
}

typedef struct pid_pod {
  uint32_t pid;
  bool known;
  char uid[GF_NODE_UID_MAX];
} pid_pod;

/* How many containers hold a grant on uuid (counted once per round). */
static uint32_t holders_of(const fb_ctr *ctrs, size_t nc, const char *uuid) {
  uint32_t n = 0;
  for (size_t o = 0; o < nc; o++)
    for (uint32_t j = 0; j < ctrs[o].g.ngpus; j++)
      n += strcmp(ctrs[o].g.uuid[j], uuid) == 0;
  return n;
}

size_t gf__node_feedback(const char *state_dir, const char *proc,
                         const gf_node_gpus *g, const gf_node_proc_util *s,
                         size_t ns) {
  fb_ctr *ctrs = gf__calloc(FEEDBACK_CTRS, sizeof(*ctrs));
  pid_pod *pids = gf__calloc(FEEDBACK_PIDS, sizeof(*pids));
  const char **pod_of = gf__calloc(ns ? ns : 1, sizeof(*pod_of));
  size_t written = 0;
  if (!ctrs || !pids || !pod_of)
    goto out;
  fb_scan sc = {ctrs, 0, FEEDBACK_CTRS};
  gf__node_each_container(state_dir, scan_one, &sc);
  size_t nc = sc.n;
  /* Each sample's pod (NULL: not a pod's process, or the host's /proc is
   * not visible), its cgroup read once per distinct pid. */
  size_t np = 0;
  for (size_t i = 0; i < ns; i++) {
    size_t k = 0;
    while (k < np && pids[k].pid != s[i].pid)
      k++;
    if (k == np) {
      if (np == FEEDBACK_PIDS)
        continue;
      pids[np].pid = s[i].pid;
      pids[np].known = proc && gf__node_pid_pod(proc, s[i].pid, pids[np].uid,
                                                sizeof(pids[np].uid));
      np++;
    }
    pod_of[i] = pids[k].known ? pids[k].uid : NULL;
  }
  /* The GPU's own utilisation stands for a container only on a GPU that
   * container alone holds; counted once per node GPU. */
  uint32_t holders[GF_NODE_MAX_GPUS];
  for (uint32_t i = 0; i < g->ngpus; i++)
    holders[i] = holders_of(ctrs, nc, g->gpus[i].uuid);
  for (size_t c = 0; c < nc; c++) {
    uint32_t sum_bp = 0, known = 0;
    for (uint32_t k = 0; k < ctrs[c].g.ngpus; k++) {
      const char *uuid = ctrs[c].g.uuid[k];
      bool gpu_sampled = false;
      uint32_t pct = 0;
      for (size_t i = 0; i < ns; i++) {
        /* A sample counts when its pid could be placed in a pod (without
         * the host's /proc none can: then the fallback below). */
        if (!pod_of[i] || strcmp(s[i].uuid, uuid) != 0)
          continue;
        gpu_sampled = true;
        if (strcmp(pod_of[i], ctrs[c].pod) == 0)
          pct += s[i].sm_pct;
      }
      if (gpu_sampled) {
        sum_bp += (pct > 100 ? 100 : pct) * 100;
        known++;
        continue;
      }
      for (uint32_t i = 0; i < g->ngpus; i++)
        if (holders[i] == 1 && g->gpus[i].util_pct >= 0 &&
            strcmp(g->gpus[i].uuid, uuid) == 0) {
          sum_bp += (uint32_t)g->gpus[i].util_pct * 100;
          known++;
        }
    }
    if (known == 0)
      continue;
    uint32_t bp = sum_bp / known;
    if (bp == 0)
      continue; /* 0 reads as "no sample": nothing to say */
    gf_region *reg = NULL;
    if (gf__node_region_open(ctrs[c].dir, &reg) || !reg)
      continue;
    gf_region_observe(reg, bp);
    gf_region_unmap(reg);
    written++;
  }
out:
  gf__free(ctrs);
  gf__free(pids);
  gf__free(pod_of);
  return written;
}
