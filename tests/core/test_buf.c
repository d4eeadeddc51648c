/*
 * The bounded buffer (src/alloc/buf.h): growth up to its maximum and not a
 * byte past it, sticky errors, caller storage, and allocation failure.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "alloc.h"
#include "buf.h"
#include "gpufrac/error.h"

static void test_grows(void **st) {
  (void)st;
  gf__buf b;
  gf__buf_init(&b, 100000);
  assert_string_equal(gf__buf_str(&b), "");
  for (int i = 0; i < 1000; i++)
    assert_int_equal(gf__buf_appendf(&b, "%d,", i % 10), 0);
  assert_int_equal(b.len, 2000);
  assert_int_equal(gf__buf_append(&b, "end", 3), 0);
  assert_int_equal(gf__buf_append(&b, "xyz", 2), 0);
  assert_int_equal(gf__buf_error(&b), 0);
  assert_int_equal(strlen(gf__buf_str(&b)), 2005);
  assert_memory_equal(gf__buf_str(&b), "0,1,2,", 6);
  assert_string_equal(gf__buf_str(&b) + 2000, "endxy");
  /* A long formatted piece (past the in-place room). */
  char big[700];
  memset(big, 'q', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  assert_int_equal(gf__buf_appendf(&b, "<%s>", big), 0);
  assert_int_equal(b.len, 2005 + 701);
  assert_int_equal(gf__buf_str(&b)[b.len - 1], '>');
  char *t = gf__buf_take(&b);
  assert_int_equal(strlen(t), 2706);
  gf__free(t);
  assert_int_equal(b.len, 0);
  assert_string_equal(gf__buf_str(&b), "");
  gf__buf_release(&b);
}

/* Exactly max bytes fit; one more is GF_ELIMIT and leaves the text as it
 * was; the first error is kept until clear. */
