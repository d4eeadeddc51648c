/*
 * A model source and a weight cache for the node agent's tests (after
 * cmocka.h and tmpdir.h): test_alloc, test_dra and tests/contract each
 * need a model a pod can name, fetched from a file:// source under the
 * test's tmpdir, and a cache that lets pods name such sources.
 */
#ifndef GF_TESTS_NODE_MODEL_SOURCE_H
#define GF_TESTS_NODE_MODEL_SOURCE_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "gpufrac/modelcache.h"
#include "gpufrac/node.h"

typedef struct model_source {
  char dir[300];               /* <tmpdir>/model-src */
  char url[400];               /* file://<dir> */
  char hex[GF_NODE_CACHE_HEX]; /* the manifest digest */
  char ref[400];               /* <name>@sha256:<hex> */
} model_source;

/* Makes <tmpdir>/model-src with one file, `file`, holding "weights", and
 * its manifest: the model `name` a pod names by m->ref. */
static inline void model_source_make(model_source *m, const char *file,
                                     const char *name) {
  char path[400];
  snprintf(m->dir, sizeof(m->dir), "%s/model-src", tmpdir);
  mkdir(m->dir, 0755);
  snprintf(path, sizeof(path), "%s/%s", m->dir, file);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("weights", f);
  fclose(f);
  char *text = NULL;
  size_t len = 0;
  gf_diag d = {""};
  assert_int_equal(gf_node_cache_manifest_build(m->dir, &text, &len, &d), 0);
  gf_node_cache_sha256_hex(text, len, m->hex);
  assert_int_equal(
      gf_node_write_atomic(m->dir, GF_NODE_CACHE_MANIFEST, text, len, &d), 0);
  free(text);
  snprintf(m->url, sizeof(m->url), "file://%s", m->dir);
  snprintf(m->ref, sizeof(m->ref), "%s@sha256:%s", name, m->hex);
}

/* A cache under <tmpdir>/models that lets pods name sources under tmpdir
 * (the node's model_pod_sources). */
static inline gf_node_cache *model_cache_open(void) {
  char root[300], allow[400];
  snprintf(root, sizeof(root), "%s/models", tmpdir);
  snprintf(allow, sizeof(allow), "file://%s/", tmpdir);
  gf_node_cache_opts co = {.root = root, .pod_sources = allow};
  gf_node_cache *cache = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_node_cache_open(&co, &cache, &d), 0);
  return cache;
}

#endif
