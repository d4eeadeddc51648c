/*
 * Migration patches: for each workload the plan recommends a share for, a
 * strategic merge patch of its pod template that drops today's GPU request
 * (null deletes a key in a strategic merge patch) and asks for gpufrac's
 * resources; containers are merged by name.  Plus patches/README.md.
 * Nothing is applied: these are files for `kubectl patch`.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "gpufrac/contract.h"
#include "gpufrac/error.h"
#include "internal.h"

/* Where the pod template sits in each kind; NULL: no template to patch. */
static const char *template_path(const char *kind) {
  if (strcmp(kind, "Deployment") == 0 || strcmp(kind, "StatefulSet") == 0 ||
      strcmp(kind, "DaemonSet") == 0 || strcmp(kind, "ReplicaSet") == 0 ||
      strcmp(kind, "Job") == 0)
    return "spec.template";
  if (strcmp(kind, "CronJob") == 0)
    return "spec.jobTemplate.spec.template";
  return NULL;
}

static json_t *resources(const gf__ppod *pod, const gf_plan_workload *w) {
  json_t *l = json_object();
  if (!l)
    return NULL;
  const char *drop[5] = {NULL};
  size_t nd = 0;
  switch (pod->kind) {
  case GF_PLAN_REQ_WHOLE:
    drop[nd++] = "nvidia.com/gpu";
    break;
  case GF_PLAN_REQ_HAMI:
    drop[nd++] = "nvidia.com/gpu";
    drop[nd++] = "nvidia.com/gpumem";
    drop[nd++] = "nvidia.com/gpumem-percentage";
    drop[nd++] = "nvidia.com/gpucores";
    break;
  case GF_PLAN_REQ_MIG:
    drop[nd++] = pod->mig_res;
    break;
  default:
    break;
  }
  for (size_t i = 0; i < nd; i++)
    if (drop[i])
      json_object_set_new(l, drop[i], json_null());
  char mem[32], comp[16];
  snprintf(mem, sizeof(mem), "%" PRId64 "Mi", w->rec_mem_mib);
  snprintf(comp, sizeof(comp), "%d", w->rec_compute);
  json_object_set_new(l, GF_RES_GPU, json_string("1"));
  json_object_set_new(l, GF_RES_GPU_MEMORY, json_string(mem));
  json_object_set_new(l, GF_RES_GPU_COMPUTE, json_string(comp));
  return l;
}

/* The patch for workload w, whose first pod is `pod`. */
static json_t *patch_of(const gf__ppod *pod, const gf_plan_workload *w) {
  json_t *ctrs = json_array();
  json_t *tmpl = json_object();
  if (!ctrs || !tmpl)
    goto fail;
  for (size_t i = 0; i < pod->ngpu_ctrs; i++) {
    json_t *req = resources(pod, w), *lim = resources(pod, w);
    json_t *res = json_object(), *c = json_object();
    if (!req || !lim || !res || !c) {
      json_decref(req);
      json_decref(lim);
      json_decref(res);
      json_decref(c);
      goto fail;
    }
    json_object_set_new(res, "requests", req);
    json_object_set_new(res, "limits", lim);
    json_object_set_new(c, "name", json_string(pod->gpu_ctrs[i]));
    json_object_set_new(c, "resources", res);
    json_array_append_new(ctrs, c);
  }
  json_object_set_new(tmpl, "spec", json_pack("{s:o}", "containers", ctrs));
  ctrs = NULL;
  if (pod->kind == GF_PLAN_REQ_KAI)
    json_object_set_new(tmpl, "metadata",
                        json_pack("{s:{s:n,s:n}}", "annotations",
                                  "gpu-fraction", "gpu-memory"));
  /* Wrap the template in the kind's path, innermost first. */
  char path[64];
  snprintf(path, sizeof(path), "%s", template_path(w->kind));
  json_t *obj = tmpl;
  for (;;) {
    char *dot = strrchr(path, '.');
    const char *key = dot ? dot + 1 : path;
    json_t *outer = json_object();
    if (!outer) {
      json_decref(obj);
      return NULL;
    }
    json_object_set_new(outer, key, obj);
    obj = outer;
    if (!dot)
      break;
    *dot = '\0';
  }
  return obj;
fail:
  json_decref(ctrs);
  json_decref(tmpl);
  return NULL;
}

