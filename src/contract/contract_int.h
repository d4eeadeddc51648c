/*
 * Internal to the contracts and the parts that read JSON documents (gf__
 * tier, not public API): key lookup, bounded string copy and the version
 * rule, shared by src/contract, src/sched and their tests.
 *
 * Key lookup follows Go's encoding/json, which kube-scheduler and the API
 * server use: an exact key match wins, otherwise the first key equal
 * ignoring ASCII case.  So "NodeNames" and "nodeNames" are both read, as
 * the Go side would.
 */
#ifndef GPUFRAC_CONTRACT_INT_H
#define GPUFRAC_CONTRACT_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "gpufrac/diag.h"

/* Member `key` of object obj (Go's case rule), or NULL. */
json_t *gf__json_get(const json_t *obj, const char *key);

/* Copies string member `key` into buf[cap].  Absent: "" and 0 unless
 * required (GF_ESYNTAX).  Not a string or too long: GF_ESYNTAX / GF_ELIMIT,
 * the diag naming `what`. */
int gf__json_str(const json_t *obj, const char *key, char *buf, size_t cap,
                 bool required, const char *what, gf_diag *d);

/* Whether a json_loadb that failed with je ran out of memory (then the
 * reader answers GF_ENOMEM, not GF_ESYNTAX: the input may be fine). */
bool gf__json_oom(const json_error_t *je);

/* The version rule of every document: root's "version" must be the
 * integer `want`.  GF_ESYNTAX naming `what` when it is missing, not an
 * integer or another number (d may be NULL). */
int gf__json_version(const json_t *root, int want, const char *what,
                     gf_diag *d);

/* Member `key` of a document, v, must be an array of at most max items:
 * 0, or GF_ESYNTAX ("<what>: "<key>" missing or not an array") /
 * GF_ELIMIT ("<what>: N <items>, at most max"). */
int gf__json_array(const json_t *v, size_t max, const char *what,
                   const char *key, const char *items, gf_diag *d);

/* Loads len bytes of JSON text that must be an object (duplicate keys
 * refused) into *out.  GF_ELIMIT over max bytes, GF_ENOMEM, GF_ESYNTAX
 * saying where; each sentence starts with `what`. */
int gf__json_load_object(const char *text, size_t len, size_t max,
                         const char *what, json_t **out, gf_diag *d);

/* json_dumps, but NULL when any write fails: jansson 2.14's json_dumps
 * ignores a failed key write and returns broken JSON.  The text comes
 * from gf__realloc (alloc.h): free it with free() or gf__free.  At most
 * GF__BUF_JSON_DUMP_MAX bytes (buf.h). */
char *gf__json_dumps(const json_t *j, size_t flags);

#endif
