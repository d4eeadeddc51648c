/* Small shared pieces of the kube client: compact JSON, file reading,
 * base64, YAML to JSON, Status errors, MicroTime and backoff. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <yaml.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/rng.h"
#include "internal.h"

/* ---- compact JSON text ---------------------------------------------------*/

#define COMPACT_MAX_DEPTH 2048 /* as jansson's parser */

static int put_string(gf__buf *b, const char *s, size_t n) {
  static const char hex[] = "0123456789ABCDEF"; /* as jansson */
  int rc = gf__buf_append(b, "\"", 1);
  size_t run = 0; /* start of the bytes not yet written */
  for (size_t i = 0; i < n && !rc; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\')
      continue;
    char e[6] = {'\\', (char)c, 0, 0, 0, 0};
    size_t el = 2;
    switch (c) {
    case '"':
    case '\\':
      break;
    case '\b':
      e[1] = 'b';
      break;
    case '\f':
      e[1] = 'f';
      break;
    case '\n':
      e[1] = 'n';
      break;
    case '\r':
      e[1] = 'r';
      break;
    case '\t':
      e[1] = 't';
      break;
    default: /* other control characters, NUL included */
      e[1] = 'u';
      e[2] = '0';
      e[3] = '0';
      e[4] = hex[c >> 4];
      e[5] = hex[c & 15];
      el = 6;
    }
    rc = gf__buf_append(b, s + run, i - run);
    if (!rc)
      rc = gf__buf_append(b, e, el);
    run = i + 1;
  }
  if (!rc)
    rc = gf__buf_append(b, s + run, n - run);
  if (!rc)
    rc = gf__buf_append(b, "\"", 1);
  return rc;
}

static int put_value(const json_t *v, gf__buf *b, int depth) {
  char num[64];
  int rc = 0, n;
  if (depth > COMPACT_MAX_DEPTH)
    return GF_EINVAL;
  switch (json_typeof(v)) {
  case JSON_OBJECT: {
    bool first = true;
    rc = gf__buf_append(b, "{", 1);
    for (void *it = json_object_iter((json_t *)v); it && !rc;
         it = json_object_iter_next((json_t *)v, it)) {
      const char *k = json_object_iter_key(it);
#if JANSSON_VERSION_HEX >= 0x020e00 /* keys may hold NUL since 2.14 */
      size_t kl = json_object_iter_key_len(it);
#else
      size_t kl = strlen(k);
#endif
      const json_t *m = json_object_iter_value(it);
      if (!first)
        rc = gf__buf_append(b, ",", 1);
      first = false;
      if (!rc)
        rc = put_string(b, k, kl);
      if (!rc)
        rc = gf__buf_append(b, ":", 1);
      if (!rc)
        rc = put_value(m, b, depth + 1);
      if (rc)
        return rc;
    }
    return rc ? rc : gf__buf_append(b, "}", 1);
  }
  case JSON_ARRAY: {
    size_t i;
    const json_t *m;
    rc = gf__buf_append(b, "[", 1);
    json_array_foreach(v, i, m) {
      if (!rc && i)
        rc = gf__buf_append(b, ",", 1);
      if (!rc)
        rc = put_value(m, b, depth + 1);
      if (rc)
        return rc;
    }
    return rc ? rc : gf__buf_append(b, "]", 1);
  }
  case JSON_STRING:
    return put_string(b, json_string_value(v), json_string_length(v));
  case JSON_INTEGER:
    n = snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(v));
    return gf__buf_append(b, num, (size_t)n);
  case JSON_REAL:
    /* jansson's own rule: 17 significant digits, and a '.' or an 'e' so
     * that it decodes as a real again */
    n = snprintf(num, sizeof(num), "%.17g", json_real_value(v));
    if (n <= 0 || (size_t)n >= sizeof(num) - 2 || strchr(num, ','))
      return GF_EINVAL;
    if (!strchr(num, '.') && !strchr(num, 'e')) {
      memcpy(num + n, ".0", 3);
      n += 2;
    }
    return gf__buf_append(b, num, (size_t)n);
  case JSON_TRUE:
    return gf__buf_append(b, "true", 4);
  case JSON_FALSE:
    return gf__buf_append(b, "false", 5);
  case JSON_NULL:
    return gf__buf_append(b, "null", 4);
  }
  return GF_EINVAL;
}

int gf__json_compact(const json_t *v, gf__buf *b) {
  return v ? put_value(v, b, 0) : GF_EINVAL;
}

