/* The interposer's allocation table (src/shim/alloc_table.c), in-process:
 * label unit, so the sanitizer build runs it too.  Churn keeps its memory
 * bounded by the live entries; puts, takes and replacements agree with a
 * reference under random operations; the reserved keys are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "alloc_table.h"

/* Addresses as a driver hands them out: 2 MiB apart, never reused. */
static uint64_t addr(uint64_t i) { return 0x700000000000ull + (i << 21); }

/* 10 M allocation/free pairs with at most one live allocation: the table
 * stays at its smallest size (24 KiB), whatever the history. */
static void test_churn_bounded(void **st) {
  (void)st;
  gf__atab t = {0};
  gf__atab_entry e, old, out;
  for (uint64_t i = 0; i < 10000000; i++) {
    e = (gf__atab_entry){addr(i), 1u << 20, 0, 0};
    assert_int_equal(gf__atab_put(&t, &e, &old), 0);
    assert_int_equal(old.key, 0);
    assert_int_equal(gf__atab_take(&t, addr(i), &out), 0);
    assert_int_equal(out.key, addr(i));
  }
  assert_int_equal(t.live, 0);
  assert_int_equal(t.cap, GF__ATAB_MIN);
  gf__atab_release(&t);
}

/* 10,000 live, then all freed, then churn: the table grows with the live
 * entries and shrinks back when they go. */
static void test_grows_and_shrinks(void **st) {
  (void)st;
  gf__atab t = {0};
  gf__atab_entry e, old, out;
  for (uint64_t i = 0; i < 10000; i++) {
    e = (gf__atab_entry){addr(i), i, 0, 0};
    assert_int_equal(gf__atab_put(&t, &e, &old), 0);
  }
  assert_int_equal(t.live, 10000);
  assert_true(t.cap >= 10000 * 4 / 3 && t.cap <= 32768);
  for (uint64_t i = 0; i < 10000; i++) {
    assert_int_equal(gf__atab_take(&t, addr(i), &out), 0);
    assert_int_equal(out.bytes, i);
  }
  assert_int_equal(t.live, 0);
  assert_int_equal(t.cap, GF__ATAB_MIN);
  gf__atab_release(&t);
}

/* Random puts (some replacing), takes of present and absent keys, on a
 * key space small enough to collide often; checked against an array. */
static void test_random_against_reference(void **st) {
  (void)st;
  enum { KEYS = 3000 };
  static uint64_t ref[KEYS]; /* bytes + 1, 0 = absent */
  memset(ref, 0, sizeof(ref));
  gf__atab t = {0};
  unsigned seed = 7;
  size_t live = 0;
  for (int op = 0; op < 2000000; op++) {
    uint64_t k = (uint64_t)rand_r(&seed) % KEYS;
    gf__atab_entry e, old, out;
    if (rand_r(&seed) % 2) {
      e = (gf__atab_entry){addr(k), (uint64_t)op, (uint32_t)(k % 16), 0};
      assert_int_equal(gf__atab_put(&t, &e, &old), 0);
      if (ref[k]) {
        assert_int_equal(old.key, addr(k));
        assert_int_equal(old.bytes, ref[k] - 1);
      } else {
        assert_int_equal(old.key, 0);
        live++;
      }
      ref[k] = (uint64_t)op + 1;
    } else {
      int rc = gf__atab_take(&t, addr(k), &out);
      if (ref[k]) {
        assert_int_equal(rc, 0);
        assert_int_equal(out.bytes, ref[k] - 1);
        assert_int_equal(out.dev, k % 16);
        ref[k] = 0;
        live--;
      } else {
        assert_int_equal(rc, -1);
      }
    }
    assert_int_equal(t.live, live);
  }
  for (uint64_t k = 0; k < KEYS; k++) {
    gf__atab_entry out;
    assert_int_equal(gf__atab_take(&t, addr(k), &out), ref[k] ? 0 : -1);
  }
  assert_int_equal(t.live, 0);
  gf__atab_release(&t);
}

static void test_reserved_keys(void **st) {
  (void)st;
  gf__atab t = {0};
  gf__atab_entry e = {1, 5, 0, 0}, old, out;
  assert_int_equal(gf__atab_put(&t, &e, &old), -1);
  e.key = 0;
  assert_int_equal(gf__atab_put(&t, &e, &old), -1);
  assert_int_equal(gf__atab_take(&t, 0, &out), -1);
  assert_int_equal(gf__atab_take(&t, 1, &out), -1);
  assert_int_equal(gf__atab_take(&t, addr(3), &out), -1);
  gf__atab_release(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_churn_bounded),
      cmocka_unit_test(test_grows_and_shrinks),
      cmocka_unit_test(test_random_against_reference),
      cmocka_unit_test(test_reserved_keys),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
