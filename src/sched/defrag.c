/*
 * defrag.c - planning defragmentation on the extender's model (defrag.h).
 */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "defrag.h"
#include "gpufrac/error.h"
#include "pdb.h"
#include "sched_state.h"

/* Copies of the nodes a plan changes (the candidate and destinations). */
typedef struct copies {
  uint32_t n;
  uint32_t idx[GF__DEFRAG_MOVES_MAX + 1];
  gf_node node[GF__DEFRAG_MOVES_MAX + 1];
} copies;

static gf_node *copy_of(gf_sched *s, copies *c, uint32_t ni) {
  for (uint32_t i = 0; i < c->n; i++)
    if (c->idx[i] == ni)
      return &c->node[i];
  if (c->n == GF__DEFRAG_MOVES_MAX + 1)
    return NULL;
  c->idx[c->n] = ni;
  c->node[c->n] = *gf_cluster_node(s->c, ni);
  return &c->node[c->n++];
}

static bool usable(const gf_sched *s, uint32_t ni) {
  const nrec *nr = &s->nodes[ni];
  return nr->has_inv && !nr->cordoned && !nr->disrupted;
}

static bool on_gpu(const prec *p, uint32_t g) {
  for (uint32_t k = 0; k < p->pl.ngpus; k++)
    if (p->pl.gpus[k] == g)
      return true;
  return false;
}

/* Bound, a share of one GPU, not loading, owned by a controller that
 * makes a replacement. */
static bool movable(gf_sched *s, const prec *q) {
  if (q->state != P_BOUND || q->req.gpu_count != 1 ||
      q->req.gpu_milli >= GF_GPU_MILLI || q->loading || !s->pdb)
    return false;
  char ns[GF_NAME_MAX], name[GF_NAME_MAX], owner[GF_NAME_MAX];
  if (!gf__pdb_pod_info(s->pdb, q->uid, ns, name, owner))
    return false;
  return !strcmp(owner, "ReplicaSet") || !strcmp(owner, "Deployment") ||
         !strcmp(owner, "StatefulSet");
}

/* Books q (moved) on the tightest GPU of some node that takes it, the
 * freed GPUs of node `from` excluded (`taken`); false when none does. */
static bool rehome(gf_sched *s, copies *c, const prec *q, uint32_t from,
                   const bool *taken) {
  gf_request r = q->req;
  gf__effective(s, &r);
  bool named;
  r.model_mask = gf__models_mask(s->c, q->models, &named);
  for (uint32_t ni = 0; ni < s->nnodes; ni++) {
    if (!usable(s, ni))
      continue;
    const gf_node *m = NULL;
    for (uint32_t i = 0; i < c->n && !m; i++)
      if (c->idx[i] == ni)
        m = &c->node[i];
    if (!m)
      m = gf_cluster_node(s->c, ni);
    if (!gf_node_fits(m, &r))
      continue;
    int pick = -1;
    double pl = 0;
    for (uint32_t g = 0; g < m->ngpus; g++) {
      if ((ni == from && taken[g]) || !gf_gpu_fits(&m->gpus[g], &r))
        continue;
      double l = gf__left_on(&m->gpus[g], &r);
      if (pick < 0 || l < pl) {
        pick = (int)g;
        pl = l;
      }
    }
    gf_node *w = pick >= 0 ? copy_of(s, c, ni) : NULL;
    if (!w)
      continue;
    uint8_t gpu = (uint8_t)pick;
    gf__book_copy(w, &r, &gpu);
    return true;
  }
  return false;
}

/* Tries node ni for r (pending entry e): fills *out and returns the moves
 * (0: no plan here). */
