#include "gpufrac/diag.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int gf_diag_set(gf_diag *d, int err, const char *fmt, ...) {
  if (d) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
    va_end(ap);
  }
  return err;
}

void gf_diag_prefix(gf_diag *d, const char *fmt, ...) {
  if (!d)
    return;
  char head[GF_DIAG_MAX];
  char old[GF_DIAG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof(head), fmt, ap);
  va_end(ap);
  memcpy(old, d->msg, sizeof(old));
  size_t h = strnlen(head, sizeof(head) - 1);
  size_t room = sizeof(d->msg) - 1;
  if (h > room)
    h = room;
  memcpy(d->msg, head, h);
  size_t at = h;
  for (const char *sep = ": "; *sep && at < room; sep++)
    d->msg[at++] = *sep;
  size_t o = strnlen(old, sizeof(old) - 1);
  if (o > room - at)
    o = room - at;
  memcpy(d->msg + at, old, o);
  d->msg[at + o] = '\0';
}
