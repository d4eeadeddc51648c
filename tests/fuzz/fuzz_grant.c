/* libFuzzer target: the two annotation documents exchanged between the
 * extender and the node agent (gpufrac/grant.h), and a container's
 * grant.json (gpufrac/ctr_grant.h).  Each input is parsed as a grant, as
 * an inventory and as a grant.json.  No parser may crash or leak; what one
 * accepts must keep the documented invariants, format back to text, and
 * parse again to the same values. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/ctr_grant.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool known_error(int rc) {
  return rc == GF_ESYNTAX || rc == GF_ERANGE || rc == GF_ELIMIT;
}

/* NUL-terminated within its field. */
static bool ended(const char *s, size_t cap) { return memchr(s, '\0', cap); }

static void check_grant(const gf_grant *g) {
  if (g->ncontainers > GF_GRANT_MAX_CONTAINERS || !ended(g->node, GF_NAME_MAX))
    abort();
  for (uint32_t i = 0; i < g->ncontainers; i++) {
    const gf_grant_container *c = &g->containers[i];
    if (c->ngpus > GF_MAX_GPUS_PER_NODE || !ended(c->name, GF_CONTAINER_MAX))
      abort();
    uint32_t seen = 0;
    for (uint32_t j = 0; j < c->ngpus; j++) {
      const gf_grant_gpu *x = &c->gpus[j];
      if (x->index >= GF_MAX_GPUS_PER_NODE || (seen & (1u << x->index)) ||
          x->mem_bytes < 0 || x->compute_pct < 0 || x->compute_pct > 100 ||
          !ended(x->uuid, GF_UUID_MAX))
        abort();
      seen |= 1u << x->index;
    }
  }
}

static void check_inventory(const gf_inventory *inv) {
  if (inv->ngpus > GF_MAX_GPUS_PER_NODE)
    abort();
  for (uint32_t i = 0; i < inv->ngpus; i++) {
    const gf_inventory_gpu *x = &inv->gpus[i];
    if (x->index >= GF_MAX_GPUS_PER_NODE ||
        (i && inv->gpus[i - 1].index >= x->index) || /* sorted, unique */
        x->mem_bytes <= 0 || x->sm_count < 0 ||
        (x->mode != GF_GPU_MODE_SHARED && x->mode != GF_GPU_MODE_EXCLUSIVE) ||
        !ended(x->uuid, GF_UUID_MAX) || !x->uuid[0] ||
        !ended(x->model, GF_GPU_MODEL_MAX) || !x->model[0])
      abort();
  }
  if (inv->nmodels > GF_INVENTORY_MAX_MODELS)
    abort();
  for (uint32_t i = 0; i < inv->nmodels; i++) {
    const gf_inventory_model *m = &inv->models[i];
    if (!ended(m->name, GF_MODEL_NAME_LEN) || !m->name[0] ||
        strchr(m->name, '@') || !ended(m->digest, GF_MODEL_DIGEST_LEN) ||
        strlen(m->digest) != GF_MODEL_DIGEST_LEN - 1 || m->bytes < 0 ||
        (m->state != GF_MODEL_READY && m->state != GF_MODEL_FETCHING))
      abort();
    for (uint32_t k = 0; k < i; k++) /* unique */
      if (!strcmp(inv->models[k].name, m->name) &&
          !strcmp(inv->models[k].digest, m->digest))
        abort();
  }
}

static bool same_grant(const gf_grant *a, const gf_grant *b) {
  if (strcmp(a->node, b->node) || a->ncontainers != b->ncontainers)
    return false;
  for (uint32_t i = 0; i < a->ncontainers; i++) {
    const gf_grant_container *c = &a->containers[i], *e = &b->containers[i];
    if (strcmp(c->name, e->name) || c->ngpus != e->ngpus)
      return false;
    for (uint32_t j = 0; j < c->ngpus; j++) {
      const gf_grant_gpu *x = &c->gpus[j], *y = &e->gpus[j];
      if (x->index != y->index || strcmp(x->uuid, y->uuid) ||
          x->mem_bytes != y->mem_bytes || x->compute_pct != y->compute_pct)
        return false;
    }
  }
  return true;
}

