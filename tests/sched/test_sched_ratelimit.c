/* The binder's token bucket (src/sched/ratelimit.h, --bind-qps) on a
 * clock the test sets: a full bucket lets burst requests through at once,
 * then one each 1/qps; idle time refills it up to burst and no further;
 * qps 0 never waits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ratelimit.h"

#define MS 1000000ll
#define SEC 1000000000ll

static void test_burst_then_rate(void **st) {
  (void)st;
  gf__tbucket t;
  gf__tb_init(&t, 50, 100); /* kube-scheduler's default client limit */
  int64_t now = 7 * SEC;
  for (int i = 0; i < 100; i++)
    assert_int_equal(gf__tb_reserve(&t, now), 0);
  /* the 101st at the same instant waits one token's time (20 ms), the
   * next two and three tokens' */
  assert_int_equal(gf__tb_reserve(&t, now), 20 * MS);
  assert_int_equal(gf__tb_reserve(&t, now), 40 * MS);
  assert_int_equal(gf__tb_reserve(&t, now), 60 * MS);
  /* 60 ms later all three reservations are due and the bucket is empty */
  now += 60 * MS;
  assert_int_equal(gf__tb_reserve(&t, now), 20 * MS);
}

static void test_steady_rate(void **st) {
  (void)st;
  gf__tbucket t;
  gf__tb_init(&t, 10, 1);
  int64_t now = SEC, waited = 0;
  /* 1000 requests, each sent when its wait ends: 1 at once, then one
   * each 100 ms, so the last goes out 99.9 s after the first */
  for (int i = 0; i < 1000; i++) {
    int64_t w = gf__tb_reserve(&t, now);
    now += w;
    waited += w;
  }
  assert_int_equal(waited, 999 * 100 * MS);
}

static void test_refill_capped(void **st) {
  (void)st;
  gf__tbucket t;
  gf__tb_init(&t, 100, 5);
  int64_t now = SEC;
  for (int i = 0; i < 5; i++)
    assert_int_equal(gf__tb_reserve(&t, now), 0);
  /* an hour idle refills 5 tokens, not 360,000 */
  now += 3600 * SEC;
  for (int i = 0; i < 5; i++)
    assert_int_equal(gf__tb_reserve(&t, now), 0);
  assert_int_equal(gf__tb_reserve(&t, now), 10 * MS);
  /* a clock that steps back adds nothing and takes nothing */
  assert_int_equal(gf__tb_reserve(&t, now - SEC), 20 * MS);
}

static void test_no_limit(void **st) {
  (void)st;
  gf__tbucket t;
  gf__tb_init(&t, 0, 0);
  for (int i = 0; i < 100000; i++)
    assert_int_equal(gf__tb_reserve(&t, SEC), 0);
  gf__tb_init(&t, 1, 0); /* burst 0 means 1 */
  assert_int_equal(gf__tb_reserve(&t, SEC), 0);
  assert_int_equal(gf__tb_reserve(&t, SEC), SEC);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_burst_then_rate),
      cmocka_unit_test(test_steady_rate),
      cmocka_unit_test(test_refill_capped),
      cmocka_unit_test(test_no_limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
