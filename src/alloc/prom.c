/* The Prometheus text writer: see prom.h. */
#include "prom.h"

#include <inttypes.h>
#include <string.h>

void gf__prom_head(gf__buf *b, const char *name, const char *type,
                   const char *help) {
  gf__buf_appendf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void gf__prom_escape(gf__buf *b, const char *s) {
  while (*s) {
    size_t n = strcspn(s, "\\\"\n");
    gf__buf_append(b, s, n);
    s += n;
    if (!*s)
      break;
    gf__buf_append(b, *s == '\n' ? "\\n" : *s == '"' ? "\\\"" : "\\\\", 2);
    s++;
  }
}

void gf__prom_label(gf__buf *b, bool first, const char *name,
                    const char *value) {
  gf__buf_appendf(b, "%c%s=\"", first ? '{' : ',', name);
  gf__prom_escape(b, value);
  gf__buf_append(b, "\"", 1);
}

void gf__prom_label_opt(gf__buf *b, const char *name, const char *value) {
  if (value && *value)
    gf__prom_label(b, false, name, value);
}

void gf__prom_close(gf__buf *b) { gf__buf_append(b, "}", 1); }

void gf__prom_u64(gf__buf *b, const char *name, const char *type,
                  const char *help, uint64_t value) {
  gf__prom_head(b, name, type, help);
  gf__buf_appendf(b, "%s %" PRIu64 "\n", name, value);
}
