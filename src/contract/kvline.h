/*
 * kvline.h: the "key = value" line format of the node config (gf_node_config,
 * src/node/config.c) and the interposer's config (src/shim/shim_config.c),
 * read by one loop.  A line is cut at '#' (a comment), blanks (space, tab,
 * and a '\r' at the end) around the key and the value are dropped, and a
 * line with nothing left is skipped.  Static inline, libc's string
 * functions only, so the interposer (which depends on libc alone and is
 * built from its own sources) includes it without linking anything more:
 * src/shim/shim_config.c includes it by its path.
 */
#ifndef GPUFRAC_CONTRACT_KVLINE_H
#define GPUFRAC_CONTRACT_KVLINE_H

#include <stddef.h>
#include <string.h>

/* Reading text[0..len) line by line. */
typedef struct gf__kv_reader {
  const char *text;
  size_t len, off;
  int lineno;      /* of the line last returned (1-based) */
  char line[1024]; /* its copy, cut into key and value */
} gf__kv_reader;

enum {
  GF__KV_END = 0,    /* no more lines */
  GF__KV_PAIR = 1,   /* *key and *value set (pointers into r->line) */
  GF__KV_LONG = -1,  /* a line of sizeof(line) bytes or more */
  GF__KV_NUL = -2,   /* a NUL byte in the line */
  GF__KV_NO_EQ = -3, /* a line that is not "key = value" */
};

/* Blanks off both ends of s, in place. */
static inline char *gf__kv_trim(char *s) {
  while (*s == ' ' || *s == '\t')
    s++;
  char *e = s + strlen(s);
  while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
    *--e = '\0';
  return s;
}

/* Starts reading text[0..len). */
static inline void gf__kv_init(gf__kv_reader *r, const char *text, size_t len) {
  r->text = text;
  r->len = len;
  r->off = 0;
  r->lineno = 0;
  r->line[0] = '\0';
}

/* The next pair, or GF__KV_END, or an error about line r->lineno. */
static inline int gf__kv_next(gf__kv_reader *r, char **key, char **value) {
  while (r->off < r->len) {
    const char *p = r->text + r->off;
    const char *nl = memchr(p, '\n', r->len - r->off);
    size_t n = nl ? (size_t)(nl - p) : r->len - r->off;
    r->off += n + (nl ? 1 : 0);
    r->lineno++;
    if (n >= sizeof(r->line))
      return GF__KV_LONG;
    memcpy(r->line, p, n);
    r->line[n] = '\0';
    if (strlen(r->line) != n)
      return GF__KV_NUL;
    char *hash = strchr(r->line, '#');
    if (hash)
      *hash = '\0';
    char *s = gf__kv_trim(r->line);
    if (!*s)
      continue;
    char *eq = strchr(s, '=');
    if (!eq)
      return GF__KV_NO_EQ;
    *eq = '\0';
    *key = gf__kv_trim(s);
    *value = gf__kv_trim(eq + 1);
    return GF__KV_PAIR;
  }
  return GF__KV_END;
}

#endif