static uint32_t try_node(gf_sched *s, uint32_t ni, const gf_request *r,
                         const int64_t *head, const int64_t *nxt,
                         uint32_t max_moves, gf__defrag_plan *out) {
  const gf_node *n = gf_cluster_node(s->c, ni);
  uint32_t cnt[GF_MAX_GPUS_PER_NODE] = {0};
  bool ok[GF_MAX_GPUS_PER_NODE], taken[GF_MAX_GPUS_PER_NODE] = {false};
  for (uint32_t g = 0; g < n->ngpus; g++)
    ok[g] = !r->model_mask || (r->model_mask & (1ull << n->gpus[g].model));
  for (int64_t k = head[ni]; k >= 0; k = nxt[k]) {
    const prec *q = &s->pods[k];
    bool mv = movable(s, q);
    for (uint32_t j = 0; j < q->pl.ngpus; j++) {
      cnt[q->pl.gpus[j]]++;
      ok[q->pl.gpus[j]] = ok[q->pl.gpus[j]] && mv;
    }
  }
  uint32_t moves = 0;
  uint8_t gpus[GF_MAX_GPUS_PER_NODE];
  for (uint32_t t = 0; t < r->gpu_count; t++) {
    int pk = -1;
    for (uint32_t g = 0; g < n->ngpus; g++)
      if (ok[g] && !taken[g] && (pk < 0 || cnt[g] < cnt[pk]))
        pk = (int)g;
    if (pk < 0)
      return 0;
    taken[pk] = true;
    gpus[t] = (uint8_t)pk;
    moves += cnt[pk];
  }
  if (moves == 0 || moves > max_moves)
    return 0;
  copies *c = gf__calloc(1, sizeof(*c));
  if (!c)
    return 0;
  const prec *mv[GF__DEFRAG_MOVES_MAX];
  const char *uids[GF__DEFRAG_MOVES_MAX];
  uint32_t nm = 0;
  gf_node *w = copy_of(s, c, ni);
  for (int64_t k = head[ni]; k >= 0; k = nxt[k]) {
    const prec *q = &s->pods[k];
    bool in = false;
    for (uint32_t t = 0; t < r->gpu_count && !in; t++)
      in = on_gpu(q, gpus[t]);
    if (in && nm < GF__DEFRAG_MOVES_MAX) {
      gf__unbook_copy(w, q);
      uids[nm] = q->uid;
      mv[nm++] = q;
    }
  }
  gf__reindex_copy(w);
  bool fits = nm == moves && gf_node_fits(w, r);
  for (uint32_t t = 0; t < r->gpu_count && fits; t++)
    fits = gf_gpu_fits(&w->gpus[gpus[t]], r);
  if (fits)
    gf__book_copy(w, r, gpus);
  if (fits && gf__pdb_violations(s->pdb, uids, nm) > 0)
    fits = false;
  for (uint32_t j = 0; j < nm && fits; j++)
    fits = rehome(s, c, mv[j], ni, taken);
  gf__free(c);
  if (!fits)
    return 0;
  snprintf(out->node, sizeof(out->node), "%s", s->nodes[ni].name);
  out->ngpus = r->gpu_count;
  for (uint32_t t = 0; t < r->gpu_count; t++)
    out->gpus[t] = n->gpus[gpus[t]].index;
  out->n = nm;
  for (uint32_t j = 0; j < nm; j++) {
    char owner[GF_NAME_MAX];
    snprintf(out->moves[j].uid, sizeof(out->moves[j].uid), "%s", mv[j]->uid);
    gf__pdb_pod_info(s->pdb, mv[j]->uid, out->moves[j].ns, out->moves[j].name,
                     owner);
  }
  return moves;
}

static bool fits_somewhere(gf_sched *s, const gf_request *r) {
  for (uint32_t ni = 0; ni < s->nnodes; ni++)
    if (usable(s, ni) && gf_node_fits(gf_cluster_node(s->c, ni), r))
      return true;
  return false;
}

/* The plan for pending entry e (asking r), the node with fewest moves. */
static bool plan_for(gf_sched *s, const pend *e, const gf_request *r,
                     const int64_t *head, const int64_t *nxt,
                     uint32_t max_moves, gf__defrag_plan *out) {
  gf__defrag_plan cur;
  uint32_t best = 0;
  for (uint32_t ni = 0; ni < s->nnodes && best != 1; ni++) {
    if (!usable(s, ni))
      continue;
    uint32_t m = try_node(s, ni, r, head, nxt, max_moves, &cur);
    if (m && (!best || m < best)) {
      best = m;
      *out = cur;
    }
  }
  if (!best)
    return false;
  snprintf(out->ns, sizeof(out->ns), "%.*s", (int)e->ns_len, e->nskey);
  snprintf(out->name, sizeof(out->name), "%s", e->nskey + e->ns_len + 1);
  snprintf(out->uid, sizeof(out->uid), "%s", e->uid);
  return true;
}

int gf__defrag_plan_one(gf_sched *s, uint32_t max_moves, gf__defrag_plan *out) {
  if (max_moves > GF__DEFRAG_MOVES_MAX)
    max_moves = GF__DEFRAG_MOVES_MAX;
  pthread_mutex_lock(&s->mu);
  int rc = s->pdb && s->pend.n ? gf__ensure_model(s) : 0;
  int64_t *head = NULL, *nxt = NULL;
  if (rc || !s->pdb || !s->pend.n)
    goto done;
  head = gf__malloc(((size_t)s->nnodes + 1) * sizeof(*head));
  nxt = gf__malloc(((size_t)s->npods + 1) * sizeof(*nxt));
  if (!head || !nxt) {
    rc = GF_ENOMEM;
    goto done;
  }
  for (uint32_t i = 0; i < s->nnodes; i++)
    head[i] = -1;
  for (uint32_t k = s->npods; k-- > 0;)
    if (s->pods[k].placed && s->pods[k].pl.node < s->nnodes) {
      nxt[k] = head[s->pods[k].pl.node];
      head[s->pods[k].pl.node] = (int64_t)k;
    }
  for (const pend *e = s->pend.oldest; e && !rc; e = e->newer) {
    if (e->nominated[0] || e->req.gpu_count == 0)
      continue;
    gf_request r = e->req;
    gf__effective(s, &r);
    bool named;
    r.model_mask = gf__models_mask(s->c, e->models, &named);
    if (r.gpu_milli < GF_GPU_MILLI || (named && !r.model_mask) ||
        fits_somewhere(s, &r))
      continue;
    if (plan_for(s, e, &r, head, nxt, max_moves, out))
      rc = 1;
  }
done:
  pthread_mutex_unlock(&s->mu);
  gf__free(head);
  gf__free(nxt);
  return rc;
}
