/*
 * What the commands that talk to a cluster through its API server share
 * (kubectl gpufrac, gpufrac doctor): the kubeconfig as kubectl finds it,
 * and the check of a Kubernetes name before it goes into an API path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"

int gf__cli_kube_connect(const char *prog, const char *kubeconfig,
                         const char *context, gf_kube_config **kc,
                         gf_kube **k) {
  char path[4096];
  const char *p = kubeconfig;
  if (!p) {
    const char *env = getenv("KUBECONFIG");
    if (env && *env) {
      size_t l = strcspn(env, ":"); /* the first file of the list */
      snprintf(path, sizeof(path), "%.*s", (int)l, env);
    } else {
      const char *home = getenv("HOME");
      snprintf(path, sizeof(path), "%s/.kube/config", home ? home : "");
    }
    p = path;
  }
  gf_diag d = {""};
  if (gf_kube_config_from_kubeconfig(kc, p, context, &d)) {
    fprintf(stderr, "%s: %s\n", prog, d.msg);
    return GF_EXIT_FAIL;
  }
  if (gf_kube_new(k, *kc, NULL, &d)) {
    fprintf(stderr, "%s: %s\n", prog, d.msg);
    gf_kube_config_free(*kc);
    return GF_EXIT_FAIL;
  }
  return 0;
}

/* A DNS-1123 label (a namespace's form): 1..63 of [a-z0-9-], starting and
 * ending alphanumeric. With dots true, a DNS-1123 subdomain (a pod name's
 * form): such labels joined by '.', 253 at most. */
bool gf__cli_k8s_name_ok(const char *s, bool dots) {
  size_t n = strlen(s), label = 0;
  if (n == 0 || n > (dots ? 253u : 63u))
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (c == '.' && dots) {
      if (label == 0 || s[i - 1] == '-')
        return false;
      label = 0;
      continue;
    }
    if (!alnum && c != '-')
      return false;
    if (c == '-' && label == 0)
      return false;
    if (++label > 63)
      return false;
  }
  return s[n - 1] != '-' && s[n - 1] != '.';
}
