/*
 * gpufrac run: the container's isolation without Kubernetes.  Writes a shim
 * config and a fresh accounting region in a private temporary directory,
 * preloads libgpufrac-cuda.so into the command and everything it starts,
 * and removes the directory when the command ends.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "gpufrac/quantity.h"
#include "parse_options.h"

/* Writes dir + suffix into buf; false if it does not fit. */
static bool join(char *buf, size_t n, const char *dir, const char *suffix) {
  size_t a = strlen(dir), b = strlen(suffix);
  if (a + b + 1 > n)
    return false;
  memcpy(buf, dir, a);
  memcpy(buf + a, suffix, b + 1);
  return true;
}

static const char *find_shim(char *buf, size_t n) {
  const char *env = getenv("GPUFRAC_SHIM");
  if (env && access(env, R_OK) == 0)
    return env;
  char self[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len > 0) {
    self[len] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = '\0';
      if (join(buf, n, self, "/../lib/gpufrac/libgpufrac-cuda.so") &&
          access(buf, R_OK) == 0)
        return buf;
      if (join(buf, n, self, "/src/shim/libgpufrac-cuda.so") &&
          access(buf, R_OK) == 0)
        return buf;
    }
  }
  return NULL;
}

enum { OPT_MEMORY = 1, OPT_COMPUTE, OPT_GPU };

static const gf__opt run_opts[] = {
    GF__OPT_STRING_ID("gpu-memory", "SIZE",
                      "device memory per GPU for all of CMD's processes\n"
                      "(e.g. 8Gi; default: unlimited)",
                      OPT_MEMORY),
    GF__OPT_STRING_ID("gpu-compute", "PCT",
                      "percent of each GPU's kernel time, 1..100\n"
                      "(default 100)",
                      OPT_COMPUTE),
    GF__OPT_STRING_ID("gpu", "UUID", "restrict CMD to that GPU", OPT_GPU),
    GF__OPT_END(),
};

static const gf__opt_cmd run_cmd = {
    .prog = "gpufrac run",
    .usage = "usage: gpufrac run [--gpu-memory SIZE] [--gpu-compute PCT] "
             "[--gpu UUID] -- CMD [ARGS...]\n\n"
             "Runs CMD with its GPU memory limited to SIZE (e.g. 8Gi) per "
             "device and its\nkernel launches to PCT percent of each GPU, "
             "through libgpufrac-cuda.so.\nAll of CMD's processes share the "
             "limits.  --gpu UUID restricts CMD to that GPU.\n"
             "The interposer is looked up in GPUFRAC_SHIM, next to this "
             "binary\n(../lib/gpufrac/), then in the build tree.\n\n",
    .opts = run_opts,
    .dashdash = true,
};

/* The options; the index of CMD, or -1 with *exit set. */
static int run_parse(int argc, char **argv, int64_t *bytes, int64_t *compute,
                     const char **gpu, int *exit) {
  gf__opt_iter it;
  gf__opt_iter_init(&it, &run_cmd, argc, argv);
  const char *v;
  int id;
  *exit = GF_EXIT_USAGE;
  while ((id = gf__opt_next(&it, &v)) > 0) {
    gf_diag d = {""};
    if (id == OPT_GPU) {
      *gpu = v;
    } else if (id == OPT_MEMORY &&
               (gf_quantity_bytes(v, bytes, &d) || *bytes <= 0)) {
      fprintf(stderr, "gpufrac run: --gpu-memory: %s\n",
              d.msg[0] ? d.msg : "must be positive");
      return -1;
    } else if (id == OPT_COMPUTE && gf_parse_int64(v, 1, 100, compute, &d)) {
      fprintf(stderr, "gpufrac run: --gpu-compute: %s\n", d.msg);
      return -1;
    }
  }
  *exit = it.exit;
  if (id < 0)
    return -1;
  if (it.rest >= argc) {
    gf__opt_help(&run_cmd, stderr);
    *exit = GF_EXIT_USAGE;
    return -1;
  }
  return it.rest;
}

int cmd_run(int argc, char **argv) {
  const char *gpu = NULL;
  int64_t bytes = 0, compute = 100;
  int exit;
  int i = run_parse(argc, argv, &bytes, &compute, &gpu, &exit);
  if (i < 0)
    return exit;
  char shim_buf[PATH_MAX];
  const char *shim = find_shim(shim_buf, sizeof(shim_buf));
  if (!shim) {
    fprintf(stderr, "gpufrac run: libgpufrac-cuda.so not found (set "
                    "GPUFRAC_SHIM)\n");
    return GF_EXIT_FAIL;
  }
  const char *tmpdir = getenv("TMPDIR");
  char dir[PATH_MAX], conf[PATH_MAX + 16], region[PATH_MAX + 16];
  if (!join(dir, sizeof(dir), tmpdir && *tmpdir ? tmpdir : "/tmp",
            "/gpufrac-run-XXXXXX")) {
    fprintf(stderr, "gpufrac run: TMPDIR too long\n");
    return GF_EXIT_FAIL;
  }
  if (!mkdtemp(dir)) {
    fprintf(stderr, "gpufrac run: %s: %s\n", dir, strerror(errno));
    return GF_EXIT_FAIL;
  }
  snprintf(conf, sizeof(conf), "%s/shim.conf", dir);
  snprintf(region, sizeof(region), "%s/region", dir);
  FILE *fp = fopen(conf, "w");
  int rc = GF_EXIT_FAIL;
  if (!fp) {
    fprintf(stderr, "gpufrac run: %s: %s\n", conf, strerror(errno));
    goto out;
  }
  fprintf(fp, "# written by gpufrac run\nversion = 1\nregion = %s\n", region);
  if (bytes)
    fprintf(fp, "memory = %lld\n", (long long)bytes);
  fprintf(fp, "compute = %lld\n", (long long)compute);
  /* The interposer reads only this file: pass the one setting it takes from
   * the environment otherwise (checked by the interposer's parser). */
  const char *ovh = getenv("GPUFRAC_CONTEXT_OVERHEAD");
  if (ovh && *ovh && !strchr(ovh, '\n'))
    fprintf(fp, "context_overhead = %s\n", ovh);
  if (fclose(fp) != 0) {
    fprintf(stderr, "gpufrac run: %s: write failed\n", conf);
    goto out;
  }
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "gpufrac run: fork: %s\n", strerror(errno));
    goto out;
  }
  if (pid == 0) {
    char preload[2 * PATH_MAX];
    const char *old = getenv("LD_PRELOAD");
    snprintf(preload, sizeof(preload), "%s%s%s", shim, old && *old ? " " : "",
             old && *old ? old : "");
    setenv("LD_PRELOAD", preload, 1);
    setenv("GPUFRAC_CONFIG", conf, 1);
    if (gpu)
      setenv("CUDA_VISIBLE_DEVICES", gpu, 1);
    execvp(argv[i], &argv[i]);
    fprintf(stderr, "gpufrac run: %s: %s\n", argv[i], strerror(errno));
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
out:
  unlink(conf);
  unlink(region);
  rmdir(dir);
  return rc;
}
