/* Whether a pod may go to a Node, for mode 2's placer (dra_int.h:
 * gf__dra_node_allows; docs/dra.md, "Node constraints").
 *
 * kube-scheduler binds a pod whose claims gpufrac allocated to the node of
 * the allocation, and then runs its filters there: the pod's nodeSelector
 * and required node affinity (NodeAffinity), the Node's NoSchedule and
 * NoExecute taints (TaintToleration) and spec.unschedulable
 * (NodeUnschedulable).  An allocation on a node one of them refuses
 * leaves the pod Unschedulable for good, so the placer asks them first.
 * Anything malformed refuses the node (the safe side: the pod waits). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "dra_int.h"
#include "sched_int.h"

#define TEXT_MAX GF__TOLS_MAX

static const json_t *at(const json_t *o, const char *a, const char *b) {
  return json_object_get(json_object_get(o, a), b);
}

/* A label value as an integer (Gt, Lt); false when it is not one. */
static bool integer(const char *s, long long *out) {
  char *end = NULL;
  if (!s || !*s)
    return false;
  errno = 0;
  *out = strtoll(s, &end, 10);
  return errno == 0 && end && *end == '\0';
}

/* Whether one requirement (key, operator, values) holds for value v (NULL:
 * the label or field is absent).  -1: malformed. */
static int requirement(const json_t *e, const char *v, bool field) {
  const char *op = json_string_value(json_object_get(e, "operator"));
  const json_t *vals = json_object_get(e, "values");
  size_t i;
  const json_t *x;
  if (!op || (vals && !json_is_array(vals)))
    return -1;
  bool in = false;
  json_array_foreach(vals, i, x) {
    if (!json_is_string(x))
      return -1;
    in = in || (v && strcmp(json_string_value(x), v) == 0);
  }
  if (strcmp(op, "In") == 0)
    return in;
  if (strcmp(op, "NotIn") == 0)
    return !in;
  if (field)
    return -1; /* matchFields: In and NotIn only */
  if (strcmp(op, "Exists") == 0)
    return v != NULL;
  if (strcmp(op, "DoesNotExist") == 0)
    return v == NULL;
  if (strcmp(op, "Gt") == 0 || strcmp(op, "Lt") == 0) {
    long long a, b;
    if (json_array_size(vals) != 1 ||
        !integer(json_string_value(json_array_get(vals, 0)), &b))
      return -1;
    if (!integer(v, &a))
      return 0;
    return op[0] == 'G' ? a > b : a < b;
  }
  return -1;
}

/* Whether every requirement of list (matchExpressions or matchFields)
 * holds on node.  -1: malformed. */
static int requirements(const json_t *list, const json_t *node, bool field) {
  size_t i;
  const json_t *e;
  if (list && !json_is_array(list))
    return -1;
  json_array_foreach(list, i, e) {
    const char *key = json_string_value(json_object_get(e, "key"));
    if (!key)
      return -1;
    const char *v;
    if (field) {
      if (strcmp(key, "metadata.name") != 0)
        return -1; /* the only field the API allows */
      v = json_string_value(at(node, "metadata", "name"));
    } else {
      v = json_string_value(
          json_object_get(at(node, "metadata", "labels"), key));
    }
    int r = requirement(e, v, field);
    if (r != 1)
      return r;
  }
  return 1;
}

/* requiredDuringSchedulingIgnoredDuringExecution: one of its terms
 * holds (a term with no requirement holds for no node).  -1: malformed. */
static int affinity(const json_t *req, const json_t *node) {
  const json_t *terms = json_object_get(req, "nodeSelectorTerms");
  size_t i;
  const json_t *t;
  if (!json_is_array(terms))
    return -1;
  json_array_foreach(terms, i, t) {
    const json_t *me = json_object_get(t, "matchExpressions"),
                 *mf = json_object_get(t, "matchFields");
    if (!json_array_size(me) && !json_array_size(mf))
      continue;
    int a = requirements(me, node, false);
    int b = a == 1 ? requirements(mf, node, true) : a;
    if (a < 0 || b < 0)
      return -1;
    if (b == 1)
      return 1;
  }
  return 0;
}

static bool selector(const json_t *sel, const json_t *node, char *why,
                     size_t cap) {
  const json_t *labels = at(node, "metadata", "labels");
  const char *k;
  const json_t *v;
  if (sel && !json_is_object(sel)) {
    snprintf(why, cap, "its nodeSelector is not an object");
    return false;
  }
  json_object_foreach((json_t *)sel, k, v) {
    const char *have = json_string_value(json_object_get(labels, k));
    if (!json_is_string(v) || !have || strcmp(have, json_string_value(v))) {
      snprintf(why, cap, "its nodeSelector %.100s=%.100s", k,
               json_is_string(v) ? json_string_value(v) : "?");
      return false;
    }
  }
  return true;
}

bool gf__dra_node_allows(const json_t *pod, const json_t *node, char *why,
                         size_t cap) {
  const json_t *spec = json_object_get(pod, "spec");
  if (!selector(json_object_get(spec, "nodeSelector"), node, why, cap))
    return false;
  const json_t *req = at(json_object_get(spec, "affinity"), "nodeAffinity",
                         "requiredDuringSchedulingIgnoredDuringExecution");
  int a = req ? affinity(req, node) : 1;
  if (a != 1) {
    snprintf(why, cap, "its required node affinity%s",
             a < 0 ? " (malformed)" : "");
    return false;
  }
  char tols[TEXT_MAX], taints[TEXT_MAX];
  gf__tols_text(json_object_get(spec, "tolerations"), tols, sizeof(tols));
  gf__taints_text(at(node, "spec", "taints"), taints, sizeof(taints));
  if (!gf__tolerates(tols, taints)) {
    snprintf(why, cap, "a taint of the node it does not tolerate");
    return false;
  }
  /* NodeUnschedulable lets a pod tolerating this taint through */
  if (json_is_true(at(node, "spec", "unschedulable")) &&
      !gf__tolerates(tols,
                     "NoSchedule\tnode.kubernetes.io/unschedulable\t\n")) {
    snprintf(why, cap, "the node is unschedulable (cordoned)");
    return false;
  }
  return true;
}

json_t *gf__dra_node_slim(const json_t *node) {
  json_t *o = json_object(), *m = json_object(), *s = json_object();
  if (!o || !m || !s || json_object_set_new(o, "metadata", m) ||
      json_object_set_new(o, "spec", s)) {
    json_decref(o);
    return NULL;
  }
  const json_t *v;
  if ((v = at(node, "metadata", "name")))
    json_object_set(m, "name", (json_t *)v);
  if ((v = at(node, "metadata", "labels")))
    json_object_set(m, "labels", (json_t *)v);
  if ((v = at(node, "spec", "taints")))
    json_object_set(s, "taints", (json_t *)v);
  if ((v = at(node, "spec", "unschedulable")))
    json_object_set(s, "unschedulable", (json_t *)v);
  return o;
}
