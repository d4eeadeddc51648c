/* The sandbox ("pause") process of tests/e2e/test_node.py's pods, built
 * statically by the test into a one-file OCI image: it holds the pod's
 * namespaces, reaps the zombies a shared PID namespace hands it, and exits 0
 * on SIGINT or SIGTERM (what containerd sends to stop a sandbox). */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

static volatile sig_atomic_t stop;

static void on_stop(int sig) {
  (void)sig;
  stop = 1;
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction sa = {0};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
    perror("pause: sigaction");
    return 1;
  }
  sa.sa_handler = on_child;
  sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  if (sigaction(SIGCHLD, &sa, NULL) != 0) {
    perror("pause: sigaction");
    return 1;
  }
  /* Stop signals blocked except inside sigsuspend: one arriving between
   * the test of stop and the wait is not lost. */
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  if (sigprocmask(SIG_BLOCK, &block, &old) != 0) {
    perror("pause: sigprocmask");
    return 1;
  }
  while (!stop)
    sigsuspend(&old);
  return 0;
}
