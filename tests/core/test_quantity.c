/* Kubernetes quantities: valid forms give exact integers, every malformed
 * or out-of-range form gives an error naming the input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gpufrac/error.h"
#include "gpufrac/quantity.h"

static void ok(const char *s, gf_qty_unit u, int64_t want) {
  int64_t got = -12345;
  gf_diag d = {""};
  int rc = gf_quantity_parse(s, u, GF_QTY_SIGNED, &got, &d);
  if (rc != 0)
    fail_msg("'%s': unexpected error: %s", s, d.msg);
  if (got != want)
    fail_msg("'%s': got %lld, want %lld", s, (long long)got, (long long)want);
}

static void bad(const char *s, gf_qty_unit u, unsigned flags, int want_rc) {
  int64_t got = 777;
  gf_diag d = {""};
  int rc = gf_quantity_parse(s, u, flags, &got, &d);
  if (rc != want_rc)
    fail_msg("'%s': got rc %s, want %s (%s)", s, gf_err_name(rc),
             gf_err_name(want_rc), d.msg);
  assert_int_equal(got, 777); /* untouched on error */
  assert_true(strlen(d.msg) > 0);
  /* The message names the input, so a user can find it. */
  if (*s)
    assert_non_null(strstr(d.msg, s));
}

static void test_bytes(void **st) {
  (void)st;
  ok("0", GF_QTY_UNIT, 0);
  ok("1", GF_QTY_UNIT, 1);
  ok("10Gi", GF_QTY_UNIT, 10737418240LL);
  ok("512Mi", GF_QTY_UNIT, 536870912LL);
  ok("1Ki", GF_QTY_UNIT, 1024);
  ok("0.5Gi", GF_QTY_UNIT, 536870912LL);
  ok("1.5Ki", GF_QTY_UNIT, 1536);
  ok("100k", GF_QTY_UNIT, 100000);
  ok("1e3", GF_QTY_UNIT, 1000);
  ok("1E3", GF_QTY_UNIT, 1000);
  ok("2e-0", GF_QTY_UNIT, 2);
}

static void test_bytes_inexact(void **st) {
  (void)st;
  bad("1500m", GF_QTY_UNIT, 0, GF_ERANGE);
  bad("0.5", GF_QTY_UNIT, 0, GF_ERANGE);
  bad("1.0000001Ki", GF_QTY_UNIT, 0, GF_ERANGE);
  bad("100u", GF_QTY_MILLI, 0, GF_ERANGE); /* 0.1 milli */
  bad("3n", GF_QTY_MILLI, 0, GF_ERANGE);
}

static void test_milli(void **st) {
  (void)st;
  ok("1.5", GF_QTY_MILLI, 1500);
  ok("500m", GF_QTY_MILLI, 500);
  ok("2", GF_QTY_MILLI, 2000);
  ok(".5", GF_QTY_MILLI, 500);
  ok("5.", GF_QTY_MILLI, 5000);
  ok("0.001", GF_QTY_MILLI, 1);
  ok("1e-3", GF_QTY_MILLI, 1);
  ok("1000u", GF_QTY_MILLI, 1);
}

static void test_signs(void **st) {
  (void)st;
  ok("-1", GF_QTY_UNIT, -1);
  ok("+5", GF_QTY_UNIT, 5);
  ok("-0", GF_QTY_UNIT, 0);
  bad("-1", GF_QTY_UNIT, 0, GF_ERANGE);
  bad("-2Gi", GF_QTY_UNIT, 0, GF_ERANGE);
  int64_t v = 0;
  assert_int_equal(gf_quantity_bytes("-0", &v, NULL), 0);
  assert_int_equal(v, 0);
}

static void test_limits(void **st) {
  (void)st;
  ok("9223372036854775807", GF_QTY_UNIT, INT64_MAX);
  ok("-9223372036854775808", GF_QTY_UNIT, INT64_MIN);
  ok("7Ei", GF_QTY_UNIT, 7LL << 60);
  bad("9223372036854775808", GF_QTY_UNIT, GF_QTY_SIGNED, GF_ERANGE);
  bad("8Ei", GF_QTY_UNIT, 0, GF_ERANGE);
  bad("9223372036854775807", GF_QTY_MILLI, 0, GF_ERANGE);
  bad("1e40", GF_QTY_UNIT, 0, GF_ERANGE);
  bad("1e41", GF_QTY_UNIT, 0, GF_ESYNTAX);
  bad("1234567890123456789012345678901234567", GF_QTY_UNIT, 0, GF_ERANGE);
  /* Many leading zeros are not significant digits. */
  ok("000000000000000000000000000000000000000001", GF_QTY_UNIT, 1);
}

