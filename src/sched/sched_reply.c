/*
 * The extender's reply writer (sched_state.h).
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "buf.h"
#include "gpufrac/engine.h"
#include "gpufrac/error.h"
#include "sched_state.h"

/* {"Error": msg}, msg made valid UTF-8 first (it may quote client input,
 * cut by a fixed-size buffer). */
json_t *gf__error_obj(const char *msg) {
  char buf[GF_DIAG_MAX];
  snprintf(buf, sizeof(buf), "%s", msg);
  json_t *j = json_pack("{s:s}", "Error", gf__utf8_fix(buf));
  return j ? j : json_pack("{s:s}", "Error", "gpufrac extender: out of memory");
}

/* ---- text replies ----------------------------------------------------*/

/* A JSON string literal: quotes, backslashes and control bytes escaped. */
void gf__tb_json_str(gf__buf *t, const char *v) {
  gf__buf_append(t, "\"", 1);
  const char *run = v;
  for (const char *p = v; *p; p++) {
    unsigned char ch = (unsigned char)*p;
    if (ch != '"' && ch != '\\' && ch >= 0x20)
      continue;
    gf__buf_append(t, run, (size_t)(p - run));
    char esc[8];
    int n = ch < 0x20 ? snprintf(esc, sizeof(esc), "\\u%04x", ch)
                      : snprintf(esc, sizeof(esc), "\\%c", ch);
    gf__buf_append(t, esc, (size_t)n);
    run = p + 1;
  }
  gf__buf_append(t, run, strlen(run));
  gf__buf_append(t, "\"", 1);
}

void gf__set_text(gf_sched_reply *out, int status, const char *text) {
  out->status = status;
  out->content_type = "text/plain; charset=utf-8";
  out->body = gf__strdup(text);
  out->len = out->body ? strlen(out->body) : 0;
  if (!out->body)
    out->status = 500;
}

/* A request to a verb it cannot use.  kube-scheduler drops the body of any
 * answer but 200, so filter and bind answer 200 with the reason in Error
 * (ExtenderFilterResult / ExtenderBindingResult), which reaches the pod's
 * events; prioritize's HostPriorityList has no Error, so it answers
 * `status` with {"Error": msg} (kube-scheduler ignores a failed
 * prioritize). */
void gf__unusable(gf_sched_reply *out, int verb, int status, const char *msg) {
  json_t *j = gf__error_obj(msg);
  out->body = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  out->status = !out->body                                  ? 500
                : verb == V_PRIORITIZE || verb == V_PREEMPT ? status
                                                            : 200;
  out->content_type =
      out->body ? "application/json" : "text/plain; charset=utf-8";
  out->len = out->body ? strlen(out->body) : 0;
}

void gf_sched_reply_release(gf_sched_reply *r) {
  gf__free(r->body);
  memset(r, 0, sizeof(*r));
}
