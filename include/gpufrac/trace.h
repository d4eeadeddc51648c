/*
 * gpufrac/trace.h - reading the Alibaba cluster-trace-gpu-v2023 ("openb")
 * node and pod lists into the resource model.
 *
 * Node list columns: sn, cpu_milli, memory_mib, gpu, model.
 * Pod list columns:  name, cpu_milli, memory_mib, num_gpu, gpu_milli, and
 * optionally gpu_spec ("V100M16|V100M32": allowed models; empty = any).
 * Columns are found by header name; other columns are ignored.  Every
 * malformed row is an error naming the file, line and column; nothing is
 * half-loaded (on error the output is left empty).
 */
#ifndef GPUFRAC_TRACE_H
#define GPUFRAC_TRACE_H

#include <stddef.h>
#include <stdio.h>

#include "gpufrac/diag.h"
#include "gpufrac/model.h"

#define GF_TRACE_NAME_MAX 64
#define GF_TRACE_SPEC_MAX 128

typedef struct gf_trace_pod {
  char name[GF_TRACE_NAME_MAX];
  char gpu_spec[GF_TRACE_SPEC_MAX]; /* as written; "" = any model */
  gf_request req;
} gf_trace_pod;

typedef struct gf_pod_list {
  gf_trace_pod *pods;
  size_t n;
} gf_pod_list;

/* Adds every node of the node list to c.  `source` names the stream in
 * messages.  On error c may hold the nodes read so far; callers discard it. */
int gf_trace_read_nodes(FILE *fp, const char *source, gf_cluster *c,
                        gf_diag *d);
int gf_trace_load_nodes(const char *path, gf_cluster *c, gf_diag *d);

/* Reads a pod list.  GPU models named in gpu_spec are interned in c (a model
 * no node has simply matches nothing).  *out is filled only on success and
 * is released with gf_pod_list_release. */
int gf_trace_read_pods(FILE *fp, const char *source, gf_cluster *c,
                       gf_pod_list *out, gf_diag *d);
int gf_trace_load_pods(const char *path, gf_cluster *c, gf_pod_list *out,
                       gf_diag *d);

void gf_pod_list_release(gf_pod_list *l);

/* GPU demand of a request in milli-GPU: gpu_count * gpu_milli. */
int64_t gf_request_gpu_demand(const gf_request *r);

#endif
