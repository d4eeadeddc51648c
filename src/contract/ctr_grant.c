/*
 * A container's grant.json (gpufrac/ctr_grant.h), with jansson.
 */
#include "gpufrac/ctr_grant.h"

#include <jansson.h>
#include <string.h>

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

int gf_ctr_grant_parse(const char *text, size_t len, gf_ctr_grant *out,
                       gf_diag *d) {
  memset(out, 0, sizeof(*out));
  json_t *root = NULL;
  int rc =
      gf__json_load_object(text, len, GF_CTR_GRANT_MAX, "grant.json", &root, d);
  if (rc)
    return rc;
  if ((rc = gf__json_version(root, GF_CTR_GRANT_VERSION, "grant.json", d)))
    goto out;
  const json_t *gpus = json_object_get(root, "gpus");
  if ((rc = gf__json_array(gpus, GF_CTR_GRANT_MAX_GPUS, "grant.json", "gpus",
                           "GPUs", d)))
    goto out;
  size_t i;
  const json_t *x;
  json_array_foreach(gpus, i, x) {
    const char *u = json_string_value(json_object_get(x, "uuid"));
    const json_t *m = json_object_get(x, "memory");
    const json_t *cp = json_object_get(x, "compute");
    if (!u || strlen(u) >= GF_UUID_MAX) {
      rc = gf_diag_set(d, GF_ESYNTAX,
                       "grant.json: gpus[%zu].uuid missing or too long", i);
      goto out;
    }
    if (!json_is_integer(m) || json_integer_value(m) < 0) {
      rc = gf_diag_set(d, GF_ESYNTAX,
                       "grant.json: gpus[%zu].memory is not a non-negative "
                       "integer",
                       i);
      goto out;
    }
    memcpy(out->uuid[i], u, strlen(u) + 1);
    out->limit[i] = (uint64_t)json_integer_value(m);
    if (json_is_integer(cp) && json_integer_value(cp) > 0 &&
        json_integer_value(cp) <= 100)
      out->compute[i] = (uint32_t)json_integer_value(cp);
  }
  out->ngpus = (uint32_t)json_array_size(gpus);
  const char *ns = json_string_value(json_object_get(root, "namespace"));
  const char *nm = json_string_value(json_object_get(root, "name"));
  if (ns && strlen(ns) < sizeof(out->ns))
    memcpy(out->ns, ns, strlen(ns) + 1);
  if (nm && strlen(nm) < sizeof(out->name))
    memcpy(out->name, nm, strlen(nm) + 1);
  rc = 0;
out:
  json_decref(root);
  if (rc) /* nothing half-read */
    memset(out, 0, sizeof(*out));
  return rc;
}
