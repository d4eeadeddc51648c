/* Helpers shared by the extender's tests: fixtures, a fake binder, calls. */
#ifndef GPUFRAC_TESTS_SCHED_TEST_H
#define GPUFRAC_TESTS_SCHED_TEST_H

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/error.h"
#include "gpufrac/sched.h"

/* Reads fixture `name` into a malloc'd NUL-ended string (aborts on error). */
static inline char *fixture(const char *name, size_t *len) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", GF_SCHED_FIXTURES, name);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    abort();
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
    abort();
  buf[n] = '\0';
  fclose(f);
  if (len)
    *len = (size_t)n;
  return buf;
}

static inline json_t *fixture_json(const char *name) {
  char *s = fixture(name, NULL);
  json_error_t je;
  json_t *j = json_loads(s, 0, &je);
  free(s);
  if (!j) {
    fprintf(stderr, "%s: %s\n", name, je.text);
    abort();
  }
  return j;
}

/* A binder that records what it was asked and fails on demand. */
typedef struct fake_binder {
  pthread_mutex_t mu;
  int fail;             /* GF_E* to return, 0 to succeed */
  unsigned delay_us;    /* widen race windows */
  int grants, bindings; /* binds done, those that carried a grant */
  char last_grant[4096];
  char last_node[256];
} fake_binder;

static inline int fb_bind(void *ctx, const gf_pod_ref *pod, const char *node,
                          const char *json, gf_diag *d) {
  fake_binder *b = ctx;
  (void)pod;
  if (b->delay_us) {
    struct timespec ts = {0, (long)b->delay_us * 1000};
    nanosleep(&ts, NULL);
  }
  pthread_mutex_lock(&b->mu);
  int rc = b->fail;
  if (!rc) {
    b->bindings++;
    snprintf(b->last_node, sizeof(b->last_node), "%s", node);
    if (json) {
      b->grants++;
      snprintf(b->last_grant, sizeof(b->last_grant), "%s", json);
    }
  }
  pthread_mutex_unlock(&b->mu);
  return rc ? gf_diag_set(d, rc, "injected bind failure") : 0;
}

/* POSTs body to verb and returns the parsed JSON answer (status in *st). */
static inline json_t *call(gf_sched *s, const char *verb, const char *body,
                           int *st) {
  gf_sched_reply r;
  char path[64];
  snprintf(path, sizeof(path), "/%s", verb);
  gf_sched_handle(s, "POST", path, body, strlen(body), &r);
  *st = r.status;
  json_t *j = r.body ? json_loads(r.body, 0, NULL) : NULL;
  gf_sched_reply_release(&r);
  return j;
}

#endif
