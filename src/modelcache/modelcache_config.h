/*
 * modelcache_config.h - the node config's model_* keys (docs/modelcache.md,
 * "Node config"): what the node's config reader (src/node/config.c) hands
 * over, and what the agent turns into the cache's options when it opens
 * the cache.  Internal to gpufrac; nothing here is public API.
 */
#ifndef GPUFRAC_MODELCACHE_CONFIG_H
#define GPUFRAC_MODELCACHE_CONFIG_H

#include "gpufrac/diag.h"
#include "gpufrac/modelcache.h"
#include "gpufrac/node.h"

/* The node config's model_* keys (docs/modelcache.md) into c.
 * GF_ESYNTAX / GF_ERANGE naming where; GF_ESYNTAX "unknown key" for a key
 * that is none of them. */
int gf__node_cache_config_kv(gf_node_config *c, const char *k, const char *v,
                             const char *where, gf_diag *d);

/* The keys for the cache's limits and namespaces (model_fetch_deadline_s,
 * model_fetch_min_rate, model_ns_budget, model_shared_sources) into c: 0,
 * an error naming `where` and the key, or 1 when k is none of them. */
int gf__node_cache_config_hardening(gf_node_config *c, const char *k,
                                    const char *v, const char *where,
                                    gf_diag *d);
/* Those keys of cfg into o (its strings point into cfg). */
void gf__node_cache_opts_hardening(gf_node_cache_opts *o,
                                   const gf_node_config *cfg);

#endif
