/* A token bucket for the extender's Binding writes (gpufrac scheduler
 * --bind-qps): the same rule as a Kubernetes client's QPS and burst, so
 * the extender's binds and kube-scheduler's own can be held to one limit.
 * The caller keeps the lock; the clock is the caller's (monotonic ns). */
#ifndef GPUFRAC_SCHED_RATELIMIT_H
#define GPUFRAC_SCHED_RATELIMIT_H

#include <stdint.h>

typedef struct gf__tbucket {
  double qps;      /* tokens a second; <= 0: no limit */
  double burst;    /* bucket size (at least 1 when qps > 0) */
  double tokens;   /* may go negative: reservations not yet due */
  int64_t last_ns; /* when tokens was last brought up to date; 0: never */
} gf__tbucket;

/* A bucket of qps tokens a second holding at most burst (0: 1), full. */
void gf__tb_init(gf__tbucket *t, double qps, unsigned burst);

/* Takes one token at now_ns and returns how many nanoseconds the caller
 * must wait before its request (0: at once).  Each call reserves its
 * token, so n calls at one instant wait 0 (burst of them), then 1/qps,
 * 2/qps, ... */
int64_t gf__tb_reserve(gf__tbucket *t, int64_t now_ns);

#endif