int gf__read_file(const char *path, size_t max, char **out, size_t *len,
                  gf_diag *d) {
  int rc = 0;
  gf__buf b;
  gf__buf_init(&b, max);
  FILE *f = fopen(path, "rb");
  if (!f)
    return gf_diag_set(d, GF_EIO, "%s: cannot open: %s", path, strerror(errno));
  rc = gf__buf_read_stream(&b, f);
  if (rc == GF_ELIMIT)
    gf_diag_set(d, rc, "%s: larger than %zu bytes", path, max);
  else if (rc == GF_EIO)
    gf_diag_set(d, rc, "%s: read error", path);
  else if (rc)
    gf_diag_set(d, rc, "%s: out of memory", path);
  if (rc)
    goto out;
  if (!b.p) {
    rc = gf__buf_append(&b, "", 0);
    if (rc)
      goto out;
  }
  *out = b.p;
  *len = b.len;
  b.p = NULL;
out:
  fclose(f);
  gf__buf_release(&b);
  return rc;
}

/* ---------------------------------------------------------------- base64 */

static int b64val(unsigned char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  if (c == '+')
    return 62;
  if (c == '/')
    return 63;
  return -1;
}

int gf__base64_decode(const char *in, size_t n, unsigned char **out,
                      size_t *outlen) {
  unsigned char *r = gf__malloc(n / 4 * 3 + 3);
  if (!r)
    return GF_ENOMEM;
  size_t o = 0;
  unsigned acc = 0;
  int bits = 0, pad = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)in[i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
      continue;
    if (c == '=') {
      pad++;
      continue;
    }
    int v = b64val(c);
    if (v < 0 || pad) { /* bad character, or data after padding */
      gf__free(r);
      return GF_ESYNTAX;
    }
    acc = (acc << 6) | (unsigned)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      r[o++] = (unsigned char)((acc >> bits) & 0xff);
    }
  }
  if (bits >= 6 || pad > 2) { /* a lone 6-bit group cannot end base64 */
    gf__free(r);
    return GF_ESYNTAX;
  }
  *out = r;
  *outlen = o;
  return 0;
}

/* ------------------------------------------------------------ YAML->JSON */

#define YAML_MAX_DEPTH 64

static int yaml_node(yaml_parser_t *p, yaml_event_t *ev, int depth,
                     const char *name, json_t **out, gf_diag *d);

static int yaml_next(yaml_parser_t *p, yaml_event_t *ev, const char *name,
                     gf_diag *d) {
  if (!yaml_parser_parse(p, ev))
    return gf_diag_set(d, GF_ESYNTAX, "%s:%zu:%zu: %s", name,
                       p->problem_mark.line + 1, p->problem_mark.column + 1,
                       p->problem ? p->problem : "YAML syntax error");
  return 0;
}

static json_t *yaml_scalar(const yaml_event_t *ev) {
  const char *v = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
    if ((n == 4 && (!memcmp(v, "true", 4) || !memcmp(v, "True", 4))))
      return json_true();
    if ((n == 5 && (!memcmp(v, "false", 5) || !memcmp(v, "False", 5))))
      return json_false();
    if ((n == 4 && !memcmp(v, "null", 4)) || (n == 1 && v[0] == '~') || n == 0)
      return json_null();
  }
  return json_stringn(v, n);
}

static int yaml_node(yaml_parser_t *p, yaml_event_t *ev, int depth,
                     const char *name, json_t **out, gf_diag *d) {
  int rc = 0;
  json_t *v = NULL;
  yaml_event_t e;
  size_t line = ev->start_mark.line + 1;
  if (depth > YAML_MAX_DEPTH)
    return gf_diag_set(d, GF_ELIMIT, "%s:%zu: nested deeper than %d", name,
                       line, YAML_MAX_DEPTH);
  switch (ev->type) {
  case YAML_SCALAR_EVENT:
    v = yaml_scalar(ev);
    if (!v)
      return gf_diag_set(d, GF_ESYNTAX, "%s:%zu: invalid UTF-8 in a scalar",
                         name, line);
    *out = v;
    return 0;
  case YAML_ALIAS_EVENT:
    return gf_diag_set(d, GF_EINVAL, "%s:%zu: YAML aliases are not supported",
                       name, line);
  case YAML_SEQUENCE_START_EVENT:
    v = json_array();
    if (!v)
      return GF_ENOMEM;
    for (;;) {
      rc = yaml_next(p, &e, name, d);
      if (rc)
        goto out;
      if (e.type == YAML_SEQUENCE_END_EVENT) {
        yaml_event_delete(&e);
        break;
      }
      json_t *item = NULL;
      rc = yaml_node(p, &e, depth + 1, name, &item, d);
      yaml_event_delete(&e);
      if (rc)
        goto out;
      if (json_array_append_new(v, item)) {
        rc = GF_ENOMEM;
        goto out;
      }
    }
    break;
  case YAML_MAPPING_START_EVENT:
    v = json_object();
    if (!v)
      return GF_ENOMEM;
    for (;;) {
      rc = yaml_next(p, &e, name, d);
      if (rc)
        goto out;
      if (e.type == YAML_MAPPING_END_EVENT) {
        yaml_event_delete(&e);
        break;
      }
      if (e.type != YAML_SCALAR_EVENT) {
        rc = gf_diag_set(d, GF_EINVAL, "%s:%zu: mapping keys must be scalars",
                         name, e.start_mark.line + 1);
        yaml_event_delete(&e);
        goto out;
      }
      char key[1024];
      size_t kl = e.data.scalar.length;
      if (kl >= sizeof(key) || memchr(e.data.scalar.value, 0, kl)) {
        rc = gf_diag_set(d, GF_ELIMIT, "%s:%zu: key too long", name,
                         e.start_mark.line + 1);
        yaml_event_delete(&e);
        goto out;
      }
      memcpy(key, e.data.scalar.value, kl);
      key[kl] = '\0';
      yaml_event_delete(&e);
      rc = yaml_next(p, &e, name, d);
      if (rc)
        goto out;
      json_t *val = NULL;
      rc = yaml_node(p, &e, depth + 1, name, &val, d);
      yaml_event_delete(&e);
      if (rc)
        goto out;
      if (json_object_set_new(v, key, val)) {
        rc = gf_diag_set(d, GF_ESYNTAX, "%s: key '%s' is not valid UTF-8", name,
                         key);
        goto out;
      }
    }
    break;
  default:
    return gf_diag_set(d, GF_ESYNTAX, "%s:%zu: unexpected YAML event", name,
                       line);
  }
  *out = v;
  return 0;
out:
  json_decref(v);
  return rc;
}

