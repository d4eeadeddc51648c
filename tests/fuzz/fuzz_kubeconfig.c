/* libFuzzer target: the kubeconfig reader (YAML or JSON, through libyaml)
 * never crashes or leaks, and a config it accepts is usable: a server URL,
 * a namespace, a token it can hand out.  The input is the file; it is read
 * with its own current-context and again with the context "dev".
 *
 * A kubeconfig can name files; only a user's tokenFile is read at load
 * time.  Relative names resolve under an empty temporary directory (made
 * once, removed at exit), and inputs whose tokenFile is absolute or climbs
 * out with ".." are skipped, so the target reads nothing but that empty
 * directory. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char base_dir[64];

static void remove_base_dir(void) { rmdir(base_dir); }

static const char *empty_dir(void) {
  if (!base_dir[0]) {
    snprintf(base_dir, sizeof(base_dir), "/tmp/gf-fuzz-kc-XXXXXX");
    if (!mkdtemp(base_dir))
      abort();
    atexit(remove_base_dir);
  }
  return base_dir;
}

/* True when some "tokenFile" in v names a path outside the base dir. */
static bool escapes(const json_t *v) {
  const char *k;
  const json_t *x;
  size_t i;
  if (json_is_object(v)) {
    json_object_foreach((json_t *)v, k, x) {
      if (strcmp(k, "tokenFile") == 0 && json_is_string(x)) {
        const char *s = json_string_value(x);
        if (s[0] == '/' || strstr(s, ".."))
          return true;
      }
      if (escapes(x))
        return true;
    }
  } else if (json_is_array(v)) {
    json_array_foreach(v, i, x) {
      if (escapes(x))
        return true;
    }
  }
  return false;
}

static void load(const char *buf, size_t len, const char *context) {
  gf_kube_config *c = NULL;
  gf_diag d = {""};
  int rc = gf_kube_config_from_kubeconfig_buf(&c, buf, len, "fuzz.yaml",
                                              empty_dir(), context, &d);
  if (rc) {
    if (c || (rc != GF_ENOMEM && !d.msg[0]))
      abort(); /* a failure leaves nothing behind and says why */
    return;
  }
  const char *server = gf_kube_config_server(c);
  if (!server ||
      (strncmp(server, "https://", 8) && strncmp(server, "http://", 7)))
    abort();
  if (!gf_kube_config_namespace(c) || !gf_kube_config_namespace(c)[0])
    abort();
  size_t n;
  const unsigned char *ca = gf_kube_config_ca_data(c, &n);
  if (n && !ca)
    abort();
  const unsigned char *cert = gf_kube_config_cert_data(c, &n);
  if (n && !cert)
    abort();
  const unsigned char *key = gf_kube_config_key_data(c, &n);
  if (n && !key)
    abort();
  if (!(cert || gf_kube_config_cert_file(c)) !=
      !(key || gf_kube_config_key_file(c)))
    abort(); /* a client certificate comes with its key */
  if (gf_kube_config_token_file(c))
    abort(); /* the base dir is empty: no token file can have been read */
  char tok[256];
  rc = gf_kube_config_token(c, tok, sizeof(tok), &d);
  if (rc && rc != GF_ELIMIT)
    abort(); /* an inline token needs no file */
  (void)gf_kube_config_insecure(c);
  (void)gf_kube_config_ca_file(c);
  gf_kube_config_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *buf = (const char *)data;
  json_t *root = NULL;
  if (gf__yaml_to_json(buf, size, "fuzz.yaml", &root, NULL) == 0) {
    bool skip = escapes(root);
    json_decref(root);
    if (skip)
      return 0;
  }
  load(buf, size, NULL);
  load(buf, size, "dev");
  return 0;
}
