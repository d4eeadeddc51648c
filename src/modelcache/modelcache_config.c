/*
 * The node config's model_* keys (docs/modelcache.md, modelcache_config.h):
 * parsed into gf_node_config by the node's config reader, and turned into
 * the cache's options by the agent that opens it.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "gpufrac/error.h"
#include "gpufrac/quantity.h"
#include "modelcache_config.h"
#include "modelcache_int.h"
#include "node_util.h"

/* "https://a/,file:///b/,hf://org/,hf://org/name": prefixes
 * http(s)://..., file:///... each ending in '/' and of a source's form
 * (gf__mc_url_why), or hf://ORG/ (a Hugging Face organisation) or
 * hf://ORG/NAME (one repository, any revision), separated by commas.
 * What is wrong with the first bad one (NULL: none) into why, the prefix
 * (password left out) into bad[cap]. */
static const char *prefixes_why(const char *v, char *bad, size_t cap) {
  for (const char *p = v; *p;) {
    size_t n = strcspn(p, ",");
    char one[1024];
    snprintf(one, sizeof(one), "%.*s", (int)(n < 1000 ? n : 1000), p);
    gf__mc_url_redact(one, bad, cap);
    const char *why = NULL;
    if (n > 5 && !strncmp(p, "hf://", 5)) {
      if (!gf__mc_hf_prefix_ok(p, n))
        why = "is not hf://ORG/ or hf://ORG/NAME";
    } else if (n < 2 || p[n - 1] != '/') {
      why = "does not end in '/' (https://a.example would also let "
            "https://a.example.evil.net in)";
    } else {
      why = n >= sizeof(one) - 1 ? "is too long" : gf__mc_url_why(one);
    }
    if (why)
      return why;
    p += n;
    if (*p == ',')
      p++;
  }
  return NULL;
}

/* k = v, a list of prefixes, into dst[cap]; GF_ESYNTAX naming the bad
 * prefix and why, GF_ELIMIT. */
static int prefixes_key(const char *k, const char *v, char *dst, size_t cap,
                        const char *where, gf_diag *d) {
  if (strlen(v) >= cap)
    return gf_diag_set(d, GF_ELIMIT, "%s: %s: over %zu bytes", where, k,
                       cap - 1);
  /* each prefix's scheme in lower case (a scheme is case-insensitive) */
  char low[4096];
  gf__node_copy(low, sizeof(low), v);
  for (char *p = low; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    gf_node_cache_scheme_lower(p);
  v = low;
  char bad[1100];
  const char *why = prefixes_why(v, bad, sizeof(bad));
  if (why)
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: %s: prefix '%s' %s; want prefixes "
                       "http(s)://host/..., file:///dir/ (each ending in "
                       "'/'), hf://ORG/ or hf://ORG/NAME, separated by "
                       "commas",
                       where, k, bad, why);
  gf__node_copy(dst, cap, v);
  return 0;
}

/* model_hf_endpoint (an http(s):// URL), model_hf_token_file and
 * model_ca_file (absolute paths). */
static int hf_key(gf_node_config *c, const char *k, const char *v,
                  const char *where, gf_diag *d) {
  bool ep = !strcmp(k, "model_hf_endpoint");
  char *dst = ep                                  ? c->model_hf_endpoint
              : !strcmp(k, "model_hf_token_file") ? c->model_hf_token_file
                                                  : c->model_ca_file;
  size_t cap = ep ? sizeof(c->model_hf_endpoint) : sizeof(c->model_ca_file);
  bool ok = ep ? !strncasecmp(v, "https://", 8) || !strncasecmp(v, "http://", 7)
               : v[0] == '/';
  for (const char *p = v; ok && *p; p++)
    ok = (unsigned char)*p > 0x20 && *p != 0x7f;
  if (!ok || strlen(v) >= cap)
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: %s = '%s': want %s of at most %zu "
                       "bytes",
                       where, k, v,
                       ep ? "an http:// or https:// URL" : "an absolute path",
                       cap - 1);
  gf__node_copy(dst, cap, v);
  if (ep)
    gf_node_cache_scheme_lower(dst);
  /* the endpoint's form, and a token only where it may go: checked for
   * whichever of the two keys comes second (or an endpoint given again) */
  const char *e = c->model_hf_endpoint;
  gf_diag ed = {{0}};
  if ((ep || !strcmp(k, "model_hf_token_file")) && e[0] &&
      gf__mc_hf_endpoint_check(e, c->model_hf_token_file[0] != '\0', NULL, &ed))
    return gf_diag_set(d, GF_ESYNTAX, "%s: %s", where, ed.msg);
  return 0;
}

