/*
 * Utilisation feedback (gpufrac/node_feedback.h): each container's observed
 * share of its GPUs, written into its region for the interposer's bucket.
 */
#include <ctype.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/error.h"
#include "gpufrac/node_feedback.h"
#include "gpufrac/region.h"
#include "node_int.h"

#define FEEDBACK_CTRS 512  /* containers looked at per round */
#define FEEDBACK_PIDS 1024 /* distinct pids resolved per round */
#define GRANT_FILE_MAX 65536

bool gf_node_pid_pod(const char *proc, uint32_t pid, char *uid, size_t cap) {
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
  free(text);
  return found;
}

typedef struct fb_ctr {
  char dir[GF_NODE_PATH_MAX];
  char pod[GF_NODE_PATH_MAX / 4];
  uint32_t ngpus;
  char uuid[GF_REGION_DEVICES][GF_UUID_MAX];
} fb_ctr;

/* The uuids of <dir>/grant.json into c.  False when unreadable. */
static bool read_uuids(const char *dir, fb_ctr *c) {
  char path[GF_NODE_PATH_MAX];
  if (!gf__node_join(path, sizeof(path), dir, "grant.json"))
    return false;
  char *text = NULL;
  size_t len = 0;
  if (gf__node_read_file(path, GRANT_FILE_MAX, &text, &len, NULL))
    return false;
  json_t *root = json_loadb(text, len, 0, NULL);
  free(text);
  const json_t *gpus = json_object_get(root, "gpus");
  bool ok = json_is_array(gpus) && json_array_size(gpus) <= GF_REGION_DEVICES;
  size_t i;
  const json_t *g;
  c->ngpus = 0;
  json_array_foreach(ok ? gpus : NULL, i, g) {
    const char *u = json_string_value(json_object_get(g, "uuid"));
    if (!u || strlen(u) >= GF_UUID_MAX) {
      ok = false;
      break;
    }
    gf__node_copy(c->uuid[c->ngpus++], GF_UUID_MAX, u);
  }
  json_decref(root);
  return ok;
}

/* Every container under state_dir/pods with a readable grant. */
static size_t scan(const char *state_dir, fb_ctr *out, size_t max) {
  char pods[GF_NODE_PATH_MAX];
  if (!gf__node_join(pods, sizeof(pods), state_dir, "pods"))
    return 0;
  DIR *pd = opendir(pods);
  if (!pd)
    return 0;
  size_t n = 0;
  struct dirent *pe;
  while ((pe = readdir(pd)) && n < max) {
    char pdir[GF_NODE_PATH_MAX];
    if (!gf_node_safe_name(pe->d_name) ||
        strlen(pe->d_name) >= sizeof(out[0].pod) ||
        !gf__node_join(pdir, sizeof(pdir), pods, pe->d_name))
      continue;
    DIR *cd = opendir(pdir);
    if (!cd)
      continue;
    struct dirent *ce;
    while ((ce = readdir(cd)) && n < max) {
      fb_ctr *c = &out[n];
      if (!gf_node_safe_name(ce->d_name) ||
          !gf__node_join(c->dir, sizeof(c->dir), pdir, ce->d_name) ||
          !read_uuids(c->dir, c))
        continue;
      gf__node_copy(c->pod, sizeof(c->pod), pe->d_name);
      n++;
    }
    closedir(cd);
  }
  closedir(pd);
  return n;
}

typedef struct pid_pod {
  uint32_t pid;
  bool known;
  char uid[64];
} pid_pod;

size_t gf_node_feedback(const char *state_dir, const char *proc,
                        const gf_node_gpus *g, const gf_node_proc_util *s,
                        size_t ns) {
  fb_ctr *ctrs = calloc(FEEDBACK_CTRS, sizeof(*ctrs));
  pid_pod *pids = calloc(FEEDBACK_PIDS, sizeof(*pids));
  size_t written = 0;
  if (!ctrs || !pids)
    goto out;
  size_t nc = scan(state_dir, ctrs, FEEDBACK_CTRS);
  /* Each sample's pod, resolved once per distinct pid. */
  size_t np = 0;
  for (size_t i = 0; i < ns && np < FEEDBACK_PIDS; i++) {
    bool seen = false;
    for (size_t k = 0; k < np && !seen; k++)
      seen = pids[k].pid == s[i].pid;
    if (seen)
      continue;
    pids[np].pid = s[i].pid;
    pids[np].known = proc && gf_node_pid_pod(proc, s[i].pid, pids[np].uid,
                                             sizeof(pids[np].uid));
    np++;
  }
  for (size_t c = 0; c < nc; c++) {
    uint32_t sum_bp = 0, known = 0;
    for (uint32_t k = 0; k < ctrs[c].ngpus; k++) {
      const char *uuid = ctrs[c].uuid[k];
      bool gpu_sampled = false;
      uint32_t pct = 0;
      for (size_t i = 0; i < ns; i++) {
        if (strcmp(s[i].uuid, uuid) != 0)
          continue;
        /* A sample counts when its pid could be placed in a pod (without
         * the host's /proc none can: then the fallback below). */
        for (size_t p = 0; p < np; p++) {
          if (pids[p].pid != s[i].pid || !pids[p].known)
            continue;
          gpu_sampled = true;
          if (strcmp(pids[p].uid, ctrs[c].pod) == 0)
            pct += s[i].sm_pct;
        }
      }
      if (gpu_sampled) {
        sum_bp += (pct > 100 ? 100 : pct) * 100;
        known++;
        continue;
      }
      /* No process samples on this GPU: its own utilisation, if this is
       * the only container with a grant on it. */
      uint32_t holders = 0;
      for (size_t o = 0; o < nc; o++)
        for (uint32_t j = 0; j < ctrs[o].ngpus; j++)
          holders += strcmp(ctrs[o].uuid[j], uuid) == 0;
      for (uint32_t i = 0; holders == 1 && i < g->ngpus; i++)
        if (strcmp(g->gpus[i].uuid, uuid) == 0 && g->gpus[i].util_pct >= 0) {
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
  free(ctrs);
  free(pids);
  return written;
}
