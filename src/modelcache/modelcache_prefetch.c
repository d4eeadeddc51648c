/*
 * The prefetch declaration (modelcache_prefetch.h): the ConfigMap written
 * by `gpufrac cache prefetch`, read by the node agents.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/modelcache.h"
#include "gpufrac/modelcache_prefetch.h"
#include "modelcache_int.h"

void gf_node_prefetch_init(gf_node_prefetch *p) { memset(p, 0, sizeof(*p)); }

json_t *gf_node_prefetch_configmap(const gf_node_prefetch *p, const char *ns) {
  char name[GF_NODE_CACHE_NAME_MAX], hex[GF_NODE_CACHE_HEX];
  char cmname[253 + 1];
  if (gf_node_cache_ref_parse(p->model, name, sizeof(name), hex, NULL))
    return NULL;
  /* A DNS subdomain: lowercase, '_' and '.' as '-', cut to fit. */
  int n = snprintf(cmname, sizeof(cmname), "gpufrac-prefetch-%.200s-%.12s",
                   name, hex);
  for (int i = 0; i < n && cmname[i]; i++) {
    char ch = cmname[i];
    if (ch >= 'A' && ch <= 'Z')
      cmname[i] = (char)(ch - 'A' + 'a');
    else if (ch == '_' || ch == '.')
      cmname[i] = '-';
  }
  char count[16];
  snprintf(count, sizeof(count), "%u", p->nodes);
  json_t *data = json_pack("{s:s,s:s}", "model", p->model, "source", p->source);
  if (!data)
    return NULL;
  if (p->names[0])
    json_object_set_new(data, "nodeNames", json_string(p->names));
  if (p->selector[0])
    json_object_set_new(data, "nodeSelector", json_string(p->selector));
  if (p->nodes)
    json_object_set_new(data, "nodes", json_string(count));
  return json_pack("{s:s,s:s,s:{s:s,s:s,s:{s:s}},s:o}", "apiVersion", "v1",
                   "kind", "ConfigMap", "metadata", "name", cmname, "namespace",
                   ns, "labels", GF_NODE_PREFETCH_LABEL, "true", "data", data);
}

static int copy_field(const json_t *data, const char *key, char *out,
                      size_t cap, const char *cm, gf_diag *d) {
  const json_t *v = json_object_get(data, key);
  out[0] = '\0';
  if (!v)
    return 0;
  const char *s = json_string_value(v);
  if (!s || strlen(s) >= cap)
    return gf_diag_set(d, GF_ESYNTAX,
                       "configmap %s: data.%s: not a string of under %zu "
                       "bytes",
                       cm, key, cap);
  memcpy(out, s, strlen(s) + 1);
  return 0;
}

/* Each k=v pair of a selector well formed. */
static bool selector_ok(const char *s) {
  const char *p = s;
  while (*p) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    const char *eq = memchr(p, '=', len);
    if (!eq || eq == p)
      return false;
    p += len;
    if (*p == ',')
      p++;
  }
  return true;
}

int gf_node_prefetch_parse(const json_t *cm, gf_node_prefetch *p, gf_diag *d) {
  gf_node_prefetch_init(p);
  const char *name = json_string_value(
      json_object_get(json_object_get(cm, "metadata"), "name"));
  if (!name)
    name = "?";
  const json_t *data = json_object_get(cm, "data");
  if (!json_is_object(data))
    return gf_diag_set(d, GF_ESYNTAX, "configmap %s: no data", name);
  char mname[GF_NODE_CACHE_NAME_MAX], hex[GF_NODE_CACHE_HEX], count[16];
  int rc = copy_field(data, "model", p->model, sizeof(p->model), name, d);
  if (!rc)
    rc = copy_field(data, "source", p->source, sizeof(p->source), name, d);
  if (!rc)
    rc = copy_field(data, "nodeNames", p->names, sizeof(p->names), name, d);
  if (!rc)
    rc = copy_field(data, "nodeSelector", p->selector, sizeof(p->selector),
                    name, d);
  if (!rc)
    rc = copy_field(data, "nodes", count, sizeof(count), name, d);
  if (rc)
    goto fail;
  if (gf_node_cache_ref_parse(p->model, mname, sizeof(mname), hex, d)) {
    gf_diag_prefix(d, "configmap %s: data.model", name);
    rc = GF_ESYNTAX;
    goto fail;
  }
  gf_diag sd = {{0}};
  if (gf_node_cache_source_check(p->source, &sd)) {
    rc = gf_diag_set(d, GF_ESYNTAX, "configmap %s: data.source %s", name,
                     sd.msg);
    goto fail;
  }
  gf_node_cache_scheme_lower(p->source);
  if (!p->names[0] == !p->selector[0]) {
    rc = gf_diag_set(d, GF_ESYNTAX,
                     "configmap %s: give exactly one of data.nodeNames and "
                     "data.nodeSelector",
                     name);
    goto fail;
  }
  if (p->selector[0] && !selector_ok(p->selector)) {
    rc = gf_diag_set(d, GF_ESYNTAX,
                     "configmap %s: data.nodeSelector '%s' is not "
                     "key=value[,key=value]",
                     name, p->selector);
    goto fail;
  }
  p->nodes = (uint32_t)strtoul(count, NULL, 10);
  return 0;
fail:
  gf_node_prefetch_init(p);
  return rc;
}

