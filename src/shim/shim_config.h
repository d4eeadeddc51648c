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
 *   memory.GPU-8c4e1b7a-0f2d-4c1e-9a3b-5d6e7f8a9b0c = 4Gi
 *                         limit on the GPU with that UUID, whatever its
 *                         index in this process (overrides both); a UUID
 *                         no visible device has is ignored, with one log line
 *   context_overhead = 300Mi   charged per CUDA context (0 = off)
 *   compute  = 30         percent of each GPU, 1..100
 *   compute.GPU-8c4e1b7a-0f2d-4c1e-9a3b-5d6e7f8a9b0c = 50
 *                         percent of the GPU with that UUID (overrides
 *                         compute there): each GPU its own bucket
 *   capacity = 1000000    kernel blocks per second a whole GPU admits;
 *                         when absent, derived from the devices at cuInit
 *                         (GF_SHIM_BLOCK_TURNOVER below)
 *   graph    = 64         blocks charged per cuGraphLaunch
 *   log      = warn       off | warn | info | debug
 *   enabled  = 1          0 turns the interposer into a pass-through
 *   libcuda  = /usr/lib/x86_64-linux-gnu/libcuda.so.1   the real driver
 *
 * Environment fallback: GPUFRAC_GPU_MEMORY, GPUFRAC_GPU_COMPUTE,
 * GPUFRAC_REGION, GPUFRAC_LOG, GPUFRAC_CONTEXT_OVERHEAD, GPUFRAC_REAL_LIBCUDA;
 * GPUFRAC_DISABLE=1 turns the interposer off whatever the file says.  In
 * the same fallback (never with the system file), HAMi-core's variables
 * where the GPUFRAC_ one of the same meaning is absent:
 * CUDA_DEVICE_MEMORY_LIMIT and CUDA_DEVICE_MEMORY_LIMIT_<i> (bytes, or a
 * number and k/m/g), CUDA_DEVICE_SM_LIMIT (percent; 0 = none),
 * GPU_CORE_UTILIZATION_POLICY (default|force|disable),
 * CUDA_DEVICE_MEMORY_SHARED_CACHE (the region path; unset, HAMi-core's
 * variables share GF_SHIM_HAMI_REGION), CUDA_DISABLE_CONTROL
 * (true or 1: pass-through).  docs/shim.md has the mapping.
 *
 * Outcome: ENFORCE with limits, OFF (no config at all, or disabled), or
 * REFUSE when a config exists but cannot be read or parsed: then every
 * device allocation fails with CUDA_ERROR_OUT_OF_MEMORY and one log line
 * says why.  A container meant to be limited never runs unlimited by
 * accident.
 */
#ifndef GPUFRAC_SHIM_CONFIG_H
#define GPUFRAC_SHIM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/contract.h"
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
  uint64_t memory[GF_REGION_DEVICES]; /* by the container's GPU index (the
                                         CUDA index without
                                         CUDA_VISIBLE_DEVICES); 0 =
                                         unlimited */
  /* memory.GPU-<uuid> lines in file order (lower-case, NVIDIA's format). */
  char uuid[GF_REGION_DEVICES][GF_REGION_UUID];
  uint64_t uuid_memory[GF_REGION_DEVICES];
  uint32_t nuuid;
  /* compute.GPU-<uuid> lines in file order (lower-case), 1..100 each. */
  char cuuid[GF_REGION_DEVICES][GF_REGION_UUID];
  uint32_t cuuid_compute[GF_REGION_DEVICES];
  uint32_t ncuuid;
  uint64_t context_overhead; /* bytes per CUDA context */
  bool capacity_set;         /* capacity given, not the default */
  uint32_t compute_pct;      /* 100 = unthrottled */
  uint64_t capacity;         /* blocks per second at 100% */
  uint64_t graph_cost;
  int log_level;
  /* The `memory` line (or CUDA_DEVICE_MEMORY_LIMIT) alone: the limit of a
   * GPU whose container index is not known (docs/shim.md). */
  uint64_t memory_all;
} gf_shim_config;

/* Capacity from the device when `capacity` is not configured - a model,
 * not a measurement: every resident-block slot of the GPU (SMs x
 * CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR) is assumed to turn
 * over GF_SHIM_BLOCK_TURNOVER times a second (a block holds its slot 4 ms
 * on average), summed over the visible devices.  250 puts a 132-SM H100 or
 * H200 at 1,056,000 blocks/s, the fixed default before.  The node agent's
 * utilisation feedback corrects it by a factor in [0.5, 2]; beyond that,
 * configure `capacity`.  docs/shim.md, "Compute". */
#define GF_SHIM_BLOCK_TURNOVER 250u

/* Default per-context charge: 300 MiB (docs/shim.md says why). */
#define GF_SHIM_CONTEXT_OVERHEAD (300ull << 20)

/* A GPU key's UUID is checked with gf_gpu_uuid_valid (gpufrac/contract.h),
 * the one check the node agent writes the config by. */

/* Parses config text (NUL-terminated); returns 0 or -1 with a message
 * naming the line in err. */
int gf__shim_config_parse(const char *text, gf_shim_config *c, char *err,
                          size_t errlen);

/* Loads the config as described above and decides the mode.  Never fails:
 * problems are logged once and reflected in *mode. */
void gf__shim_config_load(gf_shim_config *c, gf_shim_mode *mode);

#endif
