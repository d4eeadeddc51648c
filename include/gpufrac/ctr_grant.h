/*
 * gpufrac/ctr_grant.h - a container's grant.json: the one container's part
 * of its pod's grant (gpufrac/grant.h) that the node agent writes beside the
 * container's interposer config, for the agent's own later readers (metrics
 * labels, the utilisation feedback, restart recovery).
 *
 *   {"version":1,"pod":"<uid>","container":"c","namespace":"ns","name":"p",
 *    "gpus":[{"uuid":"GPU-...","index":0,"memory":8589934592,"compute":30}]}
 *
 * "namespace" and "name" are present only when known.  Keys are written in
 * that order; the reader looks keys up by name (exactly: the agent's own
 * file) and ignores ones it does not know.
 *
 * Invariants.  "version" is GF_CTR_GRANT_VERSION (gpufrac/contract.h); the
 * one reader, gf_ctr_grant_parse, refuses another number rather than guess
 * at its meaning.
 */
#ifndef GPUFRAC_CTR_GRANT_H
#define GPUFRAC_CTR_GRANT_H

#include "gpufrac/contract.h"
#include "gpufrac/diag.h"
#include "gpufrac/grant.h"

/* Formats container c's grant.json for pod pod_uid (ns and name may be
 * NULL or "": left out) as compact JSON into a string from gpufrac's
 * allocation wrapper (a gf__buf): code in src/ frees it with gf__free, so
 * the leak accounting sees it released; it is plain malloc memory, so a
 * caller outside the library may free() it.  GF_ENOMEM. */
int gf_ctr_grant_format(const char *pod_uid, const char *ns, const char *name,
                        const gf_grant_container *c, char **out, gf_diag *d);

/* Its file name in the container's directory of the agent's state
 * (gf_node_ctr_paths, gpufrac/node.h). */
#define GF_CTR_GRANT_FILE "grant.json"

/* The most bytes of a grant.json, and of GPUs in one (the shared region
 * has a limit slot for each: GF_REGION_DEVICES). */
#define GF_CTR_GRANT_MAX 65536
#define GF_CTR_GRANT_MAX_GPUS 16

/* What a container's grant.json says: its GPUs in grant order, each with
 * its memory limit and compute percent. */
typedef struct gf_ctr_grant {
  char ns[GF_NAME_MAX], name[GF_NAME_MAX]; /* the pod's; "" when absent or
                                              too long */
  uint32_t ngpus;
  char uuid[GF_CTR_GRANT_MAX_GPUS][GF_UUID_MAX];
  uint64_t limit[GF_CTR_GRANT_MAX_GPUS];   /* "memory": bytes; 0 = none */
  uint32_t compute[GF_CTR_GRANT_MAX_GPUS]; /* "compute" when 1..100, else 0 */
} gf_ctr_grant;

/* Parses len bytes of grant.json into *out.  GF_ESYNTAX (not a JSON
 * object, duplicate keys, another version, "gpus" not an array of objects
 * each with a uuid that fits and non-negative integer memory), GF_ELIMIT
 * (over GF_CTR_GRANT_MAX bytes or GF_CTR_GRANT_MAX_GPUS GPUs), GF_ENOMEM;
 * the sentence in d (may be NULL) names the field. */
int gf_ctr_grant_parse(const char *text, size_t len, gf_ctr_grant *out,
                       gf_diag *d);

#endif
