/*
 * Internal to gf_node: helpers shared by the files of src/node and its
 * tests.  Nothing here is public API.
 */
#ifndef GPUFRAC_NODE_INT_H
#define GPUFRAC_NODE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/ctr_grant.h"
#include "gpufrac/node.h"
#include "gpufrac/region.h"

struct json_t;

/* json_dumps(j, flags) into a malloc'd string, or NULL when out of memory.
 * jansson 2.14's json_dumps ignores a failed append of an object key and
 * returns the document with that key missing (`{"version":1,":"x"}`);
 * here every append is checked, so an allocation refused anywhere gives
 * NULL, never a malformed document. */
char *gf__node_json_dumps(const struct json_t *j, size_t flags);

/* Copies src into dst[cap], truncating; always NUL-ends (cap > 0). */
void gf__node_copy(char *dst, size_t cap, const char *src);

/* Derives the inventory model name from a product name into model[cap]. */
void gf__node_model_name(const char *name, char *model, size_t cap);

/* The profile-style name of a MIG device into out[cap], as nvidia-smi
 * spells profiles: "<G>g.<M>gb" with G the GPU instance's slices, or
 * "<C>c.<G>g.<M>gb" when the compute instance has fewer slices (C) than its
 * GPU instance.  M is the instance's share of the parent's memory rounded
 * up to eighths (MIG memory comes in eighths), times the parent's memory in
 * GB (GiB, rounded up), rounded: 9856 MiB of an 80 GiB A100 is 1/8 -> 10gb,
 * 40192 MiB is 4/8 -> 40gb.  "" when gi_slices or a size is 0. */
void gf__node_mig_profile(uint32_t gi_slices, uint32_t ci_slices,
                          uint64_t mig_bytes, uint64_t parent_bytes, char *out,
                          size_t cap);

/* Joins a/b into out[cap]; false when it does not fit. */
bool gf__node_join(char *out, size_t cap, const char *a, const char *b);

/* mkdir -p dir with `mode` for the directories it creates.  GF_EIO. */
int gf__node_mkdirs(const char *dir, unsigned mode, gf_diag *d);

/* Reads at most max bytes of path into a malloc'd NUL-ended buffer.
 * GF_EIO (cannot read), GF_ELIMIT (larger than max), GF_ENOMEM. */
int gf__node_read_file(const char *path, size_t max, char **out, size_t *len,
                       gf_diag *d);

struct gf_region;

/* Calls fn for every <state_dir>/pods/<uid> directory whose name is a safe
 * path component (what Allocate creates). */
void gf__node_each_pod(const char *state_dir,
                       void (*fn)(void *user, const char *uid,
                                  const char *pod_dir),
                       void *user);

/* Calls fn for every <state_dir>/pods/<uid>/<ctr> directory, both names
 * safe path components. */
void gf__node_each_container(const char *state_dir,
                             void (*fn)(void *user, const char *uid,
                                        const char *ctr, const char *ctr_dir),
                             void *user);

/* Reads <ctr_dir>/grant.json (written by gf_node_prepare_container) with
 * the contract's reader, gf_ctr_grant_parse (gpufrac/ctr_grant.h).
 * GF_EIO / GF_ELIMIT (unreadable, too big), and the reader's errors. */
int gf__node_read_ctr_grant(const char *ctr_dir, gf_ctr_grant *g);

/* Maps <ctr_dir>/region/region for reading and the agent's few writes
 * (gf_region_observe).  The container can write its region directory, so
 * the file is checked first without following links or blocking: a
 * regular file whose lock nobody holds exclusively (a container holding it
 * forever must not hang the agent); then mapped without creating.  0 with
 * *out NULL when there is no region yet; GF_EIO, GF_ESTATE, GF_ELIMIT. */
int gf__node_region_open(const char *ctr_dir, struct gf_region **out);

