/*
 * The one Prometheus text writer (src/alloc/prom.h): a family's head, label
 * values escaped as the exposition format asks, labels joined, optional
 * labels left out, and a page that does not fit reported once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"
#include "prom.h"

static void test_head_and_value(void **st) {
  (void)st;
  gf__buf b;
  gf__buf_init(&b, 4096);
  gf__prom_u64(&b, "x_total", "counter", "Things.", 18446744073709551615ULL);
  assert_string_equal(gf__buf_str(&b), "# HELP x_total Things.\n"
                                       "# TYPE x_total counter\n"
                                       "x_total 18446744073709551615\n");
  gf__buf_release(&b);
}

static void test_labels_escaped(void **st) {
  (void)st;
  gf__buf b;
  gf__buf_init(&b, 4096);
  gf__buf_appendf(&b, "m");
  gf__prom_label(&b, true, "a", "back\\slash \"quoted\"\nnext");
  gf__prom_label_opt(&b, "skipped", "");
  gf__prom_label_opt(&b, "none", NULL);
  gf__prom_label_opt(&b, "b", "plain");
  gf__prom_close(&b);
  assert_string_equal(
      gf__buf_str(&b),
      "m{a=\"back\\\\slash \\\"quoted\\\"\\nnext\",b=\"plain\"}");
  gf__buf_release(&b);
}

static void test_does_not_fit(void **st) {
  (void)st;
  char mem[16];
  gf__buf b;
  gf__buf_init_fixed(&b, mem, sizeof(mem));
  gf__prom_head(&b, "a_name_longer_than_the_buffer", "gauge", "Help.");
  assert_int_not_equal(gf__buf_error(&b), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_head_and_value),
      cmocka_unit_test(test_labels_escaped),
      cmocka_unit_test(test_does_not_fit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
