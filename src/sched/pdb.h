/*
 * Internal to gf_sched: the PodDisruptionBudgets the preempt verb honours
 * (pdb.c), fed by the kube feed's PDB informer
 * (/apis/policy/v1/poddisruptionbudgets) and its pod informer (labels).
 *
 * Why it exists.  kube-scheduler's own preemption counts, for every victim
 * it would take, whether taking it breaks a PodDisruptionBudget, and
 * prefers the nodes (and, on a node, the victims) that break fewest.  With
 * the extender's preempt verb the victims are the extender's choice, so
 * the extender must count the same way, or it would answer a set that
 * kube-scheduler thinks breaks no budget while it does.
 *
 * The rule, as kube-scheduler's default preemption has it:
 *   - a budget counts only pods of its own namespace that carry labels;
 *   - its selector (matchLabels and matchExpressions: In, NotIn, Exists,
 *     DoesNotExist) must match the pod's labels; a missing or empty
 *     selector, or one kube-scheduler would refuse (an unknown operator,
 *     In/NotIn without values, Exists/DoesNotExist with values), matches
 *     nothing;
 *   - a pod already named in status.disruptedPods does not count against
 *     that budget (the API server has processed its eviction);
 *   - over a set of victims each budget starts at status.disruptionsAllowed
 *     and goes down by one per victim it matches; a victim that takes any
 *     of its budgets below zero is a violation.
 *
 * gpufrac's own evictions (defragmentation, its own preemption for GPU
 * memory, DRA mode 2 preemption) go through the Eviction API, which
 * follows policy/v1 instead (GF__PDB_EVICTION): an empty selector
 * (`selector: {}`) matches every pod of the budget's namespace, labels or
 * not; a missing (null) selector, or one the API server cannot turn into
 * a selector, matches nothing; a pod without labels can still match
 * (NotIn, DoesNotExist).  Counting those the scheduler's way would plan
 * evictions the API refuses (429) on every pass.
 *
 * Thread safety: every function may be called from any thread (one
 * mutex).  The preempt verb calls gf__pdb_match under gf_sched.mu; nothing
 * here takes that mutex.
 */
#ifndef GPUFRAC_SCHED_PDB_H
#define GPUFRAC_SCHED_PDB_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpufrac/diag.h"

typedef struct gf__pdb gf__pdb;

/* An empty store (nothing listed yet: gf__pdb_synced false).  NULL when
 * out of memory. */
gf__pdb *gf__pdb_new(void);
void gf__pdb_free(gf__pdb *db);

/* A PodDisruptionBudget added or changed.  GF_ESYNTAX with the field
 * named when it has no metadata.namespace/name (it is then not kept);
 * a selector kube-scheduler would refuse is kept as matching nothing.
 * GF_ENOMEM. */
int gf__pdb_update(gf__pdb *db, const json_t *pdb, gf_diag *d);
/* A PodDisruptionBudget deleted (by namespace and name). */
void gf__pdb_delete(gf__pdb *db, const json_t *pdb);
/* The informer's first LIST has been applied: until then the preempt
 * verb does not answer (it cannot know which victims break a budget). */
void gf__pdb_set_synced(gf__pdb *db, bool synced);
/* Or: listed when fn(user) says so (the informers' own flags). */
void gf__pdb_synced_by(gf__pdb *db, bool (*fn)(void *user), void *user);
bool gf__pdb_synced(gf__pdb *db);
/* Budgets known. */
uint32_t gf__pdb_count(gf__pdb *db);

/* A pod's labels, namespace, name and controller's kind, by UID (from the
 * pod informer).  A pod without uid, namespace or name is forgotten (no
 * budget matches it).  GF_ENOMEM. */
int gf__pdb_pod_update(gf__pdb *db, const json_t *pod);
void gf__pdb_pod_delete(gf__pdb *db, const json_t *pod);
/* Copies metadata.labels and the controller's ownerReference (kind only)
 * of pod into slim (the informer's slim copy).  0, or -1 when out of
 * memory. */
int gf__pdb_slim(json_t *slim, const json_t *pod);

/* Pod uid's namespace, name and controller kind ("" when none) into the
 * buffers (each GF_NAME_MAX); false when the store does not know it. */
bool gf__pdb_pod_info(gf__pdb *db, const char *uid, char *ns, char *name,
                      char *owner);
/* Whose rule a budget's selector follows (above). */
typedef enum gf__pdb_rule {
  GF__PDB_SCHEDULER, /* kube-scheduler's preemption: the preempt verb */
  GF__PDB_EVICTION,  /* policy/v1, the Eviction API: gpufrac's evictions */
} gf__pdb_rule;

/* The budget violations of evicting uids[0..n) together, counted by
 * rule. */
uint32_t gf__pdb_violations(gf__pdb *db, gf__pdb_rule rule,
                            const char *const *uids, uint32_t n);

/* The budgets a set of victims on one node counts against: victim i of
 * uids[0..n) matches budget b of the view when bit b of masks[i] is set;
 * view->allowed[b] is that budget's disruptionsAllowed.  A victim matching
 * more than GF__PDB_VIEW_MAX distinct budgets among the n gets always[i]
 * (counted as a violation whatever the set).  Victims unknown to the store
 * match nothing. */
#define GF__PDB_VIEW_MAX 64u
typedef struct gf__pdb_view {
  uint32_t n;
  int32_t allowed[GF__PDB_VIEW_MAX];
} gf__pdb_view;
void gf__pdb_match(gf__pdb *db, gf__pdb_rule rule, const char *const *uids,
                   uint32_t n, uint64_t *masks, bool *always,
                   gf__pdb_view *view);

#endif