int gf__yaml_to_json(const char *buf, size_t len, const char *name,
                     json_t **out, gf_diag *d) {
  int rc = 0;
  yaml_parser_t p;
  yaml_event_t e;
  json_t *doc = NULL;
  int have_event = 0;
  if (!yaml_parser_initialize(&p))
    return GF_ENOMEM;
  yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
  /* STREAM-START, then DOCUMENT-START (or STREAM-END: empty file). */
  for (int i = 0; i < 2; i++) {
    rc = yaml_next(&p, &e, name, d);
    if (rc)
      goto out;
    yaml_event_type_t t = e.type;
    yaml_event_delete(&e);
    if (t == YAML_STREAM_END_EVENT) {
      rc = gf_diag_set(d, GF_ESYNTAX, "%s: empty document", name);
      goto out;
    }
  }
  rc = yaml_next(&p, &e, name, d);
  if (rc)
    goto out;
  have_event = 1;
  rc = yaml_node(&p, &e, 0, name, &doc, d);
  if (rc)
    goto out;
  yaml_event_delete(&e);
  have_event = 0;
  rc = yaml_next(&p, &e, name, d); /* DOCUMENT-END */
  if (rc)
    goto out;
  yaml_event_delete(&e);
  rc = yaml_next(&p, &e, name, d);
  if (rc)
    goto out;
  if (e.type != YAML_STREAM_END_EVENT) {
    yaml_event_delete(&e);
    rc = gf_diag_set(d, GF_EINVAL, "%s: more than one YAML document", name);
    goto out;
  }
  yaml_event_delete(&e);
  *out = doc;
  doc = NULL;
out:
  if (have_event)
    yaml_event_delete(&e);
  json_decref(doc);
  yaml_parser_delete(&p);
  return rc;
}

/* ---------------------------------------------------------------- Status */

static const char *http_phrase(long code) {
  switch (code) {
  case 400:
    return "Bad Request";
  case 401:
    return "Unauthorized";
  case 403:
    return "Forbidden";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 409:
    return "Conflict";
  case 410:
    return "Gone";
  case 422:
    return "Unprocessable Entity";
  case 429:
    return "Too Many Requests";
  case 500:
    return "Internal Server Error";
  case 503:
    return "Service Unavailable";
  default:
    return "";
  }
}

int gf__status_error(long http, const json_t *status, const char *method,
                     const char *path, gf_diag *d) {
  const char *reason = "", *message = "";
  long code = http;
  if (json_is_object(status)) {
    const json_t *v = json_object_get(status, "reason");
    if (json_is_string(v))
      reason = json_string_value(v);
    v = json_object_get(status, "message");
    if (json_is_string(v))
      message = json_string_value(v);
    v = json_object_get(status, "code");
    if (json_is_integer(v) && json_integer_value(v) >= 100 &&
        json_integer_value(v) <= 599)
      code = (long)json_integer_value(v);
  }
  int rc;
  if (code == 404)
    rc = GF_ENOTFOUND;
  else if (code == 409 && !strcmp(reason, "AlreadyExists"))
    rc = GF_EEXIST;
  else if (code == 409)
    rc = GF_ECONFLICT;
  else if (code == 410)
    rc = GF_EGONE;
  else
    rc = GF_EHTTP;
  return gf_diag_set(d, rc, "%s %s: HTTP %ld%s%s%s%s%s%s%s", method, path, code,
                     *http_phrase(code) ? " " : "", http_phrase(code),
                     *reason ? " (reason " : "", reason, *reason ? ")" : "",
                     *message ? ": " : "", message);
}

