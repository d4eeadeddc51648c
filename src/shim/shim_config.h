/*
 * The interposer's configuration: a small read-only file the node agent
 * writes and mounts at /etc/gpufrac/shim.conf.  When that file exists it is
 * the only source: GPUFRAC_CONFIG, GPUFRAC_DISABLE and the other variables
 * are ignored, so a container cannot lift its own limits.  Without it (e.g.
 * `gpufrac run`), GPUFRAC_CONFIG names a file, and environment variables
 * are the fallback.
 *
 *   # one "key = value" per line; '#' starts a comment
 *   version  = 1
 *   region   = /run/gpufrac/<pod-uid>/region   shared accounting file
 *   memory   = 8Gi        limit on every device
 *   memory.1 = 4Gi        limit on device 1 (overrides memory)
 *   compute  = 30         percent of each GPU, 1..100
 *   capacity = 1000000    kernel blocks per second a whole GPU admits
 *   graph    = 64         blocks charged per cuGraphLaunch
 *   log      = warn       off | warn | info | debug
 *   enabled  = 1          0 turns the interposer into a pass-through
 *   libcuda  = /usr/lib/x86_64-linux-gnu/libcuda.so.1   the real driver
 *
 * Environment fallback: GPUFRAC_GPU_MEMORY, GPUFRAC_GPU_COMPUTE,
 * GPUFRAC_REGION, GPUFRAC_LOG, GPUFRAC_REAL_LIBCUDA; GPUFRAC_DISABLE=1 turns
 * the interposer off whatever the file says.
 *
 * Outcome: ENFORCE with limits, OFF (no config at all, or disabled), or
 * REFUSE when a config exists but cannot be read or parsed: then every
 * device allocation fails with CUDA_ERROR_OUT_OF_MEMORY and one log line
 * says why.  A container meant to be limited never runs unlimited by
 * accident.
 */
#ifndef GPUFRAC_SHIM_CONFIG_H
#define GPUFRAC_SHIM_CONFIG_H

#include <stdint.h>

#include "gpufrac/region.h"

typedef enum gf_shim_mode {
  GF_SHIM_OFF = 0,
  GF_SHIM_ENFORCE = 1,
  GF_SHIM_REFUSE = 2,
} gf_shim_mode;

enum {
  GF_SHIM_LOG_OFF = 0,
  GF_SHIM_LOG_WARN = 1,
  GF_SHIM_LOG_INFO = 2,
  GF_SHIM_LOG_DEBUG = 3
};

typedef struct gf_shim_config {
  char region[512];
  char real_libcuda[512];
  uint64_t memory[GF_REGION_DEVICES]; /* 0 = unlimited */
  uint32_t compute_pct;               /* 100 = unthrottled */
  uint64_t capacity;                  /* blocks per second at 100% */
  uint64_t graph_cost;
  int log_level;
} gf_shim_config;

/* Parses config text (NUL-terminated); returns 0 or -1 with a message
 * naming the line in err. */
int gf_shim_config_parse(const char *text, gf_shim_config *c, char *err,
                         size_t errlen);

/* Loads the config as described above and decides the mode.  Never fails:
 * problems are logged once and reflected in *mode. */
void gf_shim_config_load(gf_shim_config *c, gf_shim_mode *mode);

#endif
