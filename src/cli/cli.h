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

#include <stdbool.h>

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

/* kube_cli.c, for the commands that read a cluster (kubectl gpufrac, doctor):
 * a client for the kubeconfig (kubeconfig, else $KUBECONFIG's first file,
 * else ~/.kube/config) and context (NULL: its current one); 0, or
 * GF_EXIT_FAIL with the reason printed after "prog: ".  Free *k with
 * gf_kube_free, then *kc with gf_kube_config_free. */
struct gf_kube_config;
struct gf_kube;
int gf__cli_kube_connect(const char *prog, const char *kubeconfig,
                         const char *context, struct gf_kube_config **kc,
                         struct gf_kube **k);
/* Whether s is a DNS-1123 label (a namespace's form: 1..63 of [a-z0-9-],
 * alphanumeric at both ends) or, with dots, a DNS-1123 subdomain (a pod
 * name's form: such labels joined by '.', 253 at most). */
bool gf__cli_k8s_name_ok(const char *s, bool dots);

/* data_dir.c: the bundled data directory (plan-example/, traces/, the node
 * types), found at run time so that no build path is compiled in:
 * $GPUFRAC_DATA when set, else the first of EXE/../share/gpufrac (an
 * install, the gpufrac-plan image), EXE/../data and EXE/../../data (a build
 * directory in or two below the source tree) that holds plan-example/ or
 * traces/; else /usr/share/gpufrac (what an error then names). */
const char *gf__cli_data_dir(void);

#endif
