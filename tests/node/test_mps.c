/*
 * The MPS control daemon's life under the agent, with a fake control
 * program (tests/node/fake_mps_control.sh): started with the GPU's
 * environment, restarted when it dies (not sooner than restart_ms), a
 * control program that cannot run reported, stopped with `quit`.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tmpdir.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpufrac/error.h"
#include "gpufrac/node.h"
#include "node_mps.h"

/* Every wait below is for a condition, polled, with this bound only so a
 * broken agent fails the test instead of hanging it. */
#define BOUND_MS 10000

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void poll_pause(void) {
  struct timespec ts = {0, 5 * 1000000L};
  nanosleep(&ts, NULL);
}

/* Waits for path to exist. */
static bool appears(const char *path) {
  struct stat st;
  for (long long end = now_ms() + BOUND_MS; now_ms() < end; poll_pause())
    if (stat(path, &st) == 0)
      return true;
  return false;
}

/* Checks m until the check returns want; the last result. */
static bool check_until(gf_node_mps *m, gf_diag *d, bool want) {
  bool up = !want;
  for (long long end = now_ms() + BOUND_MS; now_ms() < end && up != want;)
    if ((up = gf__node_mps_check(m, d)) != want)
      poll_pause();
  return up;
}

static int count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  int n = 0;
  char line[256];
  while (fgets(line, sizeof(line), f))
    n++;
  fclose(f);
  return n;
}

static gf_node_gpu one_gpu(void) {
  gf_node_gpus g;
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("1xH100-80GB", &g, &d), 0);
  return g.gpus[0];
}

static void test_lifecycle(void **state) {
  (void)state;
  gf_node_gpu gpu = one_gpu();
  char dir[300], pipe[400], path[500];
  snprintf(dir, sizeof(dir), "%s/mps", tmpdir);
  gf_node_mps_opts o = {FAKE_MPS_CONTROL, dir, 100, 2000};
  gf_node_mps *m = NULL;
  gf_diag d = {""};
  long long started = now_ms();
  assert_int_equal(gf__node_mps_start(&o, &gpu, &m, &d), 0);
  assert_true(gf__node_mps_pipe_path(dir, gpu.uuid, pipe, sizeof(pipe)));
  assert_string_equal(gf__node_mps_pipe_dir(m), pipe);
  snprintf(path, sizeof(path), "%s/running", pipe);
  assert_true(appears(path));
  assert_true(gf__node_mps_check(m, &d));
  /* The daemon saw this GPU only, and its log directory. */
  snprintf(path, sizeof(path), "%s/daemon.env", pipe);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char text[512] = "";
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = 0;
  char want[200];
  snprintf(want, sizeof(want), "CUDA_VISIBLE_DEVICES=%s\n", gpu.uuid);
  assert_non_null(strstr(text, want));
  assert_non_null(strstr(text, "CUDA_MPS_LOG_DIRECTORY="));
  /* The shared /dev/shm directory exists, sticky and world-writable. */
  struct stat st;
  snprintf(path, sizeof(path), "%s/shm", dir);
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 01777);

  /* Killed: found dead with the signal, started again after restart_ms. */
  pid_t pid = gf__node_mps_pid(m);
  assert_true(pid > 0);
  while (now_ms() - started <= o.restart_ms) /* past restart_ms since */
    poll_pause();                            /* the start */
  snprintf(path, sizeof(path), "%s/running", pipe);
  unlink(path);
  kill(pid, SIGKILL);
  /* The first check that finds it dead says how it died and restarts it
   * (restart_ms has passed); the daemon is up again after it. */
  d.msg[0] = 0;
  for (long long end = now_ms() + BOUND_MS;
       now_ms() < end && !strstr(d.msg, "died"); poll_pause())
    (void)gf__node_mps_check(m, &d);
  assert_non_null(strstr(d.msg, "died (signal 9)"));
  assert_true(check_until(m, &d, true));
  assert_int_equal(gf__node_mps_restarts(m), 1);
  assert_true(gf__node_mps_pid(m) != pid);
  assert_true(appears(path));
  snprintf(path, sizeof(path), "%s/starts", pipe);
  assert_int_equal(count_lines(path), 2);

  /* Stop: quit through the control program; the daemon ends by itself. */
  pid = gf__node_mps_pid(m);
  gf__node_mps_stop(m);
  gf__node_mps_free(m);
  snprintf(path, sizeof(path), "%s/commands", pipe);
  f = fopen(path, "r");
  assert_non_null(f);
  n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = 0;
  assert_string_equal(text, "quit\n");
  assert_int_not_equal(kill(pid, 0), 0); /* reaped, gone */
}

static void test_failures(void **state) {
  (void)state;
  gf_node_gpu gpu = one_gpu();
  char dir[300];
  snprintf(dir, sizeof(dir), "%s/mps", tmpdir);
  gf_diag d = {""};
  /* A control program that cannot run: exit 127, said so. */
  gf_node_mps_opts bad = {"/nonexistent/nvidia-cuda-mps-control", dir, 60000,
                          500};
  gf_node_mps *m = NULL;
  assert_int_equal(gf__node_mps_start(&bad, &gpu, &m, &d), 0);
  assert_false(check_until(m, &d, false));
  assert_non_null(strstr(d.msg, "exited with 127 (cannot run the control"));
  /* Not restarted before restart_ms. */
  assert_false(gf__node_mps_check(m, &d));
  assert_int_equal(gf__node_mps_restarts(m), 0);
  gf__node_mps_stop(m);
  gf__node_mps_free(m);
  /* A daemon that exits on its own with a code. */
  setenv("FAKE_MPS_EXIT", "3", 1);
  gf_node_mps_opts o = {FAKE_MPS_CONTROL, dir, 60000, 500};
  assert_int_equal(gf__node_mps_start(&o, &gpu, &m, &d), 0);
  assert_false(check_until(m, &d, false));
  assert_non_null(strstr(d.msg, "exited with 3"));
  unsetenv("FAKE_MPS_EXIT");
  gf__node_mps_stop(m);
  gf__node_mps_free(m);
  /* Bad options are refused with a sentence. */
  gf_node_mps_opts none = {NULL, dir, 0, 0};
  assert_int_equal(gf__node_mps_start(&none, &gpu, &m, &d), GF_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_lifecycle, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_failures, setup_tmp, teardown_tmp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
