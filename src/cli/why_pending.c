/*
 * why-pending's hints and a pod's request in words (why_pending.h).
 */
#include "why_pending.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "gpufrac/contract.h"

static bool name_char(const char *p) {
  char c = *p;
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '/' ||
         (c == '.' && name_char(p + 1));
}

/* Whether msg says "Insufficient NAME" for exactly this name (the name
 * ends there: "gpufrac.io/gpu." yes, "gpufrac.io/gpu-memory" no). */
static bool insufficient(const char *msg, const char *name) {
  char key[96];
  snprintf(key, sizeof(key), "Insufficient %s", name);
  size_t kl = strlen(key);
  for (const char *p = msg; (p = strstr(p, key)); p += kl)
    if (!name_char(p + kl))
      return true;
  return false;
}

/* The names gpufrac's scheduler profile marks ignoredByScheduler (the
 * chart's and deploy/kube-scheduler-config.yaml's managedResources): no
 * node advertises them, so kube-scheduler reports them Insufficient only
 * when the profile that handled the pod does not call the extender. */
static const char *const extender_only[] = {
    GF_RES_GPU_MEMORY, GF_RES_GPU_COMPUTE, "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"};

static bool is_hami(const char *name) {
  return strncmp(name, "nvidia.com/", strlen("nvidia.com/")) == 0;
}

gf__why_kind gf__why_hint(const char *msg, const gf__why_ctx *c, char *out,
                          size_t cap) {
  if (cap)
    out[0] = '\0';
  if (!msg || !*msg)
    return GF__WHY_NONE;
  const char *sched = c ? c->scheduler : NULL;
  bool dflt = !sched || !*sched || strcmp(sched, "default-scheduler") == 0;
  const char *sn = dflt ? "default-scheduler" : sched;
  unsigned words = c ? c->words : 0;
  for (size_t i = 0; i < sizeof(extender_only) / sizeof(extender_only[0]);
       i++) {
    const char *res = extender_only[i];
    if (!insufficient(msg, res))
      continue;
    if (!dflt && (is_hami(res) || (words & GF_PODREQ_W_KAI))) {
      /* The pod reached a profile of its own choosing already: what is
       * missing is the extender taking the other tool's words. */
      const char *tool = is_hami(res) ? "hami" : "kai";
      snprintf(out, cap,
               "the gpufrac extender was never asked about this pod: it "
               "already has schedulerName '%s', but kube-scheduler counted "
               "%s itself, so that profile does not leave %s's words to the "
               "extender. Set extender.accept: [%s] in the chart's values "
               "(helm upgrade; the control-plane path: gpufrac scheduler "
               "--accept %s and %s in the profile's managedResources with "
               "ignoredByScheduler: true). See docs/migrating.md.",
               sn, res, is_hami(res) ? "HAMi" : "KAI", tool, tool, res);
      return GF__WHY_NOT_ASKED;
    }
    if (!dflt) {
      snprintf(out, cap,
               "the gpufrac extender was never asked about this pod: it has "
               "schedulerName '%s', but kube-scheduler counted %s itself, a "
               "name no node advertises, so that profile does not call "
               "gpufrac's extender (or does not list %s with "
               "ignoredByScheduler: true in its managedResources). The "
               "chart's scheduler profile is named gpufrac; on the "
               "control-plane path kube-scheduler needs the chart's "
               "configuration. See docs/install.md, \"gpufrac's own "
               "scheduler\" and \"The control plane's own kube-scheduler\".",
               sn, res, res);
      return GF__WHY_NOT_ASKED;
    }
    snprintf(out, cap,
             "the gpufrac extender was never asked about this pod: "
             "kube-scheduler (schedulerName '%s') counted %s itself, a "
             "name no node advertises, so the scheduler profile that "
             "handled the pod does not call gpufrac's extender (or does "
             "not list %s with ignoredByScheduler: true in its "
             "managedResources). With the Helm chart the pod needs "
             "schedulerName: gpufrac, which the chart's admission policy "
             "sets (older clusters: set it yourself); on the control-plane "
             "path kube-scheduler needs the chart's configuration. See "
             "docs/install.md, \"gpufrac's own scheduler\" and \"The "
             "control plane's own kube-scheduler\".",
             sn, res, res);
    return GF__WHY_NOT_ASKED;
  }
  if (!insufficient(msg, GF_RES_GPU))
    return GF__WHY_NONE;
  if (c && !c->req_ok)
    return GF__WHY_NONE; /* the request itself is the problem */
  if (c && c->agent_nodes == 0) {
    snprintf(out, cap,
             "no node advertises %s: no node runs the gpufrac agent (it "
             "runs on nodes labelled gpufrac.io/enabled=true). Label the "
             "GPU nodes and run gpufrac doctor (docs/install.md).",
             GF_RES_GPU);
    return GF__WHY_NO_AGENT;
  }
  if (c && c->extender_fits == 0)
    return GF__WHY_NONE; /* memory or compute short: the extender's words */
  snprintf(out, cap,
           "kube-scheduler found no free %s slot on the nodes it counts "
           "that way: each %s a pod asks holds one of the node agent's "
           "device-plugin slots (allocatable %s). %s set slots = auto (the "
           "default) or a larger number in the node config (docs/node.md)%s",
           GF_RES_GPU, GF_RES_GPU, GF_RES_GPU,
           c && c->extender_fits > 0
               ? "The extender says the GPUs have the memory and compute, so "
                 "the slots ran out first:"
               : "Where the GPUs still have memory and compute, the slots "
                 "ran out first:",
           c && c->extender_fits > 0 ? "."
                                     : "; --extender shows whether they do.");
  return GF__WHY_SLOTS;
}

static void fmt_bytes(int64_t b, char *out, size_t cap) {
  static const char *const suf[] = {"", "Ki", "Mi", "Gi", "Ti"};
  int i = 0;
  while (i < 4 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    i++;
  }
  snprintf(out, cap, "%" PRId64 "%s", b, suf[i]);
}

void gf__podreq_text(const gf_podreq *r, char *out, size_t cap) {
  const gf_request *q = &r->req;
  char head[160] = "";
  if (!q->gpu_count) {
    snprintf(out, cap, "no GPU");
    return;
  }
  char mem[32];
  fmt_bytes(q->gpu_mem_bytes, mem, sizeof(mem));
  if (q->gpu_milli >= GF_GPU_MILLI)
    snprintf(head, sizeof(head), "%u whole GPU%s", q->gpu_count,
             q->gpu_count > 1 ? "s" : "");
  else if (!q->gpu_milli)
    snprintf(head, sizeof(head),
             "a share of 1 GPU: %s memory, no compute "
             "reserved",
             mem);
  else if (q->gpu_mem_bytes)
    snprintf(head, sizeof(head),
             "a share of 1 GPU: %s memory, %d.%d percent compute", mem,
             q->gpu_milli / 10, q->gpu_milli % 10);
  else
    snprintf(head, sizeof(head), "a share of 1 GPU: %d.%d percent compute",
             q->gpu_milli / 10, q->gpu_milli % 10);
  const char *words = r->words & GF_PODREQ_W_KAI    ? " (KAI's annotations)"
                      : r->words & GF_PODREQ_W_HAMI ? " (HAMi's names)"
                                                    : "";
  snprintf(out, cap, "%s%s, container '%s', %u %s slot%s", head, words,
           r->container, r->slots, GF_RES_GPU, r->slots == 1 ? "" : "s");
}
