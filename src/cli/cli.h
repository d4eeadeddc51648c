/*
 * The gpufrac command line: one dispatch table (main.c) of git-style
 * subcommands.  Each command is `int cmd_x(int argc, char **argv)` with argv[0]
 * the command's own name, and returns an exit code: 0 ok, 1 runtime failure,
 * 2 usage error.  To add a command: write cmd_x in its own file, its options
 * a table for the one parser (parse_options.h), declare it here, add one
 * row to the table in main.c and the file to the gpufrac executable in the
 * top-level CMakeLists.txt (CONTRIBUTING.md, "Add a command").
 */
#ifndef GPUFRAC_CLI_H
#define GPUFRAC_CLI_H

enum { GF_EXIT_OK = 0, GF_EXIT_FAIL = 1, GF_EXIT_USAGE = 2 };

int cmd_simulate(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_scheduler(int argc, char **argv);
int cmd_node(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_kubectl(int argc, char **argv); /* also run as kubectl-gpufrac */
int cmd_cache(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_completion(int argc, char **argv);

#endif
