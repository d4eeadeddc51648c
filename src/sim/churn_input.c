/*
 * Inputs of the churn replay: the node types an autoscaler can buy and the
 * pod lifetimes of a trace (gpufrac/churn.h).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "csv.h"
#include "gpufrac/churn.h"
#include "gpufrac/error.h"
#include "gpufrac/quantity.h"

#define MIB (1024 * 1024)

static int field_price(gf_csv *csv, int col, double *out, gf_diag *d) {
  const char *s = csv->fields[col];
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (!*s || *end || errno || !isfinite(v) || v < 0 || v > 1e6)
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s:%lu: column gpu_hour_price: '%s' is not a price "
                       "in 0..1e6",
                       csv->source, csv->line, s);
  *out = v;
  return 0;
}

int gf_node_types_read(FILE *fp, const char *source, gf_node_types *out,
                       gf_diag *d) {
  static const char *const cols[] = {
      "type",       "model",          "gpus", "cpu_milli",
      "memory_mib", "gpu_hour_price", "count"};
  int idx[7] = {0};
  gf_csv csv;
  gf__csv_init(&csv, fp, source);
  int rc = gf__csv_header(&csv, cols, 7, 7, GF_ENOTFOUND, idx, d);
  if (rc)
    return rc == GF_ENOTFOUND ? GF_ESYNTAX : rc;
  int width = csv.nfields;
  gf_node_types l = {NULL, 0};
  while ((rc = gf__csv_next(&csv, d)) == 1) {
    if ((rc = gf__csv_check_width(&csv, width, d)))
      goto fail;
    if (l.n == GF_NODE_TYPES_MAX) {
      rc = gf_diag_set(d, GF_ELIMIT, "%s:%lu: more than %d node types", source,
                       csv.line, GF_NODE_TYPES_MAX);
      goto fail;
    }
    gf_node_type t;
    memset(&t, 0, sizeof(t));
    int64_t gpus, cpu, mem, count;
    if ((rc = gf__csv_field_int(&csv, idx[2], "gpus", 0, GF_MAX_GPUS_PER_NODE,
                                &gpus, d)) ||
        (rc = gf__csv_field_int(&csv, idx[3], "cpu_milli", 1, INT64_MAX / 2,
                                &cpu, d)) ||
        (rc = gf__csv_field_int(&csv, idx[4], "memory_mib", 1,
                                INT64_MAX / MIB / 2, &mem, d)) ||
        (rc = field_price(&csv, idx[5], &t.gpu_hour_price, d)) ||
        (rc = gf__csv_field_int(&csv, idx[6], "count", 0, 100000, &count, d)))
      goto fail;
    const char *name = csv.fields[idx[0]], *model = csv.fields[idx[1]];
    if (!*name || strlen(name) >= sizeof(t.name)) {
      rc = gf_diag_set(d, GF_ESYNTAX,
                       "%s:%lu: column type: empty or longer than %zu bytes",
                       source, csv.line, sizeof(t.name) - 1);
      goto fail;
    }
    if (strlen(model) >= sizeof(t.model) || (gpus > 0 && !*model)) {
      rc = gf_diag_set(d, GF_ESYNTAX, "%s:%lu: column model: %s", source,
                       csv.line,
                       *model ? "too long" : "empty for a node with GPUs");
      goto fail;
    }
    for (size_t i = 0; i < l.n; i++)
      if (strcmp(l.t[i].name, name) == 0) {
        rc = gf_diag_set(d, GF_EEXIST, "%s:%lu: column type: '%s' twice",
                         source, csv.line, name);
        goto fail;
      }
    memcpy(t.name, name, strlen(name) + 1);
    memcpy(t.model, model, strlen(model) + 1);
    t.gpus = (uint32_t)gpus;
    t.cpu_milli = cpu;
    t.mem_bytes = mem * MIB;
    t.count = (uint32_t)count;
    gf_node_type *grown = realloc(l.t, (l.n + 1) * sizeof(*grown));
    if (!grown) {
      rc = gf_diag_set(d, GF_ENOMEM, "%s:%lu: out of memory", source, csv.line);
      goto fail;
    }
    l.t = grown;
    l.t[l.n++] = t;
  }
  if (rc < 0)
    goto fail;
  if (l.n == 0) {
    rc = gf_diag_set(d, GF_ESYNTAX, "%s: no node types", source);
    goto fail;
  }
  *out = l;
  return 0;
fail:
  free(l.t);
  return rc;
}

int gf_node_types_load(const char *path, gf_node_types *out, gf_diag *d) {
  FILE *fp;
  int rc = gf__csv_open(path, &fp, d);
  if (rc)
    return rc;
  rc = gf_node_types_read(fp, path, out, d);
  fclose(fp);
  return rc;
}

void gf_node_types_release(gf_node_types *t) {
  free(t->t);
  t->t = NULL;
  t->n = 0;
}

int gf_lifetimes_read(FILE *fp, const char *source, gf_lifetimes *out,
                      gf_diag *d) {
  static const char *const cols[] = {"scheduled_time", "deletion_time"};
  int idx[2] = {0, 0};
  gf_csv csv;
  gf__csv_init(&csv, fp, source);
  int rc = gf__csv_header(&csv, cols, 2, 2, GF_ENOTFOUND, idx, d);
  if (rc)
    return rc;
  int width = csv.nfields;
  gf_lifetimes l = {NULL, 0};
  size_t cap = 0;
  while ((rc = gf__csv_next(&csv, d)) == 1) {
    if ((rc = gf__csv_check_width(&csv, width, d)))
      goto fail;
    if (!*csv.fields[idx[0]] || !*csv.fields[idx[1]])
      continue; /* never scheduled (or never deleted): no lifetime */
    int64_t sched, del;
    if ((rc = gf__csv_field_int(&csv, idx[0], "scheduled_time", 0,
                                INT64_MAX / 2, &sched, d)) ||
        (rc = gf__csv_field_int(&csv, idx[1], "deletion_time", 0, INT64_MAX / 2,
                                &del, d)))
      goto fail;
    if (del <= sched)
      continue;
    if (l.n == cap) {
      cap = cap ? cap * 2 : 1024;
      double *s = realloc(l.s, cap * sizeof(*s));
      if (!s) {
        rc = gf_diag_set(d, GF_ENOMEM, "%s:%lu: out of memory", source,
                         csv.line);
        goto fail;
      }
      l.s = s;
    }
    l.s[l.n++] = (double)(del - sched);
  }
  if (rc < 0)
    goto fail;
  if (l.n == 0) {
    rc = gf_diag_set(d, GF_ENOTFOUND, "%s: no pod has a lifetime", source);
    goto fail;
  }
  *out = l;
  return 0;
fail:
  free(l.s);
  return rc;
}

int gf_lifetimes_load(const char *path, gf_lifetimes *out, gf_diag *d) {
  FILE *fp;
  int rc = gf__csv_open(path, &fp, d);
  if (rc)
    return rc;
  rc = gf_lifetimes_read(fp, path, out, d);
  fclose(fp);
  return rc;
}

void gf_lifetimes_release(gf_lifetimes *l) {
  free(l->s);
  l->s = NULL;
  l->n = 0;
}
