#include "gpufrac/trace.h"

#include <stdlib.h>
#include <string.h>

#include "csv.h"
#include "gpufrac/error.h"
#include "gpufrac/quantity.h"

#define MIB (1024 * 1024)

int gf_trace_read_nodes(FILE *fp, const char *source, gf_cluster *c,
                        gf_diag *d) {
  static const char *const cols[] = {"sn", "cpu_milli", "memory_mib", "gpu",
                                     "model"};
  int idx[5];
  gf_csv csv;
  gf__csv_init(&csv, fp, source);
  int rc = gf__csv_header(&csv, cols, 5, 5, GF_ESYNTAX, idx, d);
  if (rc)
    return rc;
  int width = csv.nfields;
  while ((rc = gf__csv_next(&csv, d)) == 1) {
    int64_t cpu, mem, ngpu;
    if ((rc = gf__csv_check_width(&csv, width, d)) ||
        (rc = gf__csv_field_int(&csv, idx[1], "cpu_milli", 0, INT64_MAX / 2,
                                &cpu, d)) ||
        (rc = gf__csv_field_int(&csv, idx[2], "memory_mib", 0, INT64_MAX / MIB,
                                &mem, d)) ||
        (rc = gf__csv_field_int(&csv, idx[3], "gpu", 0, GF_MAX_GPUS_PER_NODE,
                                &ngpu, d)))
      return rc;
    const char *model = csv.fields[idx[4]];
    if (ngpu > 0 && !*model)
      return gf_diag_set(d, GF_ESYNTAX, "%s:%lu: node has GPUs but no model",
                         source, csv.line);
    gf_gpu_spec gpus[GF_MAX_GPUS_PER_NODE];
    memset(gpus, 0, sizeof(gpus));
    for (int64_t i = 0; i < ngpu; i++) {
      gpus[i].model = model;
      gpus[i].numa_node = -1;
    }
    rc = gf_cluster_add_node(c, csv.fields[idx[0]], cpu, mem * MIB, gpus,
                             (uint32_t)ngpu, d);
    if (rc < 0) {
      gf_diag_prefix(d, "%s:%lu", source, csv.line);
      return rc;
    }
  }
  return rc;
}

/* Turns "A|B|C" into a model mask, interning names in c. */
static int parse_spec(gf_csv *csv, const char *spec, gf_cluster *c,
                      uint64_t *mask, gf_diag *d) {
  char buf[GF_CSV_LINE_MAX + 1];
  size_t len = strlen(spec);
  memcpy(buf, spec, len + 1);
  *mask = 0;
  if (len == 0)
    return 0;
  char *p = buf;
  for (;;) {
    char *bar = strchr(p, '|');
    if (bar)
      *bar = '\0';
    if (!*p)
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s:%lu: column gpu_spec: empty model name in '%s'",
                         csv->source, csv->line, spec);
    int id = gf_cluster_model_id(c, p, true);
    if (id < 0)
      return gf_diag_set(d, id,
                         "%s:%lu: column gpu_spec: model '%s' not accepted "
                         "(too long, or more than %d models)",
                         csv->source, csv->line, p, GF_MAX_MODELS);
    *mask |= 1ull << id;
    if (!bar)
      return 0;
    p = bar + 1;
  }
}

