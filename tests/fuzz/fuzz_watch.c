/* libFuzzer target: the Kubernetes watch-stream line parser (src/kube,
 * watchparse.c) never crashes or leaks, bounds every line, and gives the
 * same events however the stream is cut into chunks.  The first byte picks
 * the line limit, the chunk size and the event after which the callback
 * asks to stop; the rest is the stream.  ERROR events go through the
 * Status-to-error mapping as gf_kube_watch does. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct run {
  unsigned n;       /* events handed to the callback */
  unsigned stop_at; /* return nonzero on this event (1-based); 0 never */
  uint64_t hash;    /* FNV-1a over each event's type and object */
} run;

static void mix(run *r, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    r->hash = (r->hash ^ b[i]) * 1099511628211ull;
}

static int on_event(void *user, gf_kube_event_type type, json_t *obj) {
  run *r = user;
  if (!json_is_object(obj) || (unsigned)type > GF_KUBE_ERROR)
    abort();
  r->n++;
  unsigned char t = (unsigned char)type;
  mix(r, &t, 1);
  char *s = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
  if (s) {
    mix(r, s, strlen(s));
    free(s);
  }
  if (type == GF_KUBE_ERROR) {
    gf_diag d = {""};
    int rc = gf__status_error(0, obj, "WATCH", "/api/v1/pods", &d);
    if (rc != GF_ENOTFOUND && rc != GF_EEXIST && rc != GF_ECONFLICT &&
        rc != GF_EGONE && rc != GF_EHTTP)
      abort();
    if (!d.msg[0])
      abort();
    return rc;
  }
  return r->stop_at && r->n == r->stop_at ? 1 : 0;
}

/* Feeds data in chunks of `chunk` bytes (0: all at once), stopping at the
 * first nonzero answer; finishes the stream when all went in. */
static int feed(const char *data, size_t size, size_t max_line, size_t chunk,
                run *r) {
  gf__watch_parser p;
  gf__watch_parser_init(&p, max_line, on_event, r);
  int rc = 0;
  size_t off = 0;
  while (!rc && off < size) {
    size_t n = chunk && size - off > chunk ? chunk : size - off;
    rc = gf__watch_parser_feed(&p, data + off, n);
    off += n;
  }
  if (!rc)
    rc = gf__watch_parser_finish(&p);
  if ((rc == GF_ESYNTAX || rc == GF_ELIMIT) && !p.diag.msg[0])
    abort(); /* a parse error always says why */
  if (rc && p.err && gf__watch_parser_feed(&p, "\n", 1) != p.err)
    abort(); /* after an error the parser refuses input with that code */
  gf__watch_parser_release(&p);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  static const size_t max_lines[] = {64, 512, 4096, 1 << 16};
  static const size_t chunks[] = {1, 3, 7, 64};
  unsigned sel = data[0];
  size_t max_line = max_lines[sel & 3];
  size_t chunk = chunks[(sel >> 2) & 3];
  unsigned stop_at = sel >> 4; /* 0..15 */
  const char *s = (const char *)data + 1;
  size_t n = size - 1;
  run a = {0, stop_at, 14695981039346656037ull};
  run b = a;
  int ra = feed(s, n, max_line, 0, &a);
  int rb = feed(s, n, max_line, chunk, &b);
  if (ra != rb || a.n != b.n || a.hash != b.hash)
    abort(); /* the cut into chunks changed what was seen */
  return 0;
}
