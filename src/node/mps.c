/*
 * The MPS control daemon of a GPU in mode mps (node_mps.h): started
 * in the foreground as the agent's child, restarted when it dies, stopped
 * with `quit`.
 */
#define _GNU_SOURCE /* execvpe */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "node_mps.h"
#include "node_util.h"

extern char **environ;

#define ENV_MAX 256 /* variables passed on; more are dropped */

struct gf_node_mps {
  char control[GF_NODE_PATH_MAX];
  char uuid[GF_UUID_MAX];
  char pipe[GF_NODE_PATH_MAX], log[GF_NODE_PATH_MAX];
  char env_cvd[GF_UUID_MAX + 32];
  char env_pipe[GF_NODE_PATH_MAX + 32], env_log[GF_NODE_PATH_MAX + 32];
  long restart_ms, stop_ms;
  pid_t pid;
  int64_t started_ms;
  uint32_t restarts;
};

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

bool gf__node_mps_pipe_path(const char *dir, const char *uuid, char *buf,
                            size_t cap) {
  int w = snprintf(buf, cap, "%s/%s/pipe", dir, uuid);
  return w > 0 && (size_t)w < cap;
}

bool gf__node_mps_shm_path(const char *dir, char *buf, size_t cap) {
  int w = snprintf(buf, cap, "%s/shm", dir);
  return w > 0 && (size_t)w < cap;
}

/* The environment for the daemon and for control clients: ours, with the
 * three MPS variables replaced.  Built before fork (no allocation after). */
static void build_env(const gf_node_mps *m, char **envp) {
  size_t n = 0;
  static const char *const ours[] = {
      "CUDA_VISIBLE_DEVICES=", "CUDA_MPS_PIPE_DIRECTORY=",
      "CUDA_MPS_LOG_DIRECTORY="};
  for (char **e = environ; *e && n < ENV_MAX - 4; e++) {
    bool skip = false;
    for (size_t k = 0; k < 3; k++)
      skip |= strncmp(*e, ours[k], strlen(ours[k])) == 0;
    if (!skip)
      envp[n++] = *e;
  }
  envp[n++] = (char *)m->env_cvd;
  envp[n++] = (char *)m->env_pipe;
  envp[n++] = (char *)m->env_log;
  envp[n] = NULL;
}

/* Starts `control [arg]` with the MPS environment; stdin from in_fd (-1:
 * /dev/null).  Returns the child's pid or -1. */
static pid_t spawn(const gf_node_mps *m, const char *arg, int in_fd) {
  char *envp[ENV_MAX];
  build_env(m, envp);
  char *argv[3] = {(char *)m->control, (char *)arg, NULL};
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  /* The child: only async-signal-safe calls until exec. */
  int fd = in_fd >= 0 ? in_fd : open("/dev/null", O_RDONLY);
  if (fd >= 0 && fd != 0) {
    dup2(fd, 0);
    close(fd);
  }
  /* Nothing else of the agent's (sockets, the pipe's write end) leaks into
   * the daemon or keeps a client's stdin from ending. */
  close_range(3, ~0U, 0);
  setpgid(0, 0); /* the agent's terminal signals are the agent's */
  if (strchr(m->control, '/'))
    execve(m->control, argv, envp);
  else
    execvpe(m->control, argv, envp);
  _exit(127);
}

static int start_daemon(gf_node_mps *m, gf_diag *d) {
  pid_t pid = spawn(m, "-f", -1);
  if (pid < 0)
    return gf_diag_set(d, GF_EIO, "MPS daemon for %s: fork: %s", m->uuid,
                       strerror(errno));
  m->pid = pid;
  m->started_ms = now_ms();
  return 0;
}

