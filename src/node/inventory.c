/*
 * The inventory annotation (gpufrac/grant.h, gpufrac/node.h), with jansson.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpufrac/error.h"
#include "node_int.h"

/* The extender's word for a mode: it knows shared and exclusive only. */
static const char *extender_mode(gf_node_mode m) {
  return m == GF_NODE_MODE_EXCLUSIVE || m == GF_NODE_MODE_MIG ? "exclusive"
                                                              : "shared";
}

/* "nvlink":[{"gpu":J,"links":N}] for the healthy peers of x (a peer left
 * out of the inventory is left out here too), "nvswitch":N.  Both only
 * when non-empty.  Nonzero on ENOMEM. */
static int add_links(json_t *o, const gf_node_gpus *g, const gf_node_gpu *x) {
  json_t *peers = json_array();
  if (!peers)
    return -1;
  for (uint32_t j = 0; j < g->ngpus && j < GF_NODE_MAX_GPUS; j++) {
    if (!(x->nvlink_peers & (1u << j)) || !g->gpus[j].healthy)
      continue;
    json_t *p = json_pack("{s:i,s:i}", "gpu", (int)g->gpus[j].index, "links",
                          (int)x->nvlink_links[j]);
    if (!p || json_array_append_new(peers, p)) {
      json_decref(peers);
      return -1;
    }
  }
  if (json_array_size(peers) == 0)
    json_decref(peers);
  else if (json_object_set_new(o, "nvlink", peers))
    return -1;
  if (x->nvlink_switch > 0 &&
      json_object_set_new(o, "nvswitch", json_integer(x->nvlink_switch)))
    return -1;
  return 0;
}

/* "migs":[{"uuid","profile","memory","sms","gi","ci"}] when x has MIG
 * devices.  Nonzero on ENOMEM. */
static int add_migs(json_t *o, const gf_node_gpu *x) {
  if (x->nmig == 0)
    return 0;
  json_t *migs = json_array();
  if (!migs || json_object_set_new(o, "migs", migs))
    return -1;
  for (uint32_t k = 0; k < x->nmig && k < GF_NODE_MAX_MIG; k++) {
    const gf_node_mig *m = &x->mig[k];
    json_t *e =
        json_pack("{s:s,s:s,s:I,s:i,s:i,s:i}", "uuid", m->uuid, "profile",
                  m->profile, "memory", (json_int_t)m->mem_bytes, "sms",
                  (int)m->sm_count, "gi", (int)m->gi, "ci", (int)m->ci);
    if (!e || json_array_append_new(migs, e))
      return -1;
  }
  return 0;
}

/* The MIG devices of GPUs in mode mig, offered to the extender as whole
 * exclusive units of their own: a grant names the MIG uuid and Allocate
 * hands out that instance.  Each needs an index no GPU of the node uses
 * (the extender's model has at most GF_MAX_GPUS_PER_NODE per node); those
 * that find none are counted in *left.  Model: "<gpu model>-<profile>". */
static int add_mig_units(json_t *gpus, const gf_node_gpus *g, uint32_t *left) {
  uint32_t used = 0;
  for (uint32_t i = 0; i < g->ngpus; i++)
    if (g->gpus[i].index < GF_MAX_GPUS_PER_NODE)
      used |= 1u << g->gpus[i].index;
  uint32_t next = 0;
  for (uint32_t i = 0; i < g->ngpus; i++) {
    const gf_node_gpu *x = &g->gpus[i];
    if (x->mode != GF_NODE_MODE_MIG || !x->healthy)
      continue;
    for (uint32_t k = 0; k < x->nmig && k < GF_NODE_MAX_MIG; k++) {
      const gf_node_mig *m = &x->mig[k];
      while (next < GF_MAX_GPUS_PER_NODE && (used & (1u << next)))
        next++;
      if (next >= GF_MAX_GPUS_PER_NODE || m->mem_bytes > (uint64_t)INT64_MAX ||
          m->mem_bytes == 0) {
        (*left)++;
        continue;
      }
      char model[GF_MODEL_NAME_MAX];
      int w = snprintf(model, sizeof(model), "%s-%s", x->model,
                       m->profile[0] ? m->profile : "mig");
      if (w < 0 || (size_t)w >= sizeof(model))
        snprintf(model, sizeof(model), "MIG-%s",
                 m->profile[0] ? m->profile : "unknown");
      json_t *o =
          json_pack("{s:i,s:s,s:s,s:I,s:i,s:s,s:s,s:s}", "index", (int)next,
                    "uuid", m->uuid, "model", model, "memory",
                    (json_int_t)m->mem_bytes, "sms", (int)m->sm_count, "mode",
                    "exclusive", "sharing", "mig-device", "parent", x->uuid);
      if (!o || json_array_append_new(gpus, o))
        return -1;
      used |= 1u << next;
    }
  }
  return 0;
}

