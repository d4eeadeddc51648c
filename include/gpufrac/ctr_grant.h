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
 * that order; readers look keys up by name and ignore ones they do not know.
 *
 * Invariants.  "version" is GF_CTR_GRANT_VERSION (gpufrac/contract.h); every
 * reader checks it with gf_ctr_grant_check_version and refuses another
 * number rather than guess at its meaning.
 */
#ifndef GPUFRAC_CTR_GRANT_H
#define GPUFRAC_CTR_GRANT_H

#include "gpufrac/contract.h"
#include "gpufrac/diag.h"
#include "gpufrac/grant.h"

struct json_t;

/* Formats container c's grant.json for pod pod_uid (ns and name may be
 * NULL or "": left out) as compact JSON into a malloc'd string the caller
 * frees with free().  GF_ENOMEM. */
int gf_ctr_grant_format(const char *pod_uid, const char *ns, const char *name,
                        const gf_grant_container *c, char **out, gf_diag *d);

/* The reader's version check on a parsed grant.json (root may be NULL or
 * not an object: refused).  0, or GF_ESYNTAX naming the version (d may be
 * NULL). */
int gf_ctr_grant_check_version(const struct json_t *root, gf_diag *d);

#endif
