/*
 * A small, strict CSV reader for the trace files.
 *
 * One record per line; fields separated by commas; a field may be quoted
 * with "..." and a doubled "" inside quotes is a literal quote.  Lines are
 * bounded (GF_CSV_LINE_MAX) and so is the field count, so no input can grow
 * memory without limit.  CRLF line ends are accepted.  Blank lines are
 * skipped.  Every error names the source and line.
 */
#ifndef GPUFRAC_SIM_CSV_H
#define GPUFRAC_SIM_CSV_H

#include <stdint.h>
#include <stdio.h>

#include "gpufrac/diag.h"

#define GF_CSV_LINE_MAX 4096
#define GF_CSV_FIELDS_MAX 32

typedef struct gf_csv {
  FILE *fp;
  const char *source; /* name used in messages, e.g. the path */
  unsigned long line; /* line number of the current record, 1-based */
  char buf[GF_CSV_LINE_MAX + 2];
  char *fields[GF_CSV_FIELDS_MAX];
  int nfields;
} gf_csv;

void gf__csv_init(gf_csv *c, FILE *fp, const char *source);

/* Reads the next record into c->fields.  Returns 1 for a record, 0 at end of
 * input, or a negative GF_E* code with the reason in d. */
int gf__csv_next(gf_csv *c, gf_diag *d);

/* Index of column `name` in the header record `hdr`, or -1. */
int gf__csv_column(const gf_csv *hdr, const char *name);

/* Reads the header record and maps the n column names to idx[]: the first
 * nrequired must be there (else the code `missing`, naming the column); a
 * missing optional one gets -1. */
int gf__csv_header(gf_csv *c, const char *const *names, int n, int nrequired,
                   int missing, int *idx, gf_diag *d);

/* The current record has `want` fields, else GF_ESYNTAX. */
int gf__csv_check_width(const gf_csv *c, int want, gf_diag *d);

/* Field `col` of the current record as an integer in [min, max]; an error
 * names the source, line and column `name`. */
int gf__csv_field_int(const gf_csv *c, int col, const char *name, int64_t min,
                      int64_t max, int64_t *out, gf_diag *d);

/* fopen(path, "r"); GF_EIO naming the path if that fails. */
int gf__csv_open(const char *path, FILE **fp, gf_diag *d);

#endif