int gf__node_cache_config_hardening(gf_node_config *c, const char *k,
                                    const char *v, const char *where,
                                    gf_diag *d) {
  int64_t q = 0;
  if (!strcmp(k, "model_fetch_deadline_s")) {
    if (gf_parse_int64(v, 0, 7 * 86400, &q, NULL))
      return gf_diag_set(d, GF_ERANGE,
                         "%s: model_fetch_deadline_s = '%s': want seconds "
                         "0..604800 (0: none)",
                         where, v);
    c->model_fetch_deadline_s = q;
    return 0;
  }
  if (!strcmp(k, "model_fetch_min_rate") || !strcmp(k, "model_ns_budget")) {
    if (gf_quantity_bytes(v, &q, NULL) || q < 0)
      return gf_diag_set(d, GF_ERANGE,
                         "%s: %s = '%s': want bytes%s (a quantity such as "
                         "\"%s\"; 0: none)",
                         where, k, v, k[6] == 'f' ? " per second" : "",
                         k[6] == 'f' ? "1Mi" : "50Gi");
    if (k[6] == 'f')
      c->model_fetch_min_rate = (uint64_t)q;
    else
      c->model_ns_budget = (uint64_t)q;
    return 0;
  }
  if (!strcmp(k, "model_hf_endpoint") || !strcmp(k, "model_hf_token_file") ||
      !strcmp(k, "model_ca_file"))
    return hf_key(c, k, v, where, d);
  if (!strcmp(k, "model_shared_sources"))
    return prefixes_key(k, v, c->model_shared_sources,
                        sizeof(c->model_shared_sources), where, d);
  return 1;
}

void gf__node_cache_opts_hardening(gf_node_cache_opts *o,
                                   const gf_node_config *cfg) {
  o->deadline_s =
      cfg->model_fetch_deadline_s > 0 ? (long)cfg->model_fetch_deadline_s : -1;
  o->min_rate = cfg->model_fetch_min_rate > 0 &&
                        cfg->model_fetch_min_rate <= (uint64_t)INT64_MAX
                    ? (int64_t)cfg->model_fetch_min_rate
                    : -1;
  o->ns_budget = cfg->model_ns_budget;
  o->shared_sources = cfg->model_shared_sources;
  o->hf_endpoint = cfg->model_hf_endpoint;
  o->hf_token_file = cfg->model_hf_token_file;
  o->ca_file = cfg->model_ca_file;
}

int gf__node_cache_config_kv(gf_node_config *c, const char *k, const char *v,
                             const char *where, gf_diag *d) {
  int64_t q = 0;
  int hrc = gf__node_cache_config_hardening(c, k, v, where, d);
  if (hrc != 1) /* the fetch limits, namespaces (modelcache.c) */
    return hrc;
  if (!strcmp(k, "model_cache_dir")) {
    if (v[0] != '/' || strlen(v) >= sizeof(c->model_cache_dir))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: model_cache_dir = '%s': want an absolute path",
                         where, v);
    gf__node_copy(c->model_cache_dir, sizeof(c->model_cache_dir), v);
    return 0;
  }
  if (!strcmp(k, "model_cache_budget") || !strcmp(k, "model_mlock_budget")) {
    if (gf_quantity_bytes(v, &q, NULL) || q < 0)
      return gf_diag_set(d, GF_ERANGE,
                         "%s: %s = '%s': want bytes (a quantity such as "
                         "\"200Gi\"; 0: none)",
                         where, k, v);
    if (!strcmp(k, "model_cache_budget"))
      c->model_cache_budget = (uint64_t)q;
    else
      c->model_mlock_budget = (uint64_t)q;
    return 0;
  }
  if (!strcmp(k, "model_keep_warm_s")) {
    if (gf_parse_int64(v, 0, 7 * 86400, &c->model_keep_warm_s, NULL))
      return gf_diag_set(d, GF_ERANGE,
                         "%s: model_keep_warm_s = '%s': want 0..604800", where,
                         v);
    return 0;
  }
  if (!strcmp(k, "model_prefetch_namespace")) {
    if (!gf_node_safe_name(v) || strlen(v) >= sizeof(c->model_prefetch_ns))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: model_prefetch_namespace = '%s': not a "
                         "namespace name",
                         where, v);
    gf__node_copy(c->model_prefetch_ns, sizeof(c->model_prefetch_ns), v);
    return 0;
  }
  if (!strcmp(k, "model_pod_sources")) /* each prefix ends in '/' */
    return prefixes_key(k, v, c->model_pod_sources,
                        sizeof(c->model_pod_sources), where, d);
  return gf_diag_set(d, GF_ESYNTAX, "%s: unknown key '%s'", where, k);
}