int gf_node_inventory_json(const gf_node_gpus *g, char **out, gf_diag *d) {
  json_t *gpus = json_array();
  json_t *root = json_object();
  int rc = 0;
  if (!gpus || !root)
    goto nomem;
  if (json_object_set_new(root, "version", json_integer(GF_INVENTORY_VERSION)))
    goto nomem;
  if (g->driver_version[0] &&
      json_object_set_new(root, "driver", json_string(g->driver_version)))
    goto nomem;
  if (g->cuda_version > 0 &&
      json_object_set_new(root, "cuda", json_integer(g->cuda_version)))
    goto nomem;
  for (uint32_t i = 0; i < g->ngpus; i++) {
    const gf_node_gpu *x = &g->gpus[i];
    if (!x->healthy || !x->uuid[0] || !x->model[0] || x->mem_bytes == 0 ||
        x->mem_bytes > (uint64_t)INT64_MAX)
      continue;
    char cc[24];
    snprintf(cc, sizeof(cc), "%d.%d", (int)x->cc_major, (int)x->cc_minor);
    json_t *o = json_pack(
        "{s:i,s:s,s:s,s:I,s:i,s:s,s:s,s:s,s:s,s:i,s:b}", "index", (int)x->index,
        "uuid", x->uuid, "model", x->model, "memory", (json_int_t)x->mem_bytes,
        "sms", (int)x->sm_count, "mode", extender_mode(x->mode), "sharing",
        gf_node_mode_name(x->mode), "cc", cc, "pci", x->pci_bus_id, "numa",
        (int)x->numa_node, "mig", (int)x->mig_enabled);
    if (!o || json_array_append_new(gpus, o) || add_links(o, g, x) ||
        add_migs(o, x))
      goto nomem;
  }
  uint32_t left = 0;
  if (add_mig_units(gpus, g, &left))
    goto nomem;
  if (json_object_set(root, "gpus", gpus) ||
      (left &&
       json_object_set_new(root, "mig_units_not_offered", json_integer(left))))
    goto nomem;
  char *s = gf__node_json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (!s)
    goto nomem;
  *out = s;
  goto done;
nomem:
  rc = gf_diag_set(d, GF_ENOMEM, "inventory: out of memory");
done:
  json_decref(gpus);
  json_decref(root);
  return rc;
}

int gf__node_inventory_add_models(char **text, const char *models) {
  json_t *doc = json_loads(*text, 0, NULL);
  json_t *arr = json_loads(models, JSON_DECODE_ANY, NULL);
  int rc = 0;
  if (!json_is_object(doc) || !json_is_array(arr)) {
    rc = GF_ESYNTAX;
    goto out;
  }
  if (json_object_set(doc, "models", arr)) {
    rc = GF_ENOMEM;
    goto out;
  }
  char *t = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (!t) {
    rc = GF_ENOMEM;
    goto out;
  }
  free(*text);
  *text = t;
out:
  json_decref(doc);
  json_decref(arr);
  return rc;
}
