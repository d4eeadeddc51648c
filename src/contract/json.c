/*
 * The JSON helpers every document reader shares (contract_int.h).
 */
#include "contract_int.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "gpufrac/error.h"

json_t *gf__json_get(const json_t *obj, const char *key) {
  if (!json_is_object(obj))
    return NULL;
  json_t *v = json_object_get(obj, key);
  if (v)
    return v;
  const char *k;
  json_t *val;
  json_object_foreach((json_t *)obj, k, val) {
    if (strcasecmp(k, key) == 0)
      return val;
  }
  return NULL;
}

int gf__json_str(const json_t *obj, const char *key, char *buf, size_t cap,
                 bool required, const char *what, gf_diag *d) {
  buf[0] = '\0';
  const json_t *v = gf__json_get(obj, key);
  if (!v || json_is_null(v)) {
    if (required)
      return gf_diag_set(d, GF_ESYNTAX, "%s: missing", what);
    return 0;
  }
  if (!json_is_string(v))
    return gf_diag_set(d, GF_ESYNTAX, "%s: not a string", what);
  size_t n = json_string_length(v);
  if (n >= cap)
    return gf_diag_set(d, GF_ELIMIT, "%s: %zu characters, at most %zu", what, n,
                       cap - 1);
  const char *s = json_string_value(v);
  if (strlen(s) != n)
    return gf_diag_set(d, GF_ESYNTAX, "%s: contains a NUL character", what);
  memcpy(buf, s, n + 1);
  return 0;
}

bool gf__json_oom(const json_error_t *je) {
  /* jansson leaves the error as initialised (no text) when it cannot
   * allocate its lexer; every other failure says what it was. */
  return json_error_code(je) == json_error_out_of_memory || !je->text[0];
}

int gf__json_version(const json_t *root, int want, const char *what,
                     gf_diag *d) {
  const json_t *v = gf__json_get(root, "version");
  if (!json_is_integer(v))
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: \"version\" missing or not an "
                       "integer",
                       what);
  if (json_integer_value(v) != want)
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: version %" JSON_INTEGER_FORMAT
                       " is not supported (this build reads %d)",
                       what, json_integer_value(v), want);
  return 0;
}

/* json_dumps with every write checked (gf__json_dumps). */
typedef struct dumpbuf {
  char *p;
  size_t len, cap;
  bool failed; /* an append was refused: jansson may carry on regardless */
} dumpbuf;

static int dump_append(const char *buf, size_t n, void *data) {
  dumpbuf *b = data;
  if (b->failed)
    return -1;
  if (n >= SIZE_MAX / 4 - b->len) {
    b->failed = true;
    return -1;
  }
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
      cap *= 2;
    char *np = gf__realloc(b->p, cap);
    if (!np) {
      b->failed = true;
      return -1;
    }
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->len, buf, n);
  b->len += n;
  b->p[b->len] = 0;
  return 0;
}

char *gf__json_dumps(const json_t *j, size_t flags) {
  dumpbuf b = {NULL, 0, 0, false};
  if (json_dump_callback(j, dump_append, &b, flags) || b.failed || !b.p) {
    free(b.p);
    return NULL;
  }
  return b.p;
}