static const char *api_version(const char *kind) {
  return strcmp(kind, "CronJob") == 0 || strcmp(kind, "Job") == 0 ? "batch/v1"
                                                                  : "apps/v1";
}

/* The same patch for kustomize: a strategic merge patch file names its
 * target itself (apiVersion, kind, metadata.name and namespace). */
static int write_kustomize_patch(const json_t *patch, const gf_plan_workload *w,
                                 const char *path, gf_diag *d) {
  json_t *k = json_pack("{s:s,s:s,s:{s:s,s:s}}", "apiVersion",
                        api_version(w->kind), "kind", w->kind, "metadata",
                        "name", w->name, "namespace", w->ns);
  if (!k)
    return gf_diag_set(d, GF_ENOMEM, "patches: out of memory");
  int rc = 0;
  if (json_object_update(k, (json_t *)patch))
    rc = gf_diag_set(d, GF_ENOMEM, "patches: out of memory");
  else if (json_dump_file(k, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER))
    rc = gf_diag_set(d, GF_EIO, "%s: cannot write", path);
  json_decref(k);
  return rc;
}

static void lower(char *s) {
  for (; *s; s++)
    *s = (char)tolower((unsigned char)*s);
}

/* The workload's flags by name, comma-separated, into out[cap] (cut short
 * rather than overflow). */
static void flags_text(const gf_plan_workload *w, char *out, size_t cap) {
  size_t fl = 0;
  out[0] = '\0';
  for (unsigned b = 0; b < GF_PLAN_NFLAGS; b++)
    if (w->flags & (1u << b)) {
      int n = snprintf(out + fl, cap - fl, "%s%s", fl ? ", " : "",
                       gf_plan_flag_name(b));
      if (n > 0 && (size_t)n < cap - fl)
        fl += (size_t)n;
    }
}

/* Why no patch file can be written for a shared workload (the README says
 * it in place of a file), or NULL when one can. */
static const char *no_patch_reason(const gf__ppod *pod,
                                   const gf_plan_workload *w) {
  if (pod->dra)
    return "GPUs through a DRA claim: ask gpufrac's class in its "
           "ResourceClaimTemplate (docs/dra.md)";
  if (!template_path(w->kind))
    return "a bare pod: recreate it with these resources";
  if (strcmp(w->kind, "Job") == 0)
    return "a Job's template cannot change: change its source";
  if (pod->ngpu_ctrs > 1)
    return "several GPU containers: split the share by hand";
  if (pod->ngpu_ctrs == 0)
    return "no container asks for the GPU";
  return NULL;
}

