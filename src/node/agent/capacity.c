/*
 * Share capacity on the Node (capacity.h, docs/kube.md "Share capacity on
 * the Node"): gpufrac.io/gpu-memory and gpufrac.io/gpu-compute in the
 * Node's status.capacity, from the inventory the agent publishes.
 */
#include "capacity.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/kube.h"
#include "gpufrac/quantity.h"
#include "node_inventory.h"

/* The inventory the agent publishes, read back with the extender's own
 * reader (gf_inventory_parse): a GPU in MIG mode is left out there (its
 * MIG devices are the units), so it is left out here too. */
void gf__node_capacity_want(const gf_node_gpus *g, gf_node_capacity_want *w) {
  memset(w, 0, sizeof(*w));
  gf_inventory *inv = gf__malloc(sizeof(*inv));
  char *text = NULL;
  gf_diag d = {""};
  if (inv && gf__node_inventory_text(g, NULL, &text, &d) == 0 &&
      gf_inventory_parse(text, strlen(text), inv, &d) == 0) {
    for (uint32_t i = 0; i < inv->ngpus; i++) {
      if (inv->gpus[i].mem_bytes > INT64_MAX - w->mem_bytes)
        break; /* not reached: 16 GPUs of at most 2^63 bytes in all */
      w->mem_bytes += inv->gpus[i].mem_bytes;
      w->compute += GF_CAPACITY_COMPUTE_PER_GPU;
      w->units++;
    }
  }
  gf__free(text);
  gf__free(inv);
}

json_t *gf__node_capacity_patch(const gf_node_capacity_want *w) {
  char mem[32], comp[32];
  snprintf(mem, sizeof(mem), "%" PRId64, w->mem_bytes);
  snprintf(comp, sizeof(comp), "%" PRId64, w->compute);
  return json_pack("{s:{s:{s:s,s:s}}}", "status", "capacity",
                   GF_CAPACITY_MEMORY, mem, GF_CAPACITY_COMPUTE, comp);
}

/* cap[name] as a whole number equal to want. */
static bool entry_is(const json_t *cap, const char *name, int64_t want) {
  const char *s = json_string_value(json_object_get(cap, name));
  gf_diag d = {""};
  int64_t v = 0;
  return s && gf_quantity_parse(s, GF_QTY_UNIT, 0, &v, &d) == 0 && v == want;
}

bool gf__node_capacity_matches(const json_t *node,
                               const gf_node_capacity_want *w) {
  const json_t *cap =
      json_object_get(json_object_get(node, "status"), "capacity");
  return json_is_object(cap) &&
         entry_is(cap, GF_CAPACITY_MEMORY, w->mem_bytes) &&
         entry_is(cap, GF_CAPACITY_COMPUTE, w->compute);
}

struct gf_node_capacity {
  gf_kube *k;
  char node[GF_NAME_MAX];
  int64_t check_ms;
  gf_node_capacity_want last; /* what the last check wanted */
  bool have_last;
  bool ok;              /* the Node carried last at the last check */
  int64_t next_ms;      /* when to check again */
  gf_kube_backoff boff; /* between failed tries */
  char failed[256];     /* the last failure logged; "" after a success */
};

int gf__node_capacity_new(gf_node_capacity **out, struct gf_kube_config *cfg,
                          const char *node, int64_t check_s, gf_diag *d) {
  *out = NULL;
  if (!node || !*node || strlen(node) >= GF_NAME_MAX || check_s < 1)
    return gf_diag_set(d, GF_EINVAL, "share capacity: bad node name or period");
  gf_node_capacity *c = gf__calloc(1, sizeof(*c));
  if (!c)
    return gf_diag_set(d, GF_ENOMEM, "share capacity: out of memory");
  gf_kube_opts ko = {.timeout_ms = 10000, .connect_timeout_ms = 5000};
  int rc = gf_kube_new(&c->k, cfg, &ko, d);
  if (rc) {
    gf__free(c);
    return rc;
  }
  snprintf(c->node, sizeof(c->node), "%s", node);
  c->check_ms = check_s * 1000;
  gf_kube_backoff_init(&c->boff, 1000, 60000, (uint64_t)(uintptr_t)c);
  *out = c;
  return 0;
}

/* Reads the Node and patches its status when it differs from w. */
static int sync_node(gf_node_capacity *c, const gf_node_capacity_want *w,
                     bool *patched, gf_diag *d) {
  char path[GF_NAME_MAX + 32];
  snprintf(path, sizeof(path), "/api/v1/nodes/%s", c->node);
  json_t *node = NULL;
  *patched = false;
  int rc = gf_kube_get(c->k, path, &node, d);
  if (rc) {
    gf_diag_prefix(d, "reading node %s", c->node);
    return rc;
  }
  bool same = gf__node_capacity_matches(node, w);
  json_decref(node);
  if (same)
    return 0;
  json_t *patch = gf__node_capacity_patch(w);
  if (!patch)
    return gf_diag_set(d, GF_ENOMEM, "share capacity: out of memory");
  snprintf(path, sizeof(path), "/api/v1/nodes/%s/status", c->node);
  rc = gf_kube_merge_patch(c->k, path, patch, NULL, NULL, d);
  json_decref(patch);
  if (rc)
    gf_diag_prefix(d, "patching node %s's status capacity", c->node);
  *patched = rc == 0;
  return rc;
}

void gf__node_capacity_tick(gf_node_capacity *c, const gf_node_gpus *g,
                            int64_t now_ms) {
  if (!c)
    return;
  gf_node_capacity_want w;
  gf__node_capacity_want(g, &w);
  bool changed = !c->have_last || memcmp(&w, &c->last, sizeof(w)) != 0;
  if (!changed && now_ms < c->next_ms)
    return;
  c->last = w;
  c->have_last = true;
  gf_diag d = {""};
  bool patched = false;
  int rc = sync_node(c, &w, &patched, &d);
  if (rc) {
    c->ok = false;
    c->next_ms = now_ms + gf_kube_backoff_next(&c->boff);
    if (strcmp(c->failed, d.msg) != 0)
      fprintf(stderr,
              "gpufrac node: share capacity: %s (retrying with "
              "backoff)\n",
              d.msg);
    snprintf(c->failed, sizeof(c->failed), "%s", d.msg);
    return;
  }
  gf_kube_backoff_reset(&c->boff);
  c->next_ms = now_ms + c->check_ms;
  if (patched || c->failed[0] || changed)
    fprintf(stderr,
            "gpufrac node: share capacity on node %s: %s %" PRId64
            ", %s %" PRId64 " (%u GPU units)%s\n",
            c->node, GF_CAPACITY_MEMORY, w.mem_bytes, GF_CAPACITY_COMPUTE,
            w.compute, w.units, patched ? "" : ", already there");
  c->failed[0] = '\0';
  c->ok = true;
}

bool gf__node_capacity_ok(const gf_node_capacity *c) { return c && c->ok; }

void gf__node_capacity_free(gf_node_capacity *c) {
  if (!c)
    return;
  gf_kube_free(c->k);
  gf__free(c);
}