bool gf_node_prefetch_wants(const gf_node_prefetch *p, const char *node,
                            const json_t *labels) {
  if (p->names[0]) {
    size_t nl = strlen(node);
    const char *s = p->names;
    while (*s) {
      const char *comma = strchr(s, ',');
      size_t len = comma ? (size_t)(comma - s) : strlen(s);
      if (len == nl && !memcmp(s, node, nl))
        return true;
      s += len;
      if (*s == ',')
        s++;
    }
    return false;
  }
  const char *s = p->selector;
  if (!*s)
    return false;
  while (*s) {
    const char *comma = strchr(s, ',');
    size_t len = comma ? (size_t)(comma - s) : strlen(s);
    const char *eq = memchr(s, '=', len);
    if (!eq)
      return false;
    char key[320];
    size_t kl = (size_t)(eq - s);
    if (kl >= sizeof(key))
      return false;
    memcpy(key, s, kl);
    key[kl] = '\0';
    const char *have = json_string_value(json_object_get(labels, key));
    size_t vl = len - kl - 1;
    if (!have || strlen(have) != vl || memcmp(have, eq + 1, vl))
      return false;
    s += len;
    if (*s == ',')
      s++;
  }
  return true;
}

typedef struct cand {
  const char *name;
  int rank; /* 0 ready, 1 fetching, 2 neither */
  char h[GF_NODE_CACHE_HEX];
} cand;

static int cmp_cand(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->rank != y->rank)
    return x->rank - y->rank;
  return strcmp(x->h, y->h);
}

uint32_t gf_node_prefetch_pick(const json_t *list, const char *hex, uint32_t n,
                               char *names, size_t cap) {
  const json_t *items = json_object_get(list, "items");
  size_t total = json_array_size(items);
  names[0] = '\0';
  cand *c = gf__calloc(total ? total : 1, sizeof(*c));
  gf_inventory *iv = gf__malloc(sizeof(*iv)); /* the contract's reader's */
  if (!c || !iv) {
    gf__free(c);
    gf__free(iv);
    return 0;
  }
  size_t k = 0, i;
  const json_t *node;
  json_array_foreach(items, i, node) {
    const json_t *md = json_object_get(node, "metadata");
    const char *name = json_string_value(json_object_get(md, "name"));
    const char *inv = json_string_value(json_object_get(
        json_object_get(md, "annotations"), GF_INVENTORY_ANNOTATION));
    if (!name || !inv ||
        json_is_true(
            json_object_get(json_object_get(node, "spec"), "unschedulable")))
      continue;
    c[k].name = name;
    c[k].rank = 2;
    char want[80];
    snprintf(want, sizeof(want), "sha256:%s", hex);
    if (gf_inventory_parse(inv, strlen(inv), iv, NULL) == 0)
      for (uint32_t j = 0; j < iv->nmodels; j++)
        if (!strcmp(iv->models[j].digest, want))
          c[k].rank = iv->models[j].state == GF_MODEL_READY ? 0 : 1;
    char key[600];
    int kl = snprintf(key, sizeof(key), "%s/%s", hex, name);
    gf_node_cache_sha256_hex(key, (size_t)kl, c[k].h);
    k++;
  }
  qsort(c, k, sizeof(*c), cmp_cand);
  uint32_t got = 0;
  size_t at = 0;
  for (size_t j = 0; j < k && got < n; j++) {
    size_t nl = strlen(c[j].name);
    if (at + nl + 2 > cap)
      break;
    if (at)
      names[at++] = ',';
    memcpy(names + at, c[j].name, nl + 1);
    at += nl;
    got++;
  }
  gf__free(c);
  gf__free(iv);
  return got;
}
