#include "csv.h"

#include <errno.h>
#include <string.h>

#include "gpufrac/error.h"
#include "gpufrac/quantity.h"

void gf__csv_init(gf_csv *c, FILE *fp, const char *source) {
  memset(c, 0, sizeof(*c));
  c->fp = fp;
  c->source = source;
}

/* Splits c->buf in place.  Returns 0 or a negative code. */
static int split(gf_csv *c, gf_diag *d) {
  char *r = c->buf, *w = c->buf;
  c->nfields = 0;
  for (;;) {
    if (c->nfields == GF_CSV_FIELDS_MAX)
      return gf_diag_set(d, GF_ELIMIT, "%s:%lu: more than %d fields", c->source,
                         c->line, GF_CSV_FIELDS_MAX);
    c->fields[c->nfields++] = w;
    if (*r == '"') {
      r++;
      for (;;) {
        if (*r == '\0')
          return gf_diag_set(d, GF_ESYNTAX, "%s:%lu: unterminated quote",
                             c->source, c->line);
        if (*r == '"') {
          if (r[1] == '"') {
            *w++ = '"';
            r += 2;
            continue;
          }
          r++;
          break;
        }
        *w++ = *r++;
      }
      if (*r != ',' && *r != '\0')
        return gf_diag_set(d, GF_ESYNTAX,
                           "%s:%lu: text after a closing quote in field %d",
                           c->source, c->line, c->nfields);
    } else {
      while (*r != ',' && *r != '\0') {
        if (*r == '"')
          return gf_diag_set(d, GF_ESYNTAX, "%s:%lu: stray quote in field %d",
                             c->source, c->line, c->nfields);
        *w++ = *r++;
      }
    }
    if (*r == '\0') {
      *w = '\0';
      return 0;
    }
    *w++ = '\0';
    r++;
  }
}

int gf__csv_next(gf_csv *c, gf_diag *d) {
  for (;;) {
    size_t n = 0;
    int ch;
    while ((ch = getc(c->fp)) != EOF && ch != '\n') {
      if (n == GF_CSV_LINE_MAX)
        return gf_diag_set(d, GF_ELIMIT, "%s:%lu: line longer than %d bytes",
                           c->source, c->line + 1, GF_CSV_LINE_MAX);
      if (ch == '\0')
        return gf_diag_set(d, GF_ESYNTAX, "%s:%lu: NUL byte in line", c->source,
                           c->line + 1);
      c->buf[n++] = (char)ch;
    }
    if (ch == EOF && ferror(c->fp))
      return gf_diag_set(d, GF_EIO, "%s: read error", c->source);
    if (ch == EOF && n == 0)
      return 0;
    c->line++;
    if (n > 0 && c->buf[n - 1] == '\r')
      n--;
    c->buf[n] = '\0';
    if (n == 0)
      continue;
    int rc = split(c, d);
    return rc ? rc : 1;
  }
}

int gf__csv_column(const gf_csv *hdr, const char *name) {
  for (int i = 0; i < hdr->nfields; i++)
    if (strcmp(hdr->fields[i], name) == 0)
      return i;
  return -1;
}

int gf__csv_header(gf_csv *c, const char *const *names, int n, int nrequired,
                   int missing, int *idx, gf_diag *d) {
  int rc = gf__csv_next(c, d);
  if (rc < 0)
    return rc;
  if (rc == 0)
    return gf_diag_set(d, GF_ESYNTAX, "%s: empty file, expected a header",
                       c->source);
  for (int i = 0; i < n; i++) {
    idx[i] = gf__csv_column(c, names[i]);
    if (idx[i] < 0 && i < nrequired)
      return gf_diag_set(d, missing, "%s:%lu: header lacks column '%s'",
                         c->source, c->line, names[i]);
  }
  return 0;
}

int gf__csv_check_width(const gf_csv *c, int want, gf_diag *d) {
  if (c->nfields != want)
    return gf_diag_set(d, GF_ESYNTAX, "%s:%lu: %d fields, header has %d",
                       c->source, c->line, c->nfields, want);
  return 0;
}

int gf__csv_field_int(const gf_csv *c, int col, const char *name, int64_t min,
                      int64_t max, int64_t *out, gf_diag *d) {
  int rc = gf_parse_int64(c->fields[col], min, max, out, d);
  if (rc)
    gf_diag_prefix(d, "%s:%lu: column %s", c->source, c->line, name);
  return rc;
}

int gf__csv_open(const char *path, FILE **fp, gf_diag *d) {
  *fp = fopen(path, "r");
  if (!*fp)
    return gf_diag_set(d, GF_EIO, "%s: %s", path, strerror(errno));
  return 0;
}
