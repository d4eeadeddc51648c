/* libFuzzer target: the quantity and integer parsers never crash, never
 * write *out on error, and a parsed value survives a round trip. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/quantity.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char buf[256];
  if (size >= sizeof(buf))
    size = sizeof(buf) - 1;
  memcpy(buf, data, size);
  buf[size] = '\0';
  for (int unit = 0; unit < 2; unit++) {
    for (unsigned flags = 0; flags < 2; flags++) {
      int64_t v = 0x5a5a5a5a;
      gf_diag d;
      int rc = gf_quantity_parse(buf, (gf_qty_unit)unit, flags, &v, &d);
      if (rc != 0) {
        if (v != 0x5a5a5a5a || d.msg[0] == '\0')
          abort();
        continue;
      }
      if (!flags && v < 0)
        abort();
      /* The value in base units, printed plainly, parses back to itself. */
      char again[64];
      if (unit == GF_QTY_UNIT) {
        snprintf(again, sizeof(again), "%" PRId64, v);
        int64_t w;
        if (gf_quantity_parse(again, GF_QTY_UNIT, GF_QTY_SIGNED, &w, NULL) ||
            w != v)
          abort();
      } else {
        snprintf(again, sizeof(again), "%" PRId64 "m", v);
        int64_t w;
        if (gf_quantity_parse(again, GF_QTY_MILLI, GF_QTY_SIGNED, &w, NULL) ||
            w != v)
          abort();
      }
    }
  }
  int64_t x = 7;
  if (gf_parse_int64(buf, -1000, 1000, &x, NULL) == 0 &&
      (x < -1000 || x > 1000))
    abort();
  return 0;
}