int gf__node_mps_start(const gf_node_mps_opts *o, const gf_node_gpu *gpu,
                       gf_node_mps **out, gf_diag *d) {
  if (!o || !o->control || !*o->control || !o->dir || !*o->dir || !gpu->uuid[0])
    return gf_diag_set(d, GF_EINVAL,
                       "MPS: control program, directory and a "
                       "GPU uuid are required");
  gf_node_mps *m = gf__calloc(1, sizeof(*m));
  if (!m)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  gf__node_copy(m->control, sizeof(m->control), o->control);
  gf__node_copy(m->uuid, sizeof(m->uuid), gpu->uuid);
  m->restart_ms = o->restart_ms > 0 ? o->restart_ms : 5000;
  m->stop_ms = o->stop_ms > 0 ? o->stop_ms : 5000;
  char shm[GF_NODE_PATH_MAX];
  int w = snprintf(m->log, sizeof(m->log), "%s/%s/log", o->dir, gpu->uuid);
  if (!gf__node_mps_pipe_path(o->dir, gpu->uuid, m->pipe, sizeof(m->pipe)) ||
      w < 0 || (size_t)w >= sizeof(m->log) ||
      !gf__node_mps_shm_path(o->dir, shm, sizeof(shm))) {
    gf__free(m);
    return gf_diag_set(d, GF_ELIMIT, "MPS: directory '%s' too long", o->dir);
  }
  int rc = gf__node_mkdirs(m->pipe, 0755, d);
  if (!rc)
    rc = gf__node_mkdirs(m->log, 0755, d);
  if (!rc)
    rc = gf__node_mkdirs(shm, 01777, d);
  if (!rc && chmod(shm, 01777) != 0)
    rc = gf_diag_set(d, GF_EIO, "%s: %s", shm, strerror(errno));
  if (rc) {
    gf__free(m);
    return rc;
  }
  snprintf(m->env_cvd, sizeof(m->env_cvd), "CUDA_VISIBLE_DEVICES=%s",
           gpu->uuid);
  snprintf(m->env_pipe, sizeof(m->env_pipe), "CUDA_MPS_PIPE_DIRECTORY=%s",
           m->pipe);
  snprintf(m->env_log, sizeof(m->env_log), "CUDA_MPS_LOG_DIRECTORY=%s", m->log);
  if ((rc = start_daemon(m, d))) {
    gf__free(m);
    return rc;
  }
  *out = m;
  return 0;
}

bool gf__node_mps_check(gf_node_mps *m, gf_diag *d) {
  if (m->pid > 0) {
    int status = 0;
    pid_t r = waitpid(m->pid, &status, WNOHANG);
    if (r == 0)
      return true;
    if (WIFEXITED(status))
      gf_diag_set(d, GF_EIO, "MPS daemon for %s exited with %d%s", m->uuid,
                  WEXITSTATUS(status),
                  WEXITSTATUS(status) == 127 ? " (cannot run the control "
                                               "program?)"
                                             : "");
    else
      gf_diag_set(d, GF_EIO, "MPS daemon for %s died (signal %d)", m->uuid,
                  WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    m->pid = 0;
  }
  if (now_ms() - m->started_ms < m->restart_ms)
    return false;
  gf_diag sd = {""};
  if (start_daemon(m, &sd))
    return false;
  m->restarts++;
  return true;
}

pid_t gf__node_mps_pid(const gf_node_mps *m) { return m->pid; }
uint32_t gf__node_mps_restarts(const gf_node_mps *m) { return m->restarts; }
const char *gf__node_mps_pipe_dir(const gf_node_mps *m) { return m->pipe; }

/* Waits up to ms for pid; true when it was reaped. */
static bool wait_for(pid_t pid, long ms) {
  for (long t = 0;; t += 10) {
    pid_t r = waitpid(pid, NULL, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD))
      return true;
    if (t >= ms)
      return false;
    nap_ms(10);
  }
}

void gf__node_mps_stop(gf_node_mps *m) {
  if (!m)
    return;
  if (m->pid > 0) {
    int p[2];
    if (pipe(p) == 0) {
      pid_t c = spawn(m, NULL, p[0]);
      close(p[0]);
      static const char quit[] = "quit\n";
      ssize_t wr = write(p[1], quit, sizeof(quit) - 1);
      (void)wr; /* a client that is gone is handled by the signals below */
      close(p[1]);
      if (c > 0 && !wait_for(c, m->stop_ms)) {
        kill(c, SIGKILL);
        wait_for(c, 1000);
      }
    }
    if (!wait_for(m->pid, m->stop_ms)) {
      kill(m->pid, SIGTERM);
      if (!wait_for(m->pid, 1000)) {
        kill(m->pid, SIGKILL);
        wait_for(m->pid, 1000);
      }
    }
  }
  m->pid = 0; /* stopped: a second stop has nothing to quit */
}

void gf__node_mps_free(gf_node_mps *m) {
  gf__node_mps_stop(m);
  gf__free(m);
}
