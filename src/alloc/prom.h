/*
 * prom.h: the one writer of Prometheus' text exposition format (version
 * 0.0.4), used by every /metrics page of the tree: the node agent's
 * (src/node/agent/metrics.c) with the weight cache's part
 * (src/modelcache/modelcache.c), the extender's (src/sched/sched_metrics.c,
 * src/sched/kubefeed.c).  What the format asks is here once:
 *   - a family opens with "# HELP name text" and "# TYPE name type";
 *   - a label value has \, " and newline escaped (\\, \", \n);
 *   - labels are {a="x",b="y"}, in the order written.
 * Everything goes into a gf__buf (buf.h), whose error sticks: a writer
 * checks gf__buf_error once at the end.  Names are the caller's literals
 * (not checked here: a name is a constant of the code, never input).
 */
#ifndef GPUFRAC_ALLOC_PROM_H
#define GPUFRAC_ALLOC_PROM_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"

/* The family's head: "# HELP name help\n# TYPE name type\n". */
void gf__prom_head(gf__buf *b, const char *name, const char *type,
                   const char *help);

/* A label value, escaped (no quotes around it). */
void gf__prom_escape(gf__buf *b, const char *value);

/* One label: `{name="value"` when first, else `,name="value"`; the value
 * escaped.  gf__prom_close writes the "}". */
void gf__prom_label(gf__buf *b, bool first, const char *name,
                    const char *value);
/* The same, but nothing when value is NULL or empty. */
void gf__prom_label_opt(gf__buf *b, const char *name, const char *value);
void gf__prom_close(gf__buf *b);

/* A family with one unlabelled sample: head, then "name value\n". */
void gf__prom_u64(gf__buf *b, const char *name, const char *type,
                  const char *help, uint64_t value);

#endif
