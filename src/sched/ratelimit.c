/* The Binding writes' token bucket (ratelimit.h). */
#include "ratelimit.h"

void gf__tb_init(gf__tbucket *t, double qps, unsigned burst) {
  t->qps = qps;
  t->burst = burst ? (double)burst : 1.0;
  t->tokens = t->burst;
  t->last_ns = 0;
}

int64_t gf__tb_reserve(gf__tbucket *t, int64_t now_ns) {
  if (t->qps <= 0)
    return 0;
  if (t->last_ns != 0 && now_ns > t->last_ns) {
    t->tokens += (double)(now_ns - t->last_ns) * t->qps / 1e9;
    if (t->tokens > t->burst)
      t->tokens = t->burst;
  }
  if (t->last_ns == 0 || now_ns > t->last_ns)
    t->last_ns = now_ns;
  t->tokens -= 1.0;
  if (t->tokens >= 0)
    return 0;
  return (int64_t)(-t->tokens * 1e9 / t->qps + 0.5);
}
