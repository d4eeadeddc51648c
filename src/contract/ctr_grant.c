/*
 * A container's grant.json (gpufrac/ctr_grant.h), with jansson.
 */
#include "gpufrac/ctr_grant.h"

#include <jansson.h>

#include "contract_int.h"
#include "gpufrac/error.h"

int gf_ctr_grant_format(const char *pod_uid, const char *ns, const char *name,
                        const gf_grant_container *c, char **out, gf_diag *d) {
  json_t *gpus = json_array();
  json_t *root = json_pack("{s:i,s:s,s:s}", "version", GF_CTR_GRANT_VERSION,
                           "pod", pod_uid, "container", c->name);
  int rc = 0;
  if (!gpus || !root)
    goto nomem;
  /* For the metrics' namespace and pod labels (optional members). */
  if ((ns && *ns && json_object_set_new(root, "namespace", json_string(ns))) ||
      (name && *name && json_object_set_new(root, "name", json_string(name))))
    goto nomem;
  for (uint32_t i = 0; i < c->ngpus; i++) {
    const gf_grant_gpu *g = &c->gpus[i];
    json_t *o = json_pack("{s:s,s:i,s:I,s:i}", "uuid", g->uuid, "index",
                          (int)g->index, "memory", (json_int_t)g->mem_bytes,
                          "compute", (int)g->compute_pct);
    if (!o || json_array_append_new(gpus, o))
      goto nomem;
  }
  if (json_object_set(root, "gpus", gpus))
    goto nomem;
  *out = gf__json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (!*out)
    goto nomem;
  goto done;
nomem:
  rc = gf_diag_set(d, GF_ENOMEM, "grant copy: out of memory");
done:
  json_decref(gpus);
  json_decref(root);
  return rc;
}

int gf_ctr_grant_check_version(const struct json_t *root, gf_diag *d) {
  if (!json_is_object(root))
    return gf_diag_set(d, GF_ESYNTAX, "grant.json: not a JSON object");
  return gf__json_version(root, GF_CTR_GRANT_VERSION, "grant.json", d);
}
