/* libFuzzer target: the DRA parsers (gpufrac/sched_dra.h).  Each input is
 * read as JSON and parsed as a ResourceSlice and as a ResourceClaim (an
 * array: its first element as the slice, its second as the claim); what
 * they accept must keep the documented limits, and a model made of both
 * must place, score and book without crashing, leaking or over-booking
 * what it placed itself. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/error.h"
#include "gpufrac/sched_dra.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool ended(const char *s, size_t cap) { return memchr(s, '\0', cap); }

static void check_claim(const gf_dra_claim *c) {
  if (c->nreq > GF_DRA_REQUESTS_MAX || c->nres > GF_DRA_RESULTS_MAX ||
      !ended(c->name, sizeof(c->name)) || !ended(c->rv, sizeof(c->rv)))
    abort();
  for (uint32_t i = 0; i < c->nreq; i++)
    if (c->req[i].count < 1 || c->req[i].count > GF_MAX_GPUS_PER_NODE ||
        c->req[i].mem < 0 || c->req[i].cores < 0 ||
        !ended(c->req[i].why, sizeof(c->req[i].why)))
      abort();
  for (uint32_t i = 0; i < c->nres; i++)
    if (c->res[i].mem < 0 || !ended(c->res[i].pool, sizeof(c->res[i].pool)))
      abort();
}

static uint8_t rnd[16 * GF_DRA_RESULTS_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_t *j = json_loadb((const char *)data, size, 0, NULL);
  if (!j)
    return 0;
  gf_dra_slice s;
  gf_dra_claim *c = malloc(sizeof(*c));
  gf_diag d = {""};
  const json_t *js = json_is_array(j) ? json_array_get(j, 0) : j;
  const json_t *jc = json_is_array(j) ? json_array_get(j, 1) : j;
  int sr = gf_dra_slice_parse(js, &s, &d);
  if (sr && !ended(d.msg, sizeof(d.msg)))
    abort();
  if (!sr && (s.ndevices > GF_DRA_DEVICES_MAX || (!s.ours && s.ndevices)))
    abort();
  int cr = c ? gf_dra_claim_parse(jc, c, &d) : GF_ENOMEM;
  if (!cr)
    check_claim(c);
  if (!sr && !cr) {
    const gf_dra_slice *sl[] = {&s};
    const gf_dra_claim *cl[] = {c};
    gf_dra_model *m = NULL;
    if (gf_dra_model_new(sl, 1, cl, 1, NULL, &m, NULL) == 0) {
      /* the cache term: weights named after the slice's first model */
      uint32_t w = 0;
      if (s.ndevices && s.devices[0].nmodels) {
        char ref[96];
        snprintf(ref, sizeof(ref), "m@sha256:%s%048d",
                 s.devices[0].models[0].hex, 0);
        w = gf_dra_model_weights(m, ref);
      }
      int64_t score;
      gf_dra_model_score(m, cl, 1, w, s.node, &score);
      bool placeable = !c->allocated;
      for (uint32_t i = 0; i < c->nreq; i++)
        placeable = placeable && c->req[i].kind != GF_DRA_OTHER;
      gf_dra_result(*res)[GF_DRA_RESULTS_MAX] = calloc(1, sizeof(*res));
      uint32_t nres[1];
      char node[GF_DRA_NAME_MAX];
      if (res && placeable &&
          gf_dra_model_place(m, cl, 1, w, rnd, sizeof(rnd), res, nres, node,
                             NULL) == 0) {
        for (uint32_t i = 0; i < nres[0]; i++) {
          int64_t em, ec, en;
          if (gf_dra_model_excess(m, res[0][i].pool, res[0][i].device, &em, &ec,
                                  &en) != 0 ||
              em > 0 || ec > 0 || en > 0)
            abort(); /* it over-booked what it placed */
        }
      }
      free(res);
      gf_dra_model_free(m);
    }
  }
  gf_dra_slice_release(&s);
  free(c);
  json_decref(j);
  return 0;
}
