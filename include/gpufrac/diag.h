/*
 * gpufrac/diag.h - a diagnostic message that travels with an error code.
 *
 * Parsers return a GF_E* code and, when given a gf_diag, fill it with a
 * sentence naming the offending input and where it was found ("pods.csv:12:
 * column gpu_milli: '12x' is not an integer").  A NULL diag is always
 * accepted and simply discards the text.
 */
#ifndef GPUFRAC_DIAG_H
#define GPUFRAC_DIAG_H

#include <stddef.h>

#define GF_DIAG_MAX 512

typedef struct gf_diag {
  char msg[GF_DIAG_MAX];
} gf_diag;

/* Formats into d->msg (truncating), returns err unchanged so callers can
 * write `return gf_diag_set(d, GF_ESYNTAX, "...")`. */
int gf_diag_set(gf_diag *d, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to the message already in d (e.g. a file and line). */
void gf_diag_prefix(gf_diag *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
