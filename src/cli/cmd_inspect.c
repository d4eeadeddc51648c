/* gpufrac inspect region [--reclaim] PATH: what a container's shared
 * region holds; with --reclaim, first frees the slots of processes that no
 * longer exist (the one thing it changes). */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gpufrac/region.h"
#include "parse_options.h"

static void bytes(char *buf, size_t n, uint64_t b) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", v, unit[u]);
}

int cmd_inspect(int argc, char **argv) {
  bool reclaim = false;
  const gf__opt table[] = {
      GF__OPT_FLAG("reclaim",
                   "first free the slots of processes that no longer exist "
                   "(what\nthe interposer does on its slow paths), and say "
                   "how many.",
                   &reclaim),
      GF__OPT_END(),
  };
  const gf__opt_cmd c = {
      .prog = "gpufrac inspect",
      .usage = "usage: gpufrac inspect region [--reclaim] PATH\n\n"
               "Prints a container's GPU accounting region: limits per "
               "device, the compute\nbucket, and each process's usage. "
               "Read-only: nothing is reclaimed or changed,\nso a dead "
               "process's slot shows as \"dead\" with its usage.\n\n",
      .opts = table,
      .operands = true,
  };
  /* "region" is the one thing inspect shows; the options follow it. */
  bool region = argc >= 2 && strcmp(argv[1], "region") == 0;
  int exit;
  int rest = gf__opt_parse(&c, argc - region, argv + region, &exit);
  if (rest < 0)
    return exit;
  if (!region || argc - region - rest != 1) {
    gf__opt_help(&c, stderr);
    return GF_EXIT_USAGE;
  }
  const char *path = argv[argc - 1];
  gf_region *r = NULL;
  gf_diag d = {""};
  if (gf_region_map(path, NULL, &r, &d)) {
    fprintf(stderr, "gpufrac inspect: %s\n", d.msg);
    return GF_EXIT_FAIL;
  }
  if (reclaim)
    printf("reclaimed %d slots of dead processes\n", gf_region_reap(r));
  char a[32], b[32];
  printf("region %s (version %u.%u)\n", path, r->major, r->minor);
  printf("compute: %u%%", r->compute_pct);
  if (r->compute_pct < 100) {
    printf(", bucket %lld of %llu tokens, refill %llu/s",
           (long long)atomic_load(&r->tokens),
           (unsigned long long)atomic_load(&r->burst),
           (unsigned long long)atomic_load(&r->rate));
    /* Minor 1: zero in a minor-0 region, which then reads as uncorrected. */
    uint32_t corr = atomic_load(&r->corr);
    printf(" x %u.%03u (of capacity %llu blocks/s)", corr ? corr / 1000 : 1,
           corr % 1000, (unsigned long long)atomic_load(&r->capacity));
    if (atomic_load(&r->util_seq))
      printf("; observed %u.%02u%%", atomic_load(&r->util_bp) / 100,
             atomic_load(&r->util_bp) % 100);
  }
  printf("\ndead processes reclaimed: %llu\n",
         (unsigned long long)atomic_load(&r->reaped));
  printf("\n%-6s %-40s %14s %14s\n", "device", "uuid", "limit", "in use");
  for (uint32_t dev = 0; dev < GF_REGION_DEVICES; dev++) {
    uint64_t used = gf_region_used(r, dev);
    if (!r->limit[dev] && !used)
      continue;
    bytes(a, sizeof(a), r->limit[dev]);
    bytes(b, sizeof(b), used);
    printf("%-6u %-40s %14s %14s\n", dev, r->uuid[dev][0] ? r->uuid[dev] : "-",
           r->limit[dev] ? a : "unlimited", b);
  }
  printf("\n%-5s %-8s %-6s %-6s %14s %12s %12s\n", "slot", "pid", "state",
         "device", "in use", "waits", "throttled");
  uint32_t hwm = atomic_load(&r->hwm);
  for (uint32_t i = 0; i < hwm && i < GF_REGION_SLOTS; i++) {
    gf_region_slot *s = &r->slots[i];
    int32_t pid = atomic_load(&s->pid);
    if (pid == 0)
      continue;
    const char *state = pid < 0             ? "reaping"
                        : kill(pid, 0) == 0 ? "alive"
                                            : "dead";
    for (uint32_t dev = 0; dev < GF_REGION_DEVICES; dev++) {
      uint64_t u = atomic_load(&s->used[dev]);
      if (!u && dev)
        continue;
      bytes(b, sizeof(b), u);
      printf("%-5u %-8d %-6s %-6u %14s %12llu %10.1f ms\n", i, (int)pid, state,
             dev, b, (unsigned long long)atomic_load(&s->waits),
             (double)atomic_load(&s->throttled_ns) / 1e6);
    }
  }
  gf_region_unmap(r);
  return fflush(stdout) == 0 ? GF_EXIT_OK : GF_EXIT_FAIL;
}