/* The minor N of /dev/nvidia-caps/nvidia-cap<N> that MIG device m of GPU
 * g needs: level 0 its GPU instance
 * (<proc>/driver/nvidia/capabilities/gpu<minor>/mig/gi<gi>/access), level 1
 * its compute instance (.../gi<gi>/ci<ci>/access); the file's
 * "DeviceFileMinor:" line.  GF_EIO naming the file, GF_ELIMIT. */
int gf__node_mig_cap_minor(const char *proc, const gf_node_gpu *g,
                           const gf_node_mig *m, int level, unsigned *minor,
                           gf_diag *d);

/* ---- the weight cache's hooks (modelcache_agent.c wires them) ---------- */

struct gf_node_cache;
struct gf_node_allocator;
struct gf_node_kube;

/* Where a pod's model is mounted: GF_NODE_MODEL_MOUNT/<name>, read-only,
 * also in the container's GPUFRAC_MODEL_DIR. */
#define GF_NODE_MODEL_MOUNT "/gpufrac/models"

/* Gives the allocator the weight cache (NULL: none): an Allocate for a pod
 * with gpufrac.io/model makes the model ready, pins it for the pod and
 * mounts it.  Thread-safe. */
void gf__node_allocator_set_cache(struct gf_node_allocator *a,
                                  struct gf_node_cache *c);

/* Gives the inventory publisher the weight cache: the inventory gains
 * "models" (docs/modelcache.md).  Call before the first publish. */
void gf__node_kube_set_cache(struct gf_node_kube *k, struct gf_node_cache *c);

/* Gives the metrics server the weight cache: /metrics gains the
 * gpufrac_model_cache_* series.  Thread-safe. */
struct gf_node_server;
void gf__node_server_set_cache(struct gf_node_server *s,
                               struct gf_node_cache *c);

/* Gives the DRA state the weight cache: a claim whose reserving pod has
 * gpufrac.io/model gets the model mounted (CDI mounts), pinned for the
 * claim until it is unprepared.  Thread-safe. */
struct gf_node_dra_state;
struct gf_node_dra_claim;
struct gf_node_dra_prepared;
void gf__node_dra_state_set_cache(struct gf_node_dra_state *s,
                                  struct gf_node_cache *c);
/* gf_node_dra_prepare with the reserving pod's model (model NULL or "":
 * none): made ready (fetched from source when missing), pinned for the
 * claim (holder: its uid) and added to the claim's CDI spec as a
 * read-only bind mount at GF_NODE_MODEL_MOUNT/<name>.  Errors as
 * gf_node_dra_prepare, and the cache's (GF_ESTATE: no cache). */
/* true when claim uid is prepared, or a model prepare (whose pin comes
 * before its checkpoint entry) is under way: a pin of uid is not stale. */
bool gf__node_dra_state_holds(struct gf_node_dra_state *s, const char *uid);
int gf__node_dra_prepare_model(struct gf_node_dra_state *s,
                               const struct gf_node_dra_claim *c,
                               const char *model, const char *source,
                               struct gf_node_dra_prepared *out, gf_diag *d);

/* The node config's model_* keys (docs/modelcache.md) into c.
 * GF_ESYNTAX / GF_ERANGE naming where. */
int gf__node_cache_config_kv(gf_node_config *c, const char *k, const char *v,
                             const char *where, gf_diag *d);

/* The node's inventory (gpufrac/grant.h): g's healthy GPUs with a uuid,
 * its MIG units, and the models of cache (NULL: none) as the contract's
 * inventory and facts, which gf_inventory_format_facts writes. */
void gf__node_inventory_build(const gf_node_gpus *g,
                              struct gf_node_cache *cache, gf_inventory *inv,
                              gf_inventory_facts *f);
/* That inventory as the annotation's text (malloc'd; free()), what
 * gf_node_kube_publish writes.  GF_ENOMEM. */
int gf__node_inventory_text(const gf_node_gpus *g, struct gf_node_cache *cache,
                            char **out, gf_diag *d);

#endif
