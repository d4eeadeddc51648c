/* libFuzzer target: the node agent's pod cache (node_alloc.h).
 * Pods come from the API server and their annotations (the grant among
 * them) are whatever the user wrote.  The input is one pod object, or an
 * array of up to 8 of them, applied to a cache for node "n1" - each twice,
 * as a watch delivers ADDED then MODIFIED.  Then every size of Allocate is
 * matched (no waiting) until nothing is left, and the pods are removed.
 * Nothing may crash or leak, a container is handed out at most once, a
 * match is for a pod in the cache with a grant entry of the size asked, and
 * the cache ends empty.  An array holds one object per uid (later ones
 * are skipped). */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/error.h"
#include "node_alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PODS 8
#define MAX_MATCHES (MAX_PODS * GF_NODE_POD_CTRS)

typedef struct given {
  char uid[GF_NODE_UID_MAX];
  char ctr[GF_CONTAINER_MAX];
} given;

static const char *uid_of(const json_t *pod) {
  return json_string_value(
      json_object_get(json_object_get(pod, "metadata"), "uid"));
}

static void apply(gf_node_pods *p, const json_t *pod) {
  gf_diag d = {""};
  int rc = gf__node_pods_apply(p, pod, &d);
  if (rc && (rc != GF_ESYNTAX || !d.msg[0]))
    abort();
  const char *uid = uid_of(pod);
  if (!rc && !uid)
    abort(); /* a pod without a uid cannot be kept */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_t *in = json_loadb((const char *)data, size, 0, NULL);
  if (!in)
    return 0;
  gf_node_pods *p = NULL;
  if (gf__node_pods_new(&p, "n1", NULL))
    abort();
  /* an answer given by an earlier run, for the pod the seeds call u1 */
  gf__node_pods_mark(p, "u1", "done");
  const json_t *pods[MAX_PODS];
  size_t npods = 0;
  if (json_is_array(in)) {
    size_t i;
    const json_t *x;
    json_array_foreach(in, i, x) {
      /* one object per uid: a pod's containers never change, so two
       * different objects with one uid are not a real stream */
      bool dup = false;
      for (size_t k = 0; k < npods && uid_of(x); k++)
        dup = dup || (uid_of(pods[k]) && !strcmp(uid_of(pods[k]), uid_of(x)));
      if (npods < MAX_PODS && !dup)
        pods[npods++] = x;
    }
  } else {
    pods[npods++] = in;
  }
  for (size_t i = 0; i < npods; i++)
    apply(p, pods[i]);
  for (size_t i = 0; i < npods; i++)
    apply(p, pods[i]);
  if (gf__node_pods_count(p) > npods)
    abort();

  given seen[MAX_MATCHES];
  size_t nseen = 0;
  for (uint32_t n = 1; n <= GF_MAX_GPUS_PER_NODE; n++) {
    for (;;) {
      gf_node_match m;
      gf_diag d = {""};
      int rc = gf__node_pods_match(p, n, 0, &m, &d);
      if (rc) {
        if (rc != GF_ENOTFOUND || !d.msg[0])
          abort();
        break;
      }
      if (!gf__node_pods_has(p, m.uid) || m.grant.ngpus != n ||
          nseen == MAX_MATCHES)
        abort();
      for (size_t k = 0; k < nseen; k++)
        if (!strcmp(seen[k].uid, m.uid) && !strcmp(seen[k].ctr, m.grant.name))
          abort(); /* the same container handed out twice */
      memcpy(seen[nseen].uid, m.uid, sizeof(m.uid));
      memcpy(seen[nseen].ctr, m.grant.name, sizeof(m.grant.name));
      nseen++;
    }
  }
  /* a failed answer takes its mark back: the container matches again */
  if (nseen) {
    gf__node_pods_unmark(p, seen[0].uid, seen[0].ctr);
    gf_node_match m;
    if (gf__node_pods_match(p, 1, 0, &m, NULL) == 0 &&
        !gf__node_pods_has(p, m.uid))
      abort();
  }
  /* a MODIFIED after the answers keeps them given */
  for (size_t i = 0; i < npods; i++)
    apply(p, pods[i]);
  for (uint32_t n = 1; n <= GF_MAX_GPUS_PER_NODE; n++) {
    gf_node_match m;
    if (gf__node_pods_match(p, n, 0, &m, NULL) == 0)
      for (size_t k = 1; k < nseen; k++)
        if (!strcmp(seen[k].uid, m.uid) && !strcmp(seen[k].ctr, m.grant.name))
          abort();
  }
  for (size_t i = 0; i < npods; i++) {
    const char *uid = uid_of(pods[i]);
    if (uid)
      gf__node_pods_remove(p, uid);
  }
  if (gf__node_pods_count(p) != 0)
    abort();
  gf__node_pods_free(p);
  json_decref(in);
  return 0;
}
