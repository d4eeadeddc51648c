/*
 * Utilisation feedback (node_feedback.h): which number reaches
 * which container's region.  Containers are made as Allocate makes them
 * (gf_node_prepare_container) with a region as the interposer makes it;
 * process-to-pod mapping reads a fake /proc tree.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tmpdir.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/node.h"
#include "gpufrac/region.h"
#include "node_feedback.h"

#define POD_A "0a1b2c3d-0000-4000-8000-00000000000a"
#define POD_B "0a1b2c3d-0000-4000-8000-00000000000b"
#define POD_C "0a1b2c3d-0000-4000-8000-00000000000c"
#define GPU_X "GPU-00000000-1111-2222-3333-000000000000"
#define GPU_Y "GPU-00000000-1111-2222-3333-000000000001"

static void container(const char *uid, const char *uuid) {
  gf_grant_container c;
  memset(&c, 0, sizeof(c));
  snprintf(c.name, sizeof(c.name), "main");
  c.ngpus = 1;
  snprintf(c.gpus[0].uuid, sizeof(c.gpus[0].uuid), "%s", uuid);
  c.gpus[0].mem_bytes = 1 << 30;
  c.gpus[0].compute_pct = 30;
  char state[300];
  snprintf(state, sizeof(state), "%s/state", tmpdir);
  gf_node_ctr_paths p;
  gf_diag d = {""};
  assert_int_equal(gf_node_prepare_container(state, uid, &c, "warn", &p, &d),
                   0);
  char path[600];
  snprintf(path, sizeof(path), "%s/region", p.region_dir);
  gf_region_limits lim = {.ndevices = 1, .compute_pct = 30};
  lim.limit[0] = 1 << 30;
  gf_region *r = NULL;
  assert_int_equal(gf_region_map(path, &lim, &r, &d), 0);
  gf_region_unmap(r);
}

static uint32_t observed(const char *uid) {
  char path[600];
  snprintf(path, sizeof(path), "%s/state/pods/%s/main/region/region", tmpdir,
           uid);
  gf_region *r = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_region_map(path, NULL, &r, &d), 0);
  uint32_t bp = atomic_load(&r->util_bp);
  gf_region_unmap(r);
  return bp;
}

/* <tmp>/proc/<pid>/cgroup naming pod uid (systemd style when slice). */
static void proc_pid(unsigned pid, const char *uid, bool slice) {
  char dir[400], path[500];
  snprintf(dir, sizeof(dir), "%s/proc/%u", tmpdir, pid);
  mkdir(dir, 0755); /* may exist */
  snprintf(path, sizeof(path), "%s/cgroup", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  if (slice) {
    char u[64];
    snprintf(u, sizeof(u), "%s", uid);
    for (char *c = u; *c; c++)
      if (*c == '-')
        *c = '_';
    fprintf(f,
            "0::/kubepods.slice/kubepods-burstable.slice/"
            "kubepods-burstable-pod%s.slice/cri-containerd-1a2b.scope\n",
            u);
  } else {
    fprintf(f, "12:memory:/kubepods/besteffort/pod%s/1a2b3c\n", uid);
  }
  fclose(f);
}

static void test_pid_pod(void **state) {
  (void)state;
  char proc[300], uid[64];
  snprintf(proc, sizeof(proc), "%s/proc", tmpdir);
  mkdir(proc, 0755);
  proc_pid(10, POD_A, true);
  proc_pid(11, POD_B, false);
  assert_true(gf__node_pid_pod(proc, 10, uid, sizeof(uid)));
  assert_string_equal(uid, POD_A);
  assert_true(gf__node_pid_pod(proc, 11, uid, sizeof(uid)));
  assert_string_equal(uid, POD_B);
  assert_false(gf__node_pid_pod(proc, 12, uid, sizeof(uid))); /* no such pid */
}

static void test_feedback(void **state) {
  (void)state;
  char proc[300], st[300];
  snprintf(proc, sizeof(proc), "%s/proc", tmpdir);
  snprintf(st, sizeof(st), "%s/state", tmpdir);
  mkdir(proc, 0755);
  container(POD_A, GPU_X);
  container(POD_B, GPU_X);
  container(POD_C, GPU_Y);
  gf_node_gpus g;
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("2xA100-80GB", &g, &d), 0);
  snprintf(g.gpus[0].uuid, sizeof(g.gpus[0].uuid), GPU_X);
  snprintf(g.gpus[1].uuid, sizeof(g.gpus[1].uuid), GPU_Y);
  g.gpus[0].util_pct = 90;
  g.gpus[1].util_pct = 42;

  /* No process samples: the GPU that one container holds (Y) is measured
   * by the GPU; the shared one (X) cannot be split, so A and B get
   * nothing. */
  assert_int_equal(gf__node_feedback(st, proc, &g, NULL, 0), 1);
  assert_int_equal(observed(POD_C), 4200);
  assert_int_equal(observed(POD_A), 0);
  assert_int_equal(observed(POD_B), 0);

  /* Process samples on X: A's two processes add up, B has its own. */
  proc_pid(100, POD_A, true);
  proc_pid(101, POD_A, false);
  proc_pid(200, POD_B, true);
  gf_node_proc_util s[] = {
      {100, GPU_X, 20}, {101, GPU_X, 15}, {200, GPU_X, 50}, {999, GPU_X, 5}};
  assert_int_equal(gf__node_feedback(st, proc, &g, s, 4), 3);
  assert_int_equal(observed(POD_A), 3500);
  assert_int_equal(observed(POD_B), 5000);
  assert_int_equal(observed(POD_C), 4200);

  /* Samples whose pids cannot be placed (no host /proc): as if none. */
  g.gpus[1].util_pct = 10;
  gf_node_proc_util lost[] = {{555, GPU_Y, 70}};
  assert_int_equal(gf__node_feedback(st, proc, &g, lost, 1), 1);
  assert_int_equal(observed(POD_C), 1000);

  /* A region that is a symbolic link is not followed or written. */
  char link[600], target[400];
  snprintf(link, sizeof(link), "%s/pods/%s/main/region/region", st, POD_C);
  snprintf(target, sizeof(target), "%s/elsewhere", tmpdir);
  rename(link, target);
  assert_int_equal(symlink(target, link), 0);
  assert_int_equal(gf__node_feedback(st, proc, &g, NULL, 0), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_pid_pod, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_feedback, setup_tmp, teardown_tmp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