static bool same_inventory(const gf_inventory *a, const gf_inventory *b) {
  if (a->ngpus != b->ngpus)
    return false;
  for (uint32_t i = 0; i < a->ngpus; i++) {
    const gf_inventory_gpu *x = &a->gpus[i], *y = &b->gpus[i];
    if (x->index != y->index || strcmp(x->uuid, y->uuid) ||
        strcmp(x->model, y->model) || x->mem_bytes != y->mem_bytes ||
        x->sm_count != y->sm_count || x->mode != y->mode)
      return false;
  }
  if (a->nmodels != b->nmodels)
    return false;
  for (uint32_t i = 0; i < a->nmodels; i++) {
    const gf_inventory_model *x = &a->models[i], *y = &b->models[i];
    if (strcmp(x->name, y->name) || strcmp(x->digest, y->digest) ||
        x->bytes != y->bytes || x->state != y->state)
      return false;
  }
  return true;
}

/* A grant.json the reader accepted: in bounds, and written back by the
 * one writer it reads the same. */
static void check_ctr_grant(const gf_ctr_grant *r) {
  if (r->ngpus > GF_CTR_GRANT_MAX_GPUS || !ended(r->ns, GF_NAME_MAX) ||
      !ended(r->name, GF_NAME_MAX))
    abort();
  gf_grant_container c;
  memset(&c, 0, sizeof(c));
  memcpy(c.name, "c", 2);
  c.ngpus = r->ngpus;
  for (uint32_t i = 0; i < r->ngpus; i++) {
    if (!ended(r->uuid[i], GF_UUID_MAX) || r->compute[i] > 100 ||
        r->limit[i] > (uint64_t)INT64_MAX)
      abort();
    memcpy(c.gpus[i].uuid, r->uuid[i], strlen(r->uuid[i]) + 1);
    c.gpus[i].index = i;
    c.gpus[i].mem_bytes = (int64_t)r->limit[i];
    c.gpus[i].compute_pct = (int32_t)r->compute[i];
  }
  char *s = NULL;
  gf_diag d = {""};
  gf_ctr_grant r2;
  if (gf_ctr_grant_format("u", r->ns, r->name, &c, &s, &d) ||
      gf_ctr_grant_parse(s, strlen(s), &r2, &d) ||
      memcmp(r, &r2, sizeof(r2)) != 0)
    abort();
  free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  gf_diag d = {""};
  char *s = NULL;

  gf_grant g, g2;
  int rc = gf_grant_parse(text, size, &g, &d);
  if (rc) {
    if (!known_error(rc) || !d.msg[0])
      abort();
  } else {
    check_grant(&g);
    if (gf_grant_format(&g, &s, &d))
      abort();
    if (gf_grant_parse(s, strlen(s), &g2, &d) || !same_grant(&g, &g2))
      abort(); /* what was accepted reads back the same */
    free(s);
    s = NULL;
  }

  gf_inventory inv, inv2;
  d.msg[0] = '\0';
  rc = gf_inventory_parse(text, size, &inv, &d);
  if (rc) {
    if (!known_error(rc) || !d.msg[0])
      abort();
  } else {
    check_inventory(&inv);
    if (gf_inventory_format(&inv, &s, &d))
      abort();
    if (gf_inventory_parse(s, strlen(s), &inv2, &d) ||
        !same_inventory(&inv, &inv2))
      abort();
    free(s);
  }

  gf_ctr_grant cg;
  d.msg[0] = '\0';
  rc = gf_ctr_grant_parse(text, size, &cg, &d);
  if (rc) {
    if (!known_error(rc) || !d.msg[0])
      abort();
  } else {
    check_ctr_grant(&cg);
  }
  return 0;
}
