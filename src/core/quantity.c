/*
 * Exact parsing of Kubernetes quantities.  The value is carried as a 128-bit
 * mantissa with separate powers of ten and two, and only turned into int64 at
 * the end, so "0.5Gi" and "1536Mi" are exact and overflow is always caught.
 */
#include "gpufrac/quantity.h"

#include <string.h>

#include "gpufrac/error.h"

__extension__ typedef unsigned __int128 u128;

#define MAX_SIG_DIGITS 36 /* 10^36 < 2^127: room for the exact mantissa */
#define MAX_ABS_EXP10 40

/* Suffix table: name, power of ten, power of two. */
static const struct {
  const char *name;
  int e10;
  int e2;
} suffixes[] = {
    {"", 0, 0},    {"n", -9, 0},  {"u", -6, 0},  {"m", -3, 0},
    {"k", 3, 0},   {"M", 6, 0},   {"G", 9, 0},   {"T", 12, 0},
    {"P", 15, 0},  {"E", 18, 0},  {"Ki", 0, 10}, {"Mi", 0, 20},
    {"Gi", 0, 30}, {"Ti", 0, 40}, {"Pi", 0, 50}, {"Ei", 0, 60},
};

static int parse_exponent(const char *p, int *e10) {
  int sign = 1;
  int v = 0;
  if (*p == '+' || *p == '-')
    sign = (*p++ == '-') ? -1 : 1;
  if (*p < '0' || *p > '9')
    return -1;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > MAX_ABS_EXP10 * 10)
      return -1;
    v = v * 10 + (*p - '0');
  }
  if (*p != '\0' || v > MAX_ABS_EXP10)
    return -1;
  *e10 = sign * v;
  return 0;
}

int gf_quantity_parse(const char *s, gf_qty_unit unit, unsigned flags,
                      int64_t *out, gf_diag *d) {
  if (!s || !*s)
    return gf_diag_set(d, GF_ESYNTAX, "empty quantity");

  const char *p = s;
  int neg = 0;
  if (*p == '+' || *p == '-')
    neg = (*p++ == '-');

  u128 mant = 0;
  int sig = 0, frac = 0, digits = 0, dot = 0;
  for (;; p++) {
    if (*p == '.') {
      if (dot)
        return gf_diag_set(d, GF_ESYNTAX, "quantity '%s': more than one '.'",
                           s);
      dot = 1;
      continue;
    }
    if (*p < '0' || *p > '9')
      break;
    digits++;
    if (mant == 0 && *p == '0') {
      if (dot)
        frac++;
      continue;
    }
    if (++sig > MAX_SIG_DIGITS)
      return gf_diag_set(d, GF_ERANGE, "quantity '%s': too many digits", s);
    mant = mant * 10 + (u128)(*p - '0');
    if (dot)
      frac++;
  }
  if (digits == 0)
    return gf_diag_set(d, GF_ESYNTAX, "quantity '%s': no digits", s);

  int e10 = 0, e2 = 0, found = 0;
  for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
    if (strcmp(p, suffixes[i].name) == 0) {
      e10 = suffixes[i].e10;
      e2 = suffixes[i].e2;
      found = 1;
      break;
    }
  }
  /* Not a suffix ("E" alone is exa, "Ei" exbi): a decimal exponent. */
  if (!found && (*p == 'e' || *p == 'E')) {
    if (parse_exponent(p + 1, &e10) != 0)
      return gf_diag_set(d, GF_ESYNTAX, "quantity '%s': bad exponent '%s'", s,
                         p);
    found = 1;
  }
  if (!found)
    return gf_diag_set(d, GF_ESYNTAX, "quantity '%s': unknown suffix '%s'", s,
                       p);

  if (neg && mant != 0 && !(flags & GF_QTY_SIGNED))
    return gf_diag_set(d, GF_ERANGE, "quantity '%s': must not be negative", s);

  e10 -= frac;
  if (unit == GF_QTY_MILLI)
    e10 += 3;

  if (mant != 0) {
    /* Divide out 10^-e10 exactly: each 10 takes a 5 from the mantissa and a
     * 2 from either the binary exponent or the mantissa. */
    for (; e10 < 0; e10++) {
      if (mant % 10 == 0) {
        mant /= 10;
        continue;
      }
      if (mant % 5 != 0)
        goto inexact;
      mant /= 5;
      if (e2 > 0)
        e2--;
      else if (mant % 2 == 0)
        mant /= 2;
      else
        goto inexact;
    }
    const u128 limit = (u128)INT64_MAX + (neg ? 1u : 0u);
    for (; e10 > 0; e10--) {
      if (mant > limit / 10)
        goto overflow;
      mant *= 10;
    }
    for (; e2 > 0; e2--) {
      if (mant > limit / 2)
        goto overflow;
      mant *= 2;
    }
    if (mant > limit)
      goto overflow;
  }

  if (neg && mant != 0)
    *out = (mant == (u128)INT64_MAX + 1u) ? INT64_MIN : -(int64_t)mant;
  else
    *out = (int64_t)mant;
  return 0;

inexact:
  return gf_diag_set(d, GF_ERANGE, "quantity '%s': not a whole number of %s", s,
                     unit == GF_QTY_MILLI ? "milli-units" : "units");
overflow:
  return gf_diag_set(d, GF_ERANGE, "quantity '%s': too large", s);
}

int gf_quantity_bytes(const char *s, int64_t *out, gf_diag *d) {
  return gf_quantity_parse(s, GF_QTY_UNIT, 0, out, d);
}

int gf_quantity_milli(const char *s, int64_t *out, gf_diag *d) {
  return gf_quantity_parse(s, GF_QTY_MILLI, 0, out, d);
}

int gf_parse_int64(const char *s, int64_t min, int64_t max, int64_t *out,
                   gf_diag *d) {
  if (!s || !*s)
    return gf_diag_set(d, GF_ESYNTAX, "empty value where an integer belongs");
  const char *p = s;
  int neg = 0;
  if (*p == '+' || *p == '-')
    neg = (*p++ == '-');
  if (*p == '\0')
    return gf_diag_set(d, GF_ESYNTAX, "'%s' is not an integer", s);
  u128 v = 0;
  for (; *p; p++) {
    if (*p < '0' || *p > '9')
      return gf_diag_set(d, GF_ESYNTAX, "'%s' is not an integer", s);
    v = v * 10 + (u128)(*p - '0');
    if (v > (u128)INT64_MAX + 1u)
      return gf_diag_set(d, GF_ERANGE, "'%s' is out of range", s);
  }
  if (!neg && v > (u128)INT64_MAX)
    return gf_diag_set(d, GF_ERANGE, "'%s' is out of range", s);
  int64_t r =
      neg ? (v == (u128)INT64_MAX + 1u ? INT64_MIN : -(int64_t)v) : (int64_t)v;
  if (r < min || r > max)
    return gf_diag_set(d, GF_ERANGE, "'%s' is out of range [%lld, %lld]", s,
                       (long long)min, (long long)max);
  *out = r;
  return 0;
}