static void test_garbage(void **st) {
  (void)st;
  bad("", GF_QTY_UNIT, 0, GF_ESYNTAX);
  bad("abc", GF_QTY_UNIT, 0, GF_ESYNTAX);
  bad("12x", GF_QTY_UNIT, 0, GF_ESYNTAX);
  bad("1.2.3", GF_QTY_UNIT, 0, GF_ESYNTAX);
  bad(".", GF_QTY_UNIT, 0, GF_ESYNTAX);
  bad("-", GF_QTY_UNIT, 0, GF_ESYNTAX);
  bad("Gi", GF_QTY_UNIT, 0, GF_ESYNTAX);
  bad("1 Gi", GF_QTY_UNIT, 0, GF_ESYNTAX);
  bad("1gi", GF_QTY_UNIT, 0, GF_ESYNTAX);
  bad("1K", GF_QTY_UNIT, 0, GF_ESYNTAX); /* decimal kilo is lower-case k */
  bad("1e", GF_QTY_UNIT, 0, GF_ESYNTAX);
  bad("1e+", GF_QTY_UNIT, 0, GF_ESYNTAX);
  bad("1Gii", GF_QTY_UNIT, 0, GF_ESYNTAX);
  bad("--1", GF_QTY_UNIT, GF_QTY_SIGNED, GF_ESYNTAX);
  bad(" 1", GF_QTY_UNIT, 0, GF_ESYNTAX);
  bad("1e3Ki", GF_QTY_UNIT, 0, GF_ESYNTAX);
  int64_t v = 5;
  assert_int_equal(gf_quantity_bytes(NULL, &v, NULL), GF_ESYNTAX);
  assert_int_equal(v, 5);
}

static void test_int64(void **st) {
  (void)st;
  int64_t v = 0;
  gf_diag d;
  assert_int_equal(gf_parse_int64("42", 0, 100, &v, &d), 0);
  assert_int_equal(v, 42);
  assert_int_equal(gf_parse_int64("-7", -10, 10, &v, &d), 0);
  assert_int_equal(v, -7);
  assert_int_equal(gf_parse_int64("101", 0, 100, &v, &d), GF_ERANGE);
  assert_non_null(strstr(d.msg, "101"));
  assert_int_equal(gf_parse_int64("4x", 0, 100, &v, &d), GF_ESYNTAX);
  assert_int_equal(gf_parse_int64("", 0, 100, &v, &d), GF_ESYNTAX);
  assert_int_equal(gf_parse_int64("+", 0, 100, &v, &d), GF_ESYNTAX);
  assert_int_equal(gf_parse_int64("1.5", 0, 100, &v, &d), GF_ESYNTAX);
  assert_int_equal(
      gf_parse_int64("99999999999999999999", INT64_MIN, INT64_MAX, &v, &d),
      GF_ERANGE);
  assert_int_equal(
      gf_parse_int64("-9223372036854775808", INT64_MIN, INT64_MAX, &v, &d), 0);
  assert_true(v == INT64_MIN);
}

static void test_errors_table(void **st) {
  (void)st;
  assert_string_equal(gf_err_name(GF_ENOFIT), "GF_ENOFIT");
  assert_string_equal(gf_strerror(GF_ENOFIT), "does not fit");
  assert_string_equal(gf_strerror(0), "success");
  assert_string_equal(gf_err_name(-9999), "GF_EUNKNOWN");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bytes_inexact), cmocka_unit_test(test_milli),
      cmocka_unit_test(test_signs),         cmocka_unit_test(test_limits),
      cmocka_unit_test(test_garbage),       cmocka_unit_test(test_int64),
      cmocka_unit_test(test_errors_table),  cmocka_unit_test(test_bytes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
