/*
 * The error list's promise, pinned: a code's number, name and message never
 * change once released (include/gpufrac/error.h). Logs, exit statuses and wire
 * replies carry these numbers, so a renumbered or reworded entry is a break
 * that must fail here. A new code is appended to the list and to this table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gpufrac/error.h"

static const struct {
  int code;
  int number;
  const char *name;
  const char *message;
} pinned[] = {
    {GF_EINVAL, -1, "GF_EINVAL", "invalid argument"},
    {GF_ENOMEM, -2, "GF_ENOMEM", "out of memory"},
    {GF_ERANGE, -3, "GF_ERANGE", "value out of range"},
    {GF_ESYNTAX, -4, "GF_ESYNTAX", "malformed input"},
    {GF_ENOTFOUND, -5, "GF_ENOTFOUND", "not found"},
    {GF_ENOFIT, -6, "GF_ENOFIT", "does not fit"},
    {GF_EIO, -7, "GF_EIO", "input/output error"},
    {GF_EEXIST, -8, "GF_EEXIST", "already exists"},
    {GF_ELIMIT, -9, "GF_ELIMIT", "limit exceeded"},
    {GF_ESTATE, -10, "GF_ESTATE", "operation not valid in this state"},
    {GF_ECONFLICT, -11, "GF_ECONFLICT", "conflict: the object changed"},
    {GF_EGONE, -12, "GF_EGONE", "gone: the requested version is too old"},
    {GF_EHTTP, -13, "GF_EHTTP", "HTTP request failed"},
};
#define NPINNED (sizeof(pinned) / sizeof(pinned[0]))

static void test_numbers_names_messages(void **st) {
  (void)st;
  for (size_t i = 0; i < NPINNED; i++) {
    assert_int_equal(pinned[i].code, pinned[i].number);
    assert_string_equal(gf_err_name(pinned[i].code), pinned[i].name);
    assert_string_equal(gf_strerror(pinned[i].code), pinned[i].message);
  }
}

/* The table above is the whole list: a code appended to error.h without a
 * row here fails, so the pin cannot fall behind the list. */
static void test_table_is_complete(void **st) {
  (void)st;
#define COUNT(name, num, msg) +1
  const size_t listed = 0 GF_ERRNO_MAP(COUNT);
#undef COUNT
  assert_int_equal(listed, NPINNED);
}

/* Numbers outside the list still get a name and a message, never NULL. */
static void test_unknown_codes(void **st) {
  (void)st;
  const int odd[] = {0, 1, -14, -1000, 12345};
  for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
    assert_non_null(gf_err_name(odd[i]));
    assert_non_null(gf_strerror(odd[i]));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_numbers_names_messages),
      cmocka_unit_test(test_table_is_complete),
      cmocka_unit_test(test_unknown_codes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
