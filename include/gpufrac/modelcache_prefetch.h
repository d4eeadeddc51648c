/*
 * modelcache_prefetch.h - the prefetch declaration (docs/modelcache.md):
 * a ConfigMap labelled gpufrac.io/model-prefetch in the agents' namespace,
 *
 *   data:
 *     model: <name>@sha256:<hex>     the model (the pod annotation's form)
 *     source: <http(s):// or file:// URL>
 *     nodeNames: a,b                 these nodes, or
 *     nodeSelector: k=v,k2=v2        the nodes whose labels match all pairs
 *     nodes: "N"                     informational: how many were asked for
 *
 * `gpufrac cache prefetch --nodes N` resolves N into nodeNames when it
 * writes the ConfigMap (the agents do not list nodes); each agent fetches
 * the models of the ConfigMaps that name or select its node.
 */
#ifndef GPUFRAC_NODE_MODELCACHE_PREFETCH_H
#define GPUFRAC_NODE_MODELCACHE_PREFETCH_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpufrac/diag.h"

#define GF_NODE_PREFETCH_LABEL "gpufrac.io/model-prefetch"
#define GF_NODE_PREFETCH_NAMESPACE "gpufrac-system"

typedef struct gf_node_prefetch {
  char model[400];
  char source[2048];
  char names[4096];    /* comma-separated node names; "" none */
  char selector[1024]; /* k=v,k=v; "" none */
  uint32_t nodes;      /* asked-for count (0: not by count) */
} gf_node_prefetch;

void gf_node_prefetch_init(gf_node_prefetch *p);

/* The ConfigMap for p in namespace ns (a new reference), NULL on no
 * memory. Its name: gpufrac-prefetch-<name>-<first 12 hex>. */
json_t *gf_node_prefetch_configmap(const gf_node_prefetch *p, const char *ns);

/* Reads a ConfigMap written as above.  GF_ESYNTAX naming the ConfigMap and
 * the field: no model or not NAME@sha256:HEX, a source that is not a URL
 * the cache fetches, both or neither of nodeNames and nodeSelector, a
 * selector pair without '='. */
int gf_node_prefetch_parse(const json_t *cm, gf_node_prefetch *p, gf_diag *d);

/* True when p asks node `node` (its metadata.labels object `labels`, may
 * be NULL) to hold the model. */
bool gf_node_prefetch_wants(const gf_node_prefetch *p, const char *node,
                            const json_t *labels);

/* Orders candidate nodes for model hex: those whose inventory annotation
 * lists it ready first, then fetching, then the rest by a hash of node and
 * digest (so different models spread over different nodes); picks the
 * first n of the Nodes in `list` (a NodeList) that carry a gpufrac
 * inventory and are schedulable, into names (comma-separated).  Returns
 * how many were picked. */
uint32_t gf_node_prefetch_pick(const json_t *list, const char *hex, uint32_t n,
                               char *names, size_t cap);

#endif