/* ------------------------------------------------------------- MicroTime */

static int digits(const char *s, int n, int *v) {
  int r = 0;
  for (int i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    r = r * 10 + (s[i] - '0');
  }
  *v = r;
  return 0;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's method). */
static int64_t days_from_civil(int y, int m, int dd) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + dd - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int gf_kube_time_parse(const char *s, int64_t *us) {
  int Y, M, D, h, mi, se;
  if (!s || strlen(s) < 20 || digits(s, 4, &Y) || s[4] != '-' ||
      digits(s + 5, 2, &M) || s[7] != '-' || digits(s + 8, 2, &D) ||
      (s[10] != 'T' && s[10] != 't') || digits(s + 11, 2, &h) || s[13] != ':' ||
      digits(s + 14, 2, &mi) || s[16] != ':' || digits(s + 17, 2, &se))
    return GF_ESYNTAX;
  if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || mi > 59 || se > 60)
    return GF_ESYNTAX;
  const char *p = s + 19;
  int64_t frac = 0;
  if (*p == '.') {
    p++;
    int nd = 0;
    while (*p >= '0' && *p <= '9') {
      if (nd < 6)
        frac = frac * 10 + (*p - '0');
      nd++;
      p++;
    }
    if (nd == 0)
      return GF_ESYNTAX;
    for (; nd < 6; nd++)
      frac *= 10;
  }
  int64_t off = 0;
  if (*p == 'Z' || *p == 'z') {
    p++;
  } else if (*p == '+' || *p == '-') {
    int oh, om;
    if (digits(p + 1, 2, &oh) || p[3] != ':' || digits(p + 4, 2, &om) ||
        oh > 23 || om > 59)
      return GF_ESYNTAX;
    off = (int64_t)(oh * 3600 + om * 60) * (*p == '-' ? -1 : 1);
    p += 6;
  } else {
    return GF_ESYNTAX;
  }
  if (*p)
    return GF_ESYNTAX;
  int64_t secs = days_from_civil(Y, M, D) * 86400 + h * 3600 + mi * 60 + se;
  *us = (secs - off) * 1000000 + frac;
  return 0;
}

void gf_kube_time_format(int64_t us, char *buf, size_t cap) {
  int64_t secs = us / 1000000, frac = us % 1000000;
  if (frac < 0) {
    frac += 1000000;
    secs--;
  }
  time_t t = (time_t)secs;
  struct tm tm;
  if (!gmtime_r(&t, &tm)) {
    snprintf(buf, cap, "1970-01-01T00:00:00.000000Z");
    return;
  }
  snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
           (long)frac);
}

/* --------------------------------------------------------------- backoff */

void gf_kube_backoff_init(gf_kube_backoff *b, long base_ms, long cap_ms,
                          uint64_t seed) {
  gf_rng r;
  gf_rng_seed(&r, seed);
  memcpy(b->rng, r.s, sizeof(b->rng));
  b->base_ms = base_ms > 0 ? base_ms : 1;
  b->cap_ms = cap_ms >= b->base_ms ? cap_ms : b->base_ms;
  b->attempt = 0;
}

long gf_kube_backoff_next(gf_kube_backoff *b) {
  long dl = b->base_ms;
  for (unsigned i = 0; i < b->attempt && dl < b->cap_ms; i++)
    dl = dl > b->cap_ms / 2 ? b->cap_ms : dl * 2;
  if (dl > b->cap_ms)
    dl = b->cap_ms;
  if (b->attempt < 64)
    b->attempt++;
  gf_rng r;
  memcpy(r.s, b->rng, sizeof(r.s));
  long half = dl / 2;
  long jitter = (long)gf_rng_below(&r, (uint64_t)(dl - half) + 1);
  memcpy(b->rng, r.s, sizeof(b->rng));
  return half + jitter;
}

void gf_kube_backoff_reset(gf_kube_backoff *b) { b->attempt = 0; }

bool gf__err_changed(gf__errstate *e, int rc, const char *msg) {
  if (!msg)
    msg = "";
  if (rc == 0) {
    if (e->rc == 0)
      return false;
    e->rc = 0;
    e->msg[0] = '\0';
    return true;
  }
  if (rc == e->rc && strcmp(msg, e->msg) == 0)
    return false;
  e->rc = rc;
  snprintf(e->msg, sizeof(e->msg), "%s", msg);
  return true;
}
