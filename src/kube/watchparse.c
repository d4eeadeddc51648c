/* The watch stream's line parser: arbitrary chunks in, one event per line
 * out, every line bounded. */
#include <string.h>

#include "gpufrac/error.h"
#include "internal.h"

int gf__watch_event_parse(const char *line, size_t n, gf_kube_event_type *type,
                          json_t **obj, gf_diag *d) {
  json_error_t je;
  json_t *ev = json_loadb(line, n, JSON_REJECT_DUPLICATES, &je);
  if (!ev)
    return gf_diag_set(d, GF_ESYNTAX, "watch event: not JSON: %s (column %d)",
                       je.text, je.column);
  int rc = 0;
  const json_t *t = json_object_get(ev, "type");
  json_t *o = json_object_get(ev, "object");
  if (!json_is_string(t)) {
    rc = gf_diag_set(d, GF_ESYNTAX, "watch event: no \"type\" string");
    goto out;
  }
  if (!json_is_object(o)) {
    rc = gf_diag_set(d, GF_ESYNTAX, "watch event: no \"object\" object");
    goto out;
  }
  static const struct {
    const char *name;
    gf_kube_event_type t;
  } types[] = {{"ADDED", GF_KUBE_ADDED},
               {"MODIFIED", GF_KUBE_MODIFIED},
               {"DELETED", GF_KUBE_DELETED},
               {"BOOKMARK", GF_KUBE_BOOKMARK},
               {"ERROR", GF_KUBE_ERROR}};
  const char *ts = json_string_value(t);
  size_t i;
  for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
    if (!strcmp(ts, types[i].name))
      break;
  if (i == sizeof(types) / sizeof(types[0])) {
    rc = gf_diag_set(d, GF_ESYNTAX, "watch event: unknown type \"%.64s\"", ts);
    goto out;
  }
  *type = types[i].t;
  *obj = json_incref(o);
out:
  json_decref(ev);
  return rc;
}

void gf__watch_parser_init(gf__watch_parser *p, size_t max_line,
                           gf__event_fn fn, void *user) {
  gf__buf_init(&p->line, max_line);
  p->fn = fn;
  p->user = user;
  p->err = 0;
  p->diag.msg[0] = '\0';
}

static int emit(gf__watch_parser *p, const char *s, size_t n) {
  while (n && (s[n - 1] == '\r' || s[n - 1] == ' '))
    n--;
  if (!n)
    return 0; /* blank line: keep-alive */
  gf_kube_event_type t;
  json_t *o = NULL;
  int rc = gf__watch_event_parse(s, n, &t, &o, &p->diag);
  if (rc)
    return p->err = rc;
  rc = p->fn(p->user, t, o);
  json_decref(o);
  return rc;
}

int gf__watch_parser_feed(gf__watch_parser *p, const char *data, size_t n) {
  if (p->err)
    return p->err;
  while (n) {
    const char *nl = memchr(data, '\n', n);
    size_t take = nl ? (size_t)(nl - data) : n;
    int rc = 0;
    if (nl && p->line.len == 0) {
      if (take > p->line.max) /* whole line in this chunk: skip the copy */
        rc = GF_ELIMIT;
      else
        rc = emit(p, data, take);
    } else {
      rc = gf__buf_append(&p->line, data, take);
      if (!rc && nl) {
        rc = emit(p, p->line.p, p->line.len);
        gf__buf_clear(&p->line);
      }
    }
    if (rc == GF_ELIMIT && !p->err) {
      gf_diag_set(&p->diag, rc, "watch event: line longer than %zu bytes",
                  p->line.max);
      p->err = rc;
    }
    if (rc == GF_ENOMEM && !p->err)
      p->err = rc;
    if (rc)
      return rc;
    if (!nl)
      break;
    data += take + 1;
    n -= take + 1;
  }
  return 0;
}

int gf__watch_parser_finish(gf__watch_parser *p) {
  if (p->err)
    return p->err;
  int rc = 0;
  if (p->line.len)
    rc = emit(p, p->line.p, p->line.len);
  gf__buf_clear(&p->line);
  return rc;
}

void gf__watch_parser_release(gf__watch_parser *p) {
  gf__buf_release(&p->line);
}