static void test_limit(void **st) {
  (void)st;
  gf__buf b;
  gf__buf_init(&b, 10);
  assert_int_equal(gf__buf_append(&b, "0123456789", 10), 0);
  assert_int_equal(b.len, 10);
  assert_true(b.cap <= 11);
  assert_int_equal(gf__buf_append(&b, "x", 1), GF_ELIMIT);
  assert_int_equal(gf__buf_error(&b), GF_ELIMIT);
  assert_string_equal(gf__buf_str(&b), "0123456789");
  assert_int_equal(gf__buf_append(&b, "", 0), 0);
  assert_int_equal(gf__buf_error(&b), GF_ELIMIT); /* kept */
  gf__buf_clear(&b);
  assert_int_equal(gf__buf_error(&b), 0);
  assert_string_equal(gf__buf_str(&b), "");
  assert_int_equal(gf__buf_append(&b, "0123456789", 10), 0);
  gf__buf_release(&b);

  gf__buf_init(&b, 10);
  assert_int_equal(gf__buf_append(&b, "abcd", 4), 0);
  assert_int_equal(gf__buf_appendf(&b, "%s", "efghijk"), GF_ELIMIT);
  assert_string_equal(gf__buf_str(&b), "abcd"); /* all or nothing */
  assert_int_equal(gf__buf_appendf(&b, "%d", 1), 0);
  assert_string_equal(gf__buf_str(&b), "abcd1");
  assert_int_equal(gf__buf_error(&b), GF_ELIMIT);
  gf__buf_release(&b);

  /* No maximum to speak of: growth does not overflow. */
  gf__buf_init(&b, (size_t)-1);
  for (int i = 0; i < 100; i++)
    assert_int_equal(gf__buf_append(&b, "0123456789", 10), 0);
  assert_int_equal(b.len, 1000);
  assert_true(b.cap > 1000);
  gf__buf_release(&b);

  /* A formatted piece longer than the in-place room and the maximum. */
  gf__buf_init(&b, 300);
  char big[400];
  memset(big, 'z', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  assert_int_equal(gf__buf_appendf(&b, "%s", big), GF_ELIMIT);
  assert_string_equal(gf__buf_str(&b), "");
  gf__buf_release(&b);
}

static void test_fixed(void **st) {
  (void)st;
  char mem[8];
  gf__buf b;
  gf__buf_init_fixed(&b, mem, sizeof(mem));
  assert_string_equal(mem, "");
  assert_int_equal(gf__buf_appendf(&b, "%s=%d", "ab", 12), 0);
  assert_string_equal(mem, "ab=12");
  assert_int_equal(gf__buf_appendf(&b, "%s", "345"), GF_ELIMIT);
  assert_string_equal(mem, "ab=12");
  assert_null(gf__buf_take(&b));
  gf__buf_release(&b); /* empties, frees nothing */
  assert_string_equal(mem, "");
  assert_int_equal(gf__buf_append(&b, "1234567", 7), 0);
  assert_int_equal(gf__buf_append(&b, "8", 1), GF_ELIMIT);
  assert_string_equal(mem, "1234567");
}

/* Each allocation refused in turn: GF_ENOMEM, kept, the text whole. */
/* gf__buf_cap_after says what an append will allocate, before it does;
 * gf__buf_drop_front drains a buffer from the front. */
static void test_cap_after_drop_front(void **st) {
  (void)st;
  gf__buf b;
  gf__buf_init(&b, 1000);
  assert_int_equal(gf__buf_cap_after(&b, 0), 256);    /* the first allocation */
  assert_int_equal(gf__buf_cap_after(&b, 600), 1001); /* capped: max + NUL */
  assert_int_equal(gf__buf_cap_after(&b, 1001), 0);   /* does not fit */
  char x[700];
  memset(x, 'x', sizeof(x));
  for (size_t n = 0; n <= sizeof(x); n += 50) {
    gf__buf_clear(&b);
    size_t want = gf__buf_cap_after(&b, n);
    assert_int_equal(gf__buf_append(&b, x, n), 0);
    assert_int_equal(b.cap, want);
  }
  assert_int_equal(gf__buf_cap_after(&b, 10), b.cap); /* fits already */
  gf__buf_clear(&b);
  assert_int_equal(gf__buf_append(&b, "abcdef", 6), 0);
  gf__buf_drop_front(&b, 0);
  assert_string_equal(gf__buf_str(&b), "abcdef");
  gf__buf_drop_front(&b, 2);
  assert_string_equal(gf__buf_str(&b), "cdef");
  assert_int_equal(b.len, 4);
  gf__buf_drop_front(&b, 9);
  assert_string_equal(gf__buf_str(&b), "");
  assert_int_equal(b.len, 0);
  gf__buf_release(&b);
  gf__buf_drop_front(&b, 1); /* nothing allocated: nothing to do */
  assert_null(b.p);
  char mem[8];
  gf__buf_init_fixed(&b, mem, sizeof(mem));
  assert_int_equal(gf__buf_cap_after(&b, 3), sizeof(mem)); /* never grows */
}

static void test_alloc_failure(void **st) {
  (void)st;
  long refusals = 0;
  const long live0 = gf__alloc_live();
  for (long n = 0; n < 20; n++) {
    gf__buf b;
    gf__buf_init(&b, 1 << 20);
    gf__alloc_fail_once(n);
    int rc = 0;
    for (int i = 0; i < 200 && !rc; i++)
      rc = gf__buf_appendf(&b, "line %d\n", i);
    size_t len = b.len;
    long refused = gf__alloc_refused();
    gf__alloc_fail_after(-1);
    if (refused) {
      refusals++;
      assert_int_equal(rc, GF_ENOMEM);
      assert_int_equal(gf__buf_error(&b), GF_ENOMEM);
      assert_int_equal(strlen(gf__buf_str(&b)), len);
    } else {
      assert_int_equal(rc, 0);
      assert_int_equal(b.len, 200 * 6 + 10 * 1 + 90 * 2 + 100 * 3);
    }
    gf__buf_release(&b);
    assert_int_equal(gf__alloc_live(), live0);
  }
  assert_true(refusals > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grows),
      cmocka_unit_test(test_limit),
      cmocka_unit_test(test_fixed),
      cmocka_unit_test(test_cap_after_drop_front),
      cmocka_unit_test(test_alloc_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
