/*
 * node_util.h - the node's file and state-dir helpers (util.c, and
 * container.c's gf__node_forget_pod), shared by the node's parts
 * (src/node and its folders), the weight cache (src/modelcache) and their
 * tests. Internal to gpufrac; nothing here is public API.
 */
#ifndef GPUFRAC_NODE_UTIL_H
#define GPUFRAC_NODE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/ctr_grant.h"
#include "gpufrac/node.h"
#include "gpufrac/region.h"

struct json_t;

#define GF_NODE_UID_MAX 64 /* a pod uid, NUL included */

/* json_dumps(j, flags) into a malloc'd string, or NULL when out of memory.
 * jansson 2.14's json_dumps ignores a failed append of an object key and
 * returns the document with that key missing (`{"version":1,":"x"}`);
 * here every append is checked, so an allocation refused anywhere gives
 * NULL, never a malformed document. */
char *gf__node_json_dumps(const struct json_t *j, size_t flags);

/* Copies src into dst[cap], truncating; always NUL-ends (cap > 0). */
void gf__node_copy(char *dst, size_t cap, const char *src);

/* Joins a/b into out[cap]; false when it does not fit. */
bool gf__node_join(char *out, size_t cap, const char *a, const char *b);

/* mkdir -p dir with `mode` for the directories it creates.  GF_EIO. */
int gf__node_mkdirs(const char *dir, unsigned mode, gf_diag *d);

/* Reads at most max bytes of path into a NUL-ended buffer of the wrapper
 * (a gf__buf: free it with gf__free).  GF_EIO (cannot read), GF_ELIMIT (larger
 * than max), GF_ENOMEM. */
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

/* (container.c) Removes <state_dir>/pods/<uid> and the pod's CDI specs in
 * cdi_dir (may be NULL).  uid must be a safe name.  GF_EINVAL, GF_EIO
 * naming the path. */
int gf__node_forget_pod(const char *state_dir, const char *cdi_dir,
                        const char *uid, gf_diag *d);

#endif