int gf_trace_read_pods(FILE *fp, const char *source, gf_cluster *c,
                       gf_pod_list *out, gf_diag *d) {
  static const char *const cols[] = {"name",    "cpu_milli", "memory_mib",
                                     "num_gpu", "gpu_milli", "gpu_spec"};
  int idx[6];
  gf_csv csv;
  gf__csv_init(&csv, fp, source);
  int rc = gf__csv_header(&csv, cols, 6, 5, GF_ESYNTAX, idx, d);
  if (rc)
    return rc;
  int width = csv.nfields;
  gf_pod_list l = {NULL, 0};
  size_t cap = 0;
  while ((rc = gf__csv_next(&csv, d)) == 1) {
    int64_t cpu, mem, ngpu, milli;
    if ((rc = gf__csv_check_width(&csv, width, d)) ||
        (rc = gf__csv_field_int(&csv, idx[1], "cpu_milli", 0, INT64_MAX / 2,
                                &cpu, d)) ||
        (rc = gf__csv_field_int(&csv, idx[2], "memory_mib", 0, INT64_MAX / MIB,
                                &mem, d)) ||
        (rc = gf__csv_field_int(&csv, idx[3], "num_gpu", 0,
                                GF_MAX_GPUS_PER_NODE, &ngpu, d)) ||
        (rc = gf__csv_field_int(&csv, idx[4], "gpu_milli", 0, GF_GPU_MILLI,
                                &milli, d)))
      goto fail;
    if (l.n == cap) {
      cap = cap ? cap * 2 : 1024;
      gf_trace_pod *p = realloc(l.pods, cap * sizeof(*p));
      if (!p) {
        rc = gf_diag_set(d, GF_ENOMEM, "%s:%lu: out of memory", source,
                         csv.line);
        goto fail;
      }
      l.pods = p;
    }
    gf_trace_pod *pod = &l.pods[l.n];
    memset(pod, 0, sizeof(*pod));
    const char *name = csv.fields[idx[0]];
    const char *spec = idx[5] >= 0 ? csv.fields[idx[5]] : "";
    if (!*name || strlen(name) >= sizeof(pod->name)) {
      rc = gf_diag_set(d, GF_ESYNTAX,
                       "%s:%lu: column name: empty or longer than %zu bytes",
                       source, csv.line, sizeof(pod->name) - 1);
      goto fail;
    }
    if (strlen(spec) >= sizeof(pod->gpu_spec)) {
      rc = gf_diag_set(d, GF_ESYNTAX,
                       "%s:%lu: column gpu_spec: longer than %zu bytes", source,
                       csv.line, sizeof(pod->gpu_spec) - 1);
      goto fail;
    }
    memcpy(pod->name, name, strlen(name) + 1);
    memcpy(pod->gpu_spec, spec, strlen(spec) + 1);
    pod->req.cpu_milli = cpu;
    pod->req.mem_bytes = mem * MIB;
    pod->req.gpu_count = (uint32_t)ngpu;
    /* The trace writes gpu_milli 0 for CPU-only pods and 1000 for pods that
     * take whole GPUs. */
    pod->req.gpu_milli = ngpu ? (int32_t)milli : 0;
    if (ngpu > 0 && (rc = parse_spec(&csv, spec, c, &pod->req.model_mask, d)))
      goto fail;
    if (ngpu > 0 && milli == 0) {
      rc = gf_diag_set(d, GF_ERANGE,
                       "%s:%lu: column gpu_milli: 0 for a pod with %lld GPUs",
                       source, csv.line, (long long)ngpu);
      goto fail;
    }
    if ((rc = gf_request_check(&pod->req, d))) {
      gf_diag_prefix(d, "%s:%lu", source, csv.line);
      goto fail;
    }
    l.n++;
  }
  if (rc < 0)
    goto fail;
  *out = l;
  return 0;
fail:
  free(l.pods);
  return rc;
}

int gf_trace_load_nodes(const char *path, gf_cluster *c, gf_diag *d) {
  FILE *fp;
  int rc = gf__csv_open(path, &fp, d);
  if (rc)
    return rc;
  rc = gf_trace_read_nodes(fp, path, c, d);
  fclose(fp);
  return rc;
}

int gf_trace_load_pods(const char *path, gf_cluster *c, gf_pod_list *out,
                       gf_diag *d) {
  FILE *fp;
  int rc = gf__csv_open(path, &fp, d);
  if (rc)
    return rc;
  rc = gf_trace_read_pods(fp, path, c, out, d);
  fclose(fp);
  return rc;
}

void gf_pod_list_release(gf_pod_list *l) {
  free(l->pods);
  l->pods = NULL;
  l->n = 0;
}

int64_t gf_request_gpu_demand(const gf_request *r) {
  return (int64_t)r->gpu_count * r->gpu_milli;
}
