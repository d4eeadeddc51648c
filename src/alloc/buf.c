#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"

void gf__buf_init(gf__buf *b, size_t max) {
  memset(b, 0, sizeof(*b));
  b->max = max;
}

void gf__buf_init_fixed(gf__buf *b, char *mem, size_t cap) {
  memset(b, 0, sizeof(*b));
  b->p = mem;
  b->cap = cap;
  b->max = cap - 1;
  b->fixed = true;
  mem[0] = '\0';
}

void gf__buf_clear(gf__buf *b) {
  b->len = 0;
  b->err = 0;
  if (b->p)
    b->p[0] = '\0';
}

void gf__buf_release(gf__buf *b) {
  if (b->fixed) {
    gf__buf_clear(b);
    return;
  }
  gf__free(b->p);
  gf__buf_init(b, b->max);
}

/* The error of an append, kept when it is the first. */
static int failed(gf__buf *b, int rc) {
  if (!b->err)
    b->err = rc;
  return rc;
}

size_t gf__buf_cap_after(const gf__buf *b, size_t n) {
  if (b->fixed || n > b->max || b->len > b->max - n)
    return b->cap; /* an append that does not fit grows nothing */
  size_t need = b->len + n + 1;
  if (need <= b->cap)
    return b->cap;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < need)
    cap = cap > ((size_t)-1) / 2 ? need : cap * 2;
  if (b->max < (size_t)-1 && cap > b->max + 1)
    cap = b->max + 1;
  return cap;
}

void gf__buf_drop_front(gf__buf *b, size_t n) {
  if (n >= b->len) {
    b->len = 0;
  } else if (n) {
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
  }
  if (b->p)
    b->p[b->len] = '\0';
}

/* Makes room for n more bytes of text and the NUL. */
static int grow(gf__buf *b, size_t n) {
  if (n > b->max || b->len > b->max - n)
    return failed(b, GF_ELIMIT);
  size_t need = b->len + n + 1;
  if (need <= b->cap)
    return 0;
  if (b->fixed)
    return failed(b, GF_ELIMIT); /* not reached: max is cap - 1 */
  size_t cap = gf__buf_cap_after(b, n);
  char *p = gf__realloc(b->p, cap);
  if (!p)
    return failed(b, GF_ENOMEM);
  if (!b->p)
    p[0] = '\0';
  b->p = p;
  b->cap = cap;
  return 0;
}

int gf__buf_reserve(gf__buf *b, size_t n) {
  if (n > b->max - b->len)
    n = b->max - b->len; /* room up to the maximum, no error yet */
  return grow(b, n);
}

int gf__buf_append(gf__buf *b, const void *data, size_t n) {
  int rc = grow(b, n);
  if (rc)
    return rc;
  if (n)
    memcpy(b->p + b->len, data, n);
  b->len += n;
  b->p[b->len] = '\0';
  return 0;
}

int gf__buf_appendf(gf__buf *b, const char *fmt, ...) {
  /* Formatted in place when it fits (the common case); else sized, grown,
   * and formatted again. */
  for (int pass = 0; pass < 2; pass++) {
    size_t room = b->p ? b->cap - b->len : 0;
    va_list ap;
    va_start(ap, fmt);
    int n = room ? vsnprintf(b->p + b->len, room, fmt, ap)
                 : vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (room)
      b->p[b->len + (n >= 0 && (size_t)n < room ? (size_t)n : 0)] = '\0';
    if (n < 0)
      return failed(b, GF_EINVAL);
    if ((size_t)n < room) { /* cap <= max + 1, so it is within max */
      b->len += (size_t)n;
      return 0;
    }
    int rc = grow(b, (size_t)n);
    if (rc)
      return rc;
  }
  return failed(b, GF_EINVAL); /* not reached: the second pass has room */
}

char *gf__buf_take(gf__buf *b) {
  if (b->fixed)
    return NULL;
  char *p = b->p;
  gf__buf_init(b, b->max);
  return p;
}

int gf__buf_read_stream(gf__buf *b, FILE *fp) {
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0) {
    int rc = gf__buf_append(b, chunk, n);
    if (rc)
      return rc;
  }
  return ferror(fp) ? GF_EIO : 0;
}