int gf__plan_write_patches(const gf_plan *p, const char *dir, gf_diag *d) {
  char kdir[4096], path[sizeof(kdir) + 800]; /* kdir + a file name */
  if ((size_t)snprintf(kdir, sizeof(kdir), "%s/kustomize", dir) >= sizeof(kdir))
    return gf_diag_set(d, GF_ELIMIT, "%s: path too long", dir);
  if (mkdir(kdir, 0755) && errno != EEXIST)
    return gf_diag_set(d, GF_EIO, "%s: %s", kdir, strerror(errno));
  snprintf(path, sizeof(path), "%s/kustomization.yaml", kdir);
  FILE *kust = fopen(path, "w");
  if (!kust)
    return gf_diag_set(d, GF_EIO, "%s: %s", path, strerror(errno));
  fprintf(kust, "# From gpufrac plan: the migration patches as a kustomize "
                "Component.  Add this\n# directory to your kustomization's "
                "components: and build it\n# (kubectl kustomize); nothing "
                "has been applied.\n"
                "apiVersion: kustomize.config.k8s.io/v1alpha1\n"
                "kind: Component\n");
  size_t npatch = 0;
  snprintf(path, sizeof(path), "%s/README.md", dir);
  FILE *readme = fopen(path, "w");
  if (!readme) {
    fclose(kust);
    return gf_diag_set(d, GF_EIO, "%s: %s", path, strerror(errno));
  }
  fprintf(readme,
          "# Migration patches from gpufrac plan\n\n"
          "Nothing here has been applied.  Each file is a strategic merge "
          "patch of one\nworkload's pod template: it removes today's GPU "
          "request and asks for a\ngpufrac share (memory = observed peak + "
          "%.0f%% headroom, compute from\nutilisation).  Install gpufrac "
          "first, with its Helm chart (docs/install.md):\n\n"
          "    helm install gpufrac deploy/helm/gpufrac -n gpufrac-system "
          "--create-namespace\n\n"
          "and label the GPU nodes gpufrac.io/enabled=true; pods written "
          "for HAMi or KAI\nneed extender.accept (docs/migrating.md).  "
          "Then, per workload:\n\n"
          "    kubectl patch <kind> <name> -n <namespace> --type strategic "
          "--patch-file <file>\n\n"
          "or, where the manifests are built with kustomize, add "
          "kustomize/ (the same\npatches as a kustomize Component) to "
          "your kustomization's components:.\n\n"
          "Review the flagged ones first (docs/plan.md says what each flag "
          "means).\n\n"
          "| workload | file | memory | compute | flags |\n"
          "|---|---|---|---|---|\n",
          p->opt.headroom_pct);
  int rc = 0;
  for (size_t i = 0; i < p->nwls && !rc; i++) {
    const gf_plan_workload *w = &p->wls[i].pub;
    if (w->action != GF_PLAN_SHARE || !p->wls[i].npods)
      continue;
    const gf__ppod *pod = &p->pods[p->wls[i].pods[0]];
    char flags[160];
    flags_text(w, flags, sizeof(flags));
    const char *why = no_patch_reason(pod, w);
    if (why) {
      fprintf(
          readme, "| %s %s/%s | (none: %s) | %" PRId64 " Mi | %d%% | %s |\n",
          w->kind, w->ns, w->name, why, w->rec_mem_mib, w->rec_compute, flags);
      continue;
    }
    char kind[64];
    snprintf(kind, sizeof(kind), "%s", w->kind);
    lower(kind);
    char file[700];
    snprintf(file, sizeof(file), "%s-%s-%s.json", kind, w->ns, w->name);
    json_t *patch = patch_of(pod, w);
    if (!patch) {
      rc = gf_diag_set(d, GF_ENOMEM, "patches: out of memory");
      break;
    }
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    if (json_dump_file(patch, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER))
      rc = gf_diag_set(d, GF_EIO, "%s: cannot write", path);
    snprintf(path, sizeof(path), "%s/%s", kdir, file);
    if (!rc && !(rc = write_kustomize_patch(patch, w, path, d))) {
      fprintf(kust, "%s  - path: %s\n", npatch++ ? "" : "patches:\n", file);
    }
    json_decref(patch);
    fprintf(readme, "| %s %s/%s | %s | %" PRId64 " Mi | %d%% | %s |\n", w->kind,
            w->ns, w->name, file, w->rec_mem_mib, w->rec_compute, flags);
  }
  if (fclose(readme) && !rc)
    rc = gf_diag_set(d, GF_EIO, "%s/README.md: write error", dir);
  if (!npatch)
    fputs("patches: []\n", kust);
  if (fclose(kust) && !rc)
    rc = gf_diag_set(d, GF_EIO, "%s/kustomization.yaml: write error", kdir);
  return rc;
}
