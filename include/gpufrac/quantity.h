/*
 * gpufrac/quantity.h - Kubernetes resource quantities as exact integers.
 *
 * Accepts the quantity grammar of Kubernetes: an optional sign, a decimal
 * number ("1", "1.5", ".5"), then at most one suffix: binary (Ki Mi Gi Ti Pi
 * Ei), decimal SI (n u m k M G T P E) or a decimal exponent ("1e3", "2E-3").
 *
 * Unlike the API server, nothing is rounded: a value that is not a whole
 * number of the requested unit ("0.5" bytes, "0.1m" CPU) is an error, as is
 * anything that overflows int64, garbage, an empty string, or a negative value
 * unless GF_QTY_SIGNED is given.  On error *out is untouched and the diag says
 * which input was wrong and why.
 */
#ifndef GPUFRAC_QUANTITY_H
#define GPUFRAC_QUANTITY_H

#include <stdint.h>

#include "gpufrac/diag.h"

typedef enum gf_qty_unit {
  GF_QTY_UNIT = 0,  /* whole base units: bytes, counts */
  GF_QTY_MILLI = 1, /* thousandths: CPU "500m" -> 500, "1.5" -> 1500 */
} gf_qty_unit;

enum { GF_QTY_SIGNED = 1u << 0 };

/* Parses s into *out, counted in `unit`.  Returns 0 or GF_ESYNTAX/GF_ERANGE. */
int gf_quantity_parse(const char *s, gf_qty_unit unit, unsigned flags,
                      int64_t *out, gf_diag *d);

/* Shorthands: non-negative bytes / non-negative milli-units. */
int gf_quantity_bytes(const char *s, int64_t *out, gf_diag *d);
int gf_quantity_milli(const char *s, int64_t *out, gf_diag *d);

/* Strict decimal integer (optional sign, digits only, within [min, max]). */
int gf_parse_int64(const char *s, int64_t min, int64_t max, int64_t *out,
                   gf_diag *d);

#endif
