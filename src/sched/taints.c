/* Node taints against pod tolerations, for defragmentation's destinations
 * (sched_int.h: gf__taints_text, gf__tols_text, gf__tolerates; issue 32).
 *
 * kube-scheduler's TaintToleration filter lets a pod onto a node only when
 * each of the node's NoSchedule and NoExecute taints is tolerated by one of
 * the pod's tolerations.  A replacement a defragmentation move counts on
 * must land where that filter would let it, so the model keeps both sides
 * as short texts: one line per entry, fields separated by tabs.  An entry
 * the text cannot hold (too many, a field with a tab or newline, a member
 * of the wrong type) makes the whole text GF__TEXT_UNKNOWN: a node whose
 * taints are unknown takes no moved pod, a pod whose tolerations are
 * unknown is not moved (both the safe side). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "sched_int.h"

/* A string member of o ("" when absent); false when present and not a
 * string or holding a tab or newline. */
static bool field(const json_t *o, const char *key, const char **out) {
  const json_t *v = gf__json_get(o, key);
  *out = "";
  if (!v || json_is_null(v))
    return true;
  if (!json_is_string(v))
    return false;
  *out = json_string_value(v);
  return strcspn(*out, "\t\n") == strlen(*out);
}

static void unknown(char *out, size_t cap) {
  snprintf(out, cap, "%s", GF__TEXT_UNKNOWN);
}

/* Appends one line of n fields to out at *w; false when it does not fit. */
static bool line(char *out, size_t cap, size_t *w, const char *const *f,
                 int n) {
  for (int i = 0; i < n; i++) {
    int k = snprintf(out + *w, cap - *w, "%s%c", f[i], i + 1 < n ? '\t' : '\n');
    if (k < 0 || (size_t)k >= cap - *w)
      return false;
    *w += (size_t)k;
  }
  return true;
}

void gf__taints_text(const json_t *taints, char *out, size_t cap) {
  size_t w = 0, i;
  const json_t *t;
  out[0] = '\0';
  if (!taints || json_is_null(taints))
    return;
  if (!json_is_array(taints))
    return unknown(out, cap);
  json_array_foreach(taints, i, t) {
    const char *f[3]; /* effect, key, value */
    if (!json_is_object(t) || !field(t, "effect", &f[0]) ||
        !field(t, "key", &f[1]) || !field(t, "value", &f[2]))
      return unknown(out, cap);
    if (strcmp(f[0], "NoSchedule") != 0 && strcmp(f[0], "NoExecute") != 0)
      continue; /* PreferNoSchedule, or an effect the API refuses */
    if (!line(out, cap, &w, f, 3))
      return unknown(out, cap);
  }
}

void gf__tols_text(const json_t *tols, char *out, size_t cap) {
  size_t w = 0, i;
  const json_t *t;
  out[0] = '\0';
  if (!tols || json_is_null(tols))
    return;
  if (!json_is_array(tols))
    return unknown(out, cap);
  json_array_foreach(tols, i, t) {
    const char *f[4]; /* operator, key, value, effect */
    if (!json_is_object(t) || !field(t, "operator", &f[0]) ||
        !field(t, "key", &f[1]) || !field(t, "value", &f[2]) ||
        !field(t, "effect", &f[3]) || !line(out, cap, &w, f, 4))
      return unknown(out, cap);
  }
}

/* The n-th tab-separated field of the line at l (up to its newline):
 * pointer and length. */
static const char *nth(const char *l, int n, size_t *len) {
  for (; n > 0; n--)
    l += strcspn(l, "\t\n") + 1;
  *len = strcspn(l, "\t\n");
  return l;
}

static bool same(const char *a, size_t al, const char *b, size_t bl) {
  return al == bl && memcmp(a, b, al) == 0;
}

/* Whether toleration line tl tolerates taint line tn (the API's rule:
 * the effect empty or equal; an empty key with Exists matches every key;
 * Exists any value; Equal, or no operator, the same value; another
 * operator tolerates nothing here). */
static bool tol_matches(const char *tl, const char *tn) {
  size_t ol, kl, vl, el, tel, tkl, tvl;
  const char *op = nth(tl, 0, &ol), *k = nth(tl, 1, &kl), *v = nth(tl, 2, &vl),
             *e = nth(tl, 3, &el);
  const char *te = nth(tn, 0, &tel), *tk = nth(tn, 1, &tkl),
             *tv = nth(tn, 2, &tvl);
  if (el && !same(e, el, te, tel))
    return false;
  bool exists = same(op, ol, "Exists", 6);
  if (!kl)
    return exists;
  if (!same(k, kl, tk, tkl))
    return false;
  if (exists)
    return true;
  return (!ol || same(op, ol, "Equal", 5)) && same(v, vl, tv, tvl);
}

bool gf__tolerates(const char *tols, const char *taints) {
  if (!taints || !taints[0])
    return true;
  if (!strcmp(taints, GF__TEXT_UNKNOWN) ||
      (tols && !strcmp(tols, GF__TEXT_UNKNOWN)))
    return false;
  for (const char *tn = taints; *tn; tn += strcspn(tn, "\n") + 1) {
    bool ok = false;
    for (const char *tl = tols ? tols : ""; *tl && !ok;
         tl += strcspn(tl, "\n") + 1)
      ok = tol_matches(tl, tn);
    if (!ok)
      return false;
  }
  return true;
}

int gf__text_set(char **dst, const char *src) {
  if (*dst && !strcmp(*dst, src))
    return 0;
  char *n = NULL;
  if (src[0] && !(n = gf__strdup(src)))
    return GF_ENOMEM;
  gf__free(*dst);
  *dst = n;
  return 0;
}
