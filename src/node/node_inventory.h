/*
 * node_inventory.h - the node's inventory (inventory.c) as the contract
 * writes it (gpufrac/grant.h), with the weight cache's models: what the
 * device plugin's Node link and the DRA publisher annotate the Node with.
 * Internal to gpufrac; nothing here is public API.
 */
#ifndef GPUFRAC_NODE_INVENTORY_H
#define GPUFRAC_NODE_INVENTORY_H

#include "gpufrac/diag.h"
#include "gpufrac/grant.h"
#include "gpufrac/node.h"

struct gf_node_cache;

/* The node's inventory (gpufrac/grant.h): g's healthy GPUs with a uuid,
 * its MIG units, and the models of cache (NULL: none) as the contract's
 * inventory and facts, which gf_inventory_format_facts writes. */
void gf__node_inventory_build(const gf_node_gpus *g,
                              struct gf_node_cache *cache, gf_inventory *inv,
                              gf_inventory_facts *f);
/* That inventory as the annotation's text (malloc'd; free()), what
 * gf__node_kube_publish writes.  GF_ENOMEM. */
int gf__node_inventory_text(const gf_node_gpus *g, struct gf_node_cache *cache,
                            char **out, gf_diag *d);

#endif
