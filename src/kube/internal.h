/*
 * Internal pieces of the kube client shared between its files and tests:
 * a bounded byte buffer, the watch-stream line parser, base64, YAML-to-JSON
 * and the Status-to-error mapping.  Nothing here is public API.
 */
#ifndef GPUFRAC_KUBE_INTERNAL_H
#define GPUFRAC_KUBE_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "gpufrac/diag.h"
#include "gpufrac/kube.h"

/* The last error reported to an on_error callback (rc 0: none), so that
 * each change is reported once. */
typedef struct gf__errstate {
  int rc;
  char msg[GF_DIAG_MAX];
} gf__errstate;

/* Records (rc, msg) in e and returns true when it differs from what e
 * held: a new error, a different one, or rc 0 after an error. */
bool gf__err_changed(gf__errstate *e, int rc, const char *msg);

/* gf__buf: the shared bounded buffer (src/alloc/buf.h). */

/* Appends v as compact JSON text (no spaces, object members in their
 * order, strings escaped as jansson does without flags) to b.  Decoding it
 * (json_loadb with JSON_ALLOW_NUL) gives a value json_equal to v.  For the
 * informer's compact cache: under half the instructions of json_dumpb,
 * which keeps a hash table of the containers it is in (to refuse cycles)
 * and writes through a callback per token.  Returns 0, GF_ENOMEM or
 * GF_ELIMIT (b's maximum), or GF_EINVAL for what it leaves to json_dumpb:
 * nesting deeper than 2048 or a real the C library prints with a decimal
 * comma.  On failure b holds a partial text. */
int gf__json_compact(const json_t *v, gf__buf *b);

/* Reads a whole file of at most max bytes into *out (NUL-terminated, caller
 * frees with gf__free).  GF_EIO names the file; GF_ELIMIT if larger. */
int gf__read_file(const char *path, size_t max, char **out, size_t *len,
                  gf_diag *d);

/* The watch stream: bytes arrive in arbitrary chunks; each complete line
 * ("\n"-terminated, "\r\n" accepted, blank lines skipped) is one JSON event
 * {"type": ..., "object": {...}} handed to `fn`.  A line longer than the
 * buffer's max fails GF_ELIMIT; a malformed event GF_ESYNTAX (with diag).
 * After an error the parser refuses further input with the same code. */
typedef int (*gf__event_fn)(void *user, gf_kube_event_type type, json_t *obj);

typedef struct gf__watch_parser {
  gf__buf line;
  gf__event_fn fn;
  void *user;
  int err;
  gf_diag diag;
} gf__watch_parser;

void gf__watch_parser_init(gf__watch_parser *p, size_t max_line,
                           gf__event_fn fn, void *user);
/* Feeds n bytes; returns 0, a parse error, or fn's nonzero return. */
int gf__watch_parser_feed(gf__watch_parser *p, const char *data, size_t n);
/* At end of stream: a partial last line without "\n" is parsed too. */
int gf__watch_parser_finish(gf__watch_parser *p);
void gf__watch_parser_release(gf__watch_parser *p);

/* Parses one event line into type and object (a new reference). */
int gf__watch_event_parse(const char *line, size_t n, gf_kube_event_type *type,
                          json_t **obj, gf_diag *d);

/* Decodes standard base64 (padding optional, whitespace skipped) into a new
 * buffer (gf__free).  GF_ESYNTAX on any other character. */
int gf__base64_decode(const char *in, size_t n, unsigned char **out,
                      size_t *outlen);

/* Parses a YAML document (or JSON, a YAML subset) into a jansson value:
 * mappings -> objects, sequences -> arrays, scalars -> strings, except
 * plain true/false -> booleans and plain null/~ -> null.  Aliases and
 * more than one document are refused; depth is bounded. */
int gf__yaml_to_json(const char *buf, size_t len, const char *name,
                     json_t **out, gf_diag *d);

/* Maps an HTTP status and (optional) Status body to a GF_E* code and a
 * diag "METHOD PATH: HTTP 409 Conflict: message". */
int gf__status_error(long http, const json_t *status, const char *method,
                     const char *path, gf_diag *d);

#endif
