/* libFuzzer target: the interposer's config parser (src/shim/shim_config.c).
 * The file is written by the node agent but may be corrupted; parsing it
 * must never crash, and what it accepts must be within the documented
 * ranges.  The input is the file's text up to its first NUL, as
 * gf__shim_config_load reads it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shim_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 65536) /* CONFIG_MAX: gf__shim_config_load reads no more */
    return 0;
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  gf_shim_config c;
  char err[512] = "";
  int rc = gf__shim_config_parse(text, &c, err, sizeof(err));
  free(text);
  if (rc < 0) {
    if (!err[0] || !memchr(err, '\0', sizeof(err)))
      abort();
    return 0;
  }
  if (rc > 1 || c.compute_pct < 1 || c.compute_pct > 100 || c.capacity < 1 ||
      c.graph_cost < 1 || c.log_level < GF_SHIM_LOG_OFF ||
      c.log_level > GF_SHIM_LOG_DEBUG || c.nuuid > GF_REGION_DEVICES ||
      c.ncuuid > GF_REGION_DEVICES)
    abort();
  for (uint32_t i = 0; i < c.ncuuid; i++) {
    if (!gf_gpu_uuid_valid(c.cuuid[i]) || c.cuuid_compute[i] < 1 ||
        c.cuuid_compute[i] > 100)
      abort();
    for (uint32_t k = 0; k < i; k++)
      if (!strcmp(c.cuuid[k], c.cuuid[i]))
        abort(); /* one entry per GPU */
  }
  if ((c.region[0] && c.region[0] != '/') ||
      !memchr(c.region, '\0', sizeof(c.region)) ||
      (c.real_libcuda[0] && c.real_libcuda[0] != '/') ||
      !memchr(c.real_libcuda, '\0', sizeof(c.real_libcuda)))
    abort();
  for (uint32_t i = 0; i < c.nuuid; i++) {
    if (!gf_gpu_uuid_valid(c.uuid[i]))
      abort();
    for (const char *p = c.uuid[i]; *p; p++)
      if (*p >= 'A' && *p <= 'F')
        abort(); /* kept lower-case, NVIDIA's format */
    for (uint32_t k = 0; k < i; k++)
      if (!strcmp(c.uuid[k], c.uuid[i]))
        abort(); /* one entry per GPU */
  }
  return 0;
}
