/*
 * A growable byte buffer with a maximum (internal-but-shared, gf__ tier),
 * for text built from or for input: the API client's bodies and watch
 * lines, the extender's replies, the interposer configs, the node agent's
 * metrics page.  Every buffer is created with the most it may hold, so no
 * input can grow it without bound; the maxima of the buffers not sized by
 * their own configuration are the list below, one name each.
 *
 * An append that does not fit (GF_ELIMIT) or cannot allocate (GF_ENOMEM)
 * leaves the buffer as it was and returns the error; the first such error
 * is also kept (gf__buf_error) until gf__buf_clear, so a writer of many
 * pieces may check once at the end.  The text is always NUL-terminated
 * once anything is allocated.  A buffer over caller storage
 * (gf__buf_init_fixed) never allocates.  Allocation goes through alloc.h,
 * so tests can fail it.
 */
#ifndef GPUFRAC_CORE_BUF_H
#define GPUFRAC_CORE_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* ---- the limits: the most each such buffer may hold -------------------- */

/* An extender reply written as text (/filter, /prioritize to NodeNames):
 * a node name and a reason per candidate; thousands of nodes come to a
 * few MiB, so this only stops a bug. */
#define GF__BUF_SCHED_REPLY_MAX ((size_t)256 << 20)
/* The extender's /metrics page (a fixed set of series). */
#define GF__BUF_SCHED_METRICS_MAX ((size_t)1 << 20)
/* One container's interposer config (a line per GPU). */
#define GF__BUF_SHIM_CONFIG_MAX ((size_t)4096)
/* The node agent's /metrics page: series per GPU and per container, for at
 * most 1,024 containers, each label value at most 1 KiB escaped. */
#define GF__BUF_NODE_METRICS_MAX ((size_t)16 << 20)
/* The weight cache's part of the node's /metrics page (a fixed set of
 * series: about 1.3 KiB). */
#define GF__BUF_CACHE_METRICS_MAX ((size_t)4096)
/* A JSON document a part writes (gf__json_dumps: annotations, grant.json,
 * CDI specs, ResourceSlices); all are a few KiB, so this only stops a
 * bug. */
#define GF__BUF_JSON_DUMP_MAX ((size_t)16 << 20)
/* Set elsewhere, named there: a planner input file (GF_PLAN_MAX_INPUT,
 * gpufrac/plan.h); configured, not listed here: the API client's response
 * bodies and watch
 * lines (gf_kube_opts max_body, max_line) and the extender's request
 * bodies (gf_sched_config max_body). */

typedef struct gf__buf {
  char *p;    /* the text; NULL until the first allocation */
  size_t len; /* bytes of text, without the NUL */
  size_t cap; /* bytes allocated (or of the caller's storage) */
  size_t max; /* the most len may reach */
  int err;    /* the first append error since init or clear; 0 if none */
  bool fixed; /* p is the caller's storage: never reallocated or freed */
} gf__buf;

/* An empty buffer that may hold up to max bytes; allocates on the first
 * append. */
void gf__buf_init(gf__buf *b, size_t max);
/* An empty buffer over the caller's mem[cap] (cap >= 1): at most cap - 1
 * bytes of text, NUL-terminated, never allocated or freed. */
void gf__buf_init_fixed(gf__buf *b, char *mem, size_t cap);
/* Empties the text (keeps the memory) and forgets the error. */
void gf__buf_clear(gf__buf *b);
/* Frees what the buffer allocated and leaves it empty (same maximum). */
void gf__buf_release(gf__buf *b);

/* Makes room for n more bytes (presizing a buffer whose size is known
 * roughly; up to the maximum).  0 or GF_ENOMEM. */
int gf__buf_reserve(gf__buf *b, size_t n);
/* The bytes the buffer will have allocated once n more bytes of text are
 * appended (b->cap when they fit already; a buffer over caller storage
 * never grows): for a caller that counts the memory of many buffers
 * against one limit before it appends (the gRPC server's requests). */
size_t gf__buf_cap_after(const gf__buf *b, size_t n);
/* Drops the first n bytes of text (all of it when n >= len), keeping the
 * memory: a buffer drained from the front (an outgoing queue). */
void gf__buf_drop_front(gf__buf *b, size_t n);

/* Appends n bytes of data.  0, GF_ELIMIT or GF_ENOMEM. */
int gf__buf_append(gf__buf *b, const void *data, size_t n);
/* Appends printf-formatted text, all of it or none.  0, GF_ELIMIT,
 * GF_ENOMEM, or GF_EINVAL (a format the C library refuses). */
int gf__buf_appendf(gf__buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends all of fp (a whole-file reader: the caller opens and closes the
 * file).  0, GF_EIO (a read error), GF_ELIMIT (more than the maximum) or
 * GF_ENOMEM. */
int gf__buf_read_stream(gf__buf *b, FILE *fp);

/* The first error of any append since init or clear (0 when all fit). */
static inline int gf__buf_error(const gf__buf *b) { return b->err; }
/* The text ("" when nothing was allocated). */
static inline const char *gf__buf_str(const gf__buf *b) {
  return b->p ? b->p : "";
}
/* Hands the allocated text to the caller (free with gf__free) and leaves
 * the buffer empty; NULL when nothing was allocated or the buffer is
 * fixed. */
char *gf__buf_take(gf__buf *b);

#endif
