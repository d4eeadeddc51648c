/* gpufrac: entry point and the subcommand table. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const struct command {
  const char *name;
  int (*fn)(int argc, char **argv);
  const char *summary;
} commands[] = {
    {"simulate", cmd_simulate,
     "replay a GPU cluster trace under placement policies"},
    {"run", cmd_run, "run a command under GPU memory and compute limits"},
    {"inspect", cmd_inspect, "show a container's GPU accounting region"},
    {"scheduler", cmd_scheduler,
     "serve the kube-scheduler extender (filter, prioritize, bind)"},
    {"node", cmd_node, "the node agent: discover GPUs, CDI specs, metrics"},
    {"cache", cmd_cache, "the node-local weight cache: list, fetch, prefetch"},
    {"plan", cmd_plan, "what fractional GPUs would save on a cluster snapshot"},
    {"kubectl", cmd_kubectl,
     "the kubectl plugin: top, describe pod, why-pending (kubectl gpufrac)"},
    {"doctor", cmd_doctor,
     "check an install: agents, scheduler path, DRA, policies, grants"},
    {"completion", cmd_completion, "a bash or zsh completion script"},
    {"version", cmd_version, "print the version"},
    {"help", cmd_help, "list commands, or show one command's help"},
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const struct command *find(const char *name) {
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(commands[i].name, name) == 0)
      return &commands[i];
  return NULL;
}

static void usage(FILE *fp) {
  fprintf(fp, "usage: gpufrac <command> [options]\n\n"
              "gpufrac divides GPUs into shares and places pods on them.\n\n"
              "commands:\n");
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(fp, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(fp, "\n'gpufrac <command> --help' shows a command's options.\n");
}

static int cmd_help(int argc, char **argv) {
  if (argc > 2) {
    fprintf(stderr, "usage: gpufrac help [command]\n");
    return GF_EXIT_USAGE;
  }
  if (argc == 2 && strcmp(argv[1], "--help") != 0 &&
      strcmp(argv[1], "-h") != 0) {
    const struct command *c = find(argv[1]);
    if (!c) {
      fprintf(stderr, "gpufrac: no command '%s'\n", argv[1]);
      return GF_EXIT_USAGE;
    }
    char help[] = "--help";
    char *av[] = {argv[1], help, NULL};
    return c->fn(2, av);
  }
  usage(stdout);
  return GF_EXIT_OK;
}

static int cmd_version(int argc, char **argv) {
  if (argc == 2 &&
      (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: gpufrac version\n\nPrints the gpufrac version.\n");
    return GF_EXIT_OK;
  }
  if (argc != 1) {
    if (argv[1][0] == '-')
      fprintf(stderr, "gpufrac version: unknown option '%s'\n", argv[1]);
    else
      fprintf(stderr, "gpufrac version: unexpected argument '%s'\n", argv[1]);
    fprintf(stderr, "usage: gpufrac version\n");
    return GF_EXIT_USAGE;
  }
  printf("gpufrac %s\n", GF_VERSION);
  return GF_EXIT_OK;
}

int main(int argc, char **argv) {
  /* Called as kubectl-gpufrac (the symlink the build installs): kubectl
   * runs it for `kubectl gpufrac ...`, with the plugin's arguments. */
  const char *base = strrchr(argv[0], '/');
  base = base ? base + 1 : argv[0];
  if (strcmp(base, "kubectl-gpufrac") == 0)
    return cmd_kubectl(argc, argv);
  if (argc < 2) {
    usage(stderr);
    return GF_EXIT_USAGE;
  }
  const char *name = argv[1];
  if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)
    name = "help";
  else if (strcmp(name, "--version") == 0)
    name = "version";
  const struct command *c = find(name);
  if (!c) {
    fprintf(stderr, "gpufrac: '%s' is not a command; see 'gpufrac help'\n",
            argv[1]);
    return GF_EXIT_USAGE;
  }
  if (c->fn == cmd_help && argv[1][0] == '-')
    return cmd_help(1, argv + 1);
  return c->fn(argc - 1, argv + 1);
}
