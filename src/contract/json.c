/*
 * The JSON helpers every document reader shares (contract_int.h).
 */
#include "contract_int.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "buf.h"
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

int gf__json_array(const json_t *v, size_t max, const char *what,
                   const char *key, const char *items, gf_diag *d) {
  if (!json_is_array(v))
    return gf_diag_set(d, GF_ESYNTAX, "%s: \"%s\" missing or not an array",
                       what, key);
  if (json_array_size(v) > max)
    return gf_diag_set(d, GF_ELIMIT, "%s: %zu %s, at most %zu", what,
                       json_array_size(v), items, max);
  return 0;
}

int gf__json_load_object(const char *text, size_t len, size_t max,
                         const char *what, json_t **out, gf_diag *d) {
  if (len > max)
    return gf_diag_set(d, GF_ELIMIT, "%s: %zu bytes, at most %zu", what, len,
                       max);
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root && gf__json_oom(&je))
    return gf_diag_set(d, GF_ENOMEM, "%s: out of memory", what);
  if (!root)
    return gf_diag_set(d, GF_ESYNTAX, "%s: line %d column %d: %s", what,
                       je.line, je.column, je.text);
  if (!json_is_object(root)) {
    json_decref(root);
    return gf_diag_set(d, GF_ESYNTAX, "%s: not a JSON object", what);
  }
  *out = root;
  return 0;
}

/* json_dumps with every write checked (gf__json_dumps), into a gf__buf:
 * its error is kept, so a write jansson carries on after still fails the
 * dump. */
static int dump_append(const char *buf, size_t n, void *data) {
  return gf__buf_append(data, buf, n) ? -1 : 0;
}

char *gf__json_dumps(const json_t *j, size_t flags) {
  gf__buf b;
  gf__buf_init(&b, GF__BUF_JSON_DUMP_MAX);
  if (json_dump_callback(j, dump_append, &b, flags) || gf__buf_error(&b)) {
    gf__buf_release(&b);
    return NULL;
  }
  return gf__buf_take(&b); /* NULL when nothing was written */
}
