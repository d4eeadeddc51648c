/* The option parser on many short options that store themselves (issue 26
 * review): they are taken in a loop, so 150,000 of them parse in a thread
 * with a 1 MiB stack.  Built at -O0 without sibling-call optimisation, so a
 * parser that recursed once per argument would overflow that stack here
 * whatever the build type. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "parse_options.h"

#define N 150000

static bool all;
static const char *out;
static int rc, ex;

static void *parse(void *argv) {
  const gf__opt opts[] = {
      GF__OPT_SHORT_FLAG('A', "all", "all of them", &all),
      GF__OPT_SHORT_STRING('o', "output", "FMT", "a format", &out),
      GF__OPT_END(),
  };
  const gf__opt_cmd cmd = {.prog = "t", .usage = "usage: t\n", .opts = opts};
  rc = gf__opt_parse(&cmd, N + 3, argv, &ex);
  return NULL;
}

int main(void) {
  char **argv = calloc(N + 4, sizeof(*argv));
  if (!argv)
    return 1;
  argv[0] = "t";
  for (int i = 1; i <= N; i++)
    argv[i] = "-A";
  argv[N + 1] = "-o";
  argv[N + 2] = "json";
  pthread_attr_t attr;
  pthread_t t;
  if (pthread_attr_init(&attr) ||
      pthread_attr_setstacksize(&attr, (size_t)1 << 20) ||
      pthread_create(&t, &attr, parse, argv) || pthread_join(t, NULL))
    return 1;
  free(argv);
  if (rc != N + 3 || ex != 0 || !all || !out || out[0] != 'j') {
    fprintf(stderr, "FAIL: rc %d exit %d all %d out %s\n", rc, ex, all,
            out ? out : "(null)");
    return 1;
  }
  printf("ok: %d short options parsed on a 1 MiB stack\n", N);
  return 0;
}
