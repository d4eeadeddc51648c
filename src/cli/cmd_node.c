/*
 * gpufrac node: the node agent.  It discovers the GPUs (NVML or
 * --fake-gpus), applies the node config, writes the node's CDI spec,
 * publishes the inventory and serves kubelet's device plugin (Allocate
 * answered from the pod's grant) when there is an API server, and serves
 * /metrics and /healthz; --once --print shows one document and exits
 * (docs/node.md).  This file parses the options; the agent itself is
 * src/node/agent.c (gpufrac/node_agent.h).
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gpufrac/error.h"
#include "gpufrac/node.h"
#include "gpufrac/node_agent.h"
#include "gpufrac/quantity.h"
#include "parse_options.h"

/* The command line: the agent's options plus what --once does. */
typedef struct opts {
  gf_node_agent_opts a;
  const char *config, *state_dir, *cdi_dir, *listen, *print;
  bool once, write_cdi;
} opts;

enum { OPT_MODE = 1, OPT_INTERVAL, OPT_CAPACITY };

static int parse(opts *o, int argc, char **argv, int *exit) {
  const gf__opt table[] = {
      GF__OPT_STRING("fake-gpus", "SPEC",
                     "no NVML: COUNTxMODEL-MEMORY[,...], e.g. 8xH100-80GB",
                     &o->a.fake),
      GF__OPT_STRING("nvml", "PATH", "NVML library (default libnvidia-ml.so.1)",
                     &o->a.nvml),
      GF__OPT_STRING("config", "FILE",
                     "node config (key = value; docs/node.md)", &o->config),
      GF__OPT_STRING("state-dir", "DIR",
                     "per-container files (default /run/gpufrac)",
                     &o->state_dir),
      GF__OPT_STRING("cdi-dir", "DIR",
                     "where CDI specs go (default /var/run/cdi)", &o->cdi_dir),
      GF__OPT_STRING("listen", "ADDR:PORT",
                     "metrics address (default 0.0.0.0:9473)", &o->listen),
      GF__OPT_STRING_ID("interval", "SEC",
                        "rediscovery period, 1..3600 (default 30)",
                        OPT_INTERVAL),
      GF__OPT_STRING("node-name", "NAME", "this node (default $NODE_NAME)",
                     &o->a.node_name),
      GF__OPT_STRING("kubeconfig", "PATH",
                     "API server from a kubeconfig (default: the\n"
                     "in-cluster service account when in a pod)",
                     &o->a.kubeconfig),
      GF__OPT_FLAG("no-kube",
                   "no API server: no inventory annotation, no\n"
                   "pods to answer Allocate for",
                   &o->a.no_kube),
      GF__OPT_STRING_ID("mode", "MODE",
                        "how kubelet gets the GPUs: device-plugin\n"
                        "(default) or dra (a DRA driver, " GF_NODE_DRA_DRIVER
                        ":\n"
                        "ResourceSlices and NodePrepareResources;\n"
                        "docs/dra-node.md)",
                        OPT_MODE),
      GF__OPT_STRING_ID("advertise-capacity", "BOOL",
                        "true (default) or false: gpufrac.io/gpu-memory\n"
                        "and gpu-compute in the Node's status capacity\n"
                        "(device-plugin mode; docs/kube.md)",
                        OPT_CAPACITY),
      GF__OPT_FLAG("once", "do one pass and exit", &o->once),
      GF__OPT_STRING("print", "WHAT",
                     "with --once: gpus | inventory | cdi | metrics |\n"
                     "slices (the DRA ResourceSlices, needs the\n"
                     "node name)",
                     &o->print),
      GF__OPT_FLAG("write-cdi", "with --once: also write the CDI spec",
                   &o->write_cdi),
      GF__OPT_END(),
  };
  const gf__opt_cmd cmd = {
      .prog = "gpufrac node",
      .usage = "usage: gpufrac node [options]\n\n"
               "Discovers this node's GPUs, writes their CDI spec and serves\n"
               "Prometheus metrics until SIGINT or SIGTERM.\n\n",
      .footer = "\nexit codes: 0 ok, 1 failure, 2 usage error\n",
      .opts = table,
  };
  gf__opt_iter it;
  gf__opt_iter_init(&it, &cmd, argc, argv);
  const char *v;
  int id;
  while ((id = gf__opt_next(&it, &v)) > 0) {
    gf_diag d = {""};
    if (id == OPT_MODE && strcmp(v, "dra") && strcmp(v, "device-plugin")) {
      *exit = gf__opt_usage_error(&cmd,
                                  "--mode '%s': want device-plugin or "
                                  "dra",
                                  v);
      return -1;
    }
    if (id == OPT_CAPACITY && strcmp(v, "true") && strcmp(v, "false")) {
      *exit = gf__opt_usage_error(&cmd,
                                  "--advertise-capacity '%s': want true or "
                                  "false",
                                  v);
      return -1;
    }
    if (id == OPT_MODE)
      o->a.dra = strcmp(v, "dra") == 0;
    else if (id == OPT_CAPACITY)
      o->a.no_capacity = strcmp(v, "false") == 0;
    else if (gf_parse_int64(v, 1, 3600, &o->a.interval, &d)) {
      *exit = gf__opt_usage_error(&cmd, "--interval: %s", d.msg);
      return -1;
    }
  }
  *exit = it.exit;
  return id;
}

int cmd_node(int argc, char **argv) {
  opts o;
  memset(&o, 0, sizeof(o));
  o.a.interval = 30;
  int exit;
  if (parse(&o, argc, argv, &exit))
    return exit;
  if (o.a.no_kube && o.a.kubeconfig) {
    fprintf(stderr, "gpufrac node: --no-kube and --kubeconfig exclude each "
                    "other\n");
    return GF_EXIT_USAGE;
  }
  if (o.a.dra && o.a.no_kube) {
    fprintf(stderr, "gpufrac node: --mode dra needs the API server; it "
                    "excludes --no-kube\n");
    return GF_EXIT_USAGE;
  }
  if (o.a.fake && o.a.nvml) {
    fprintf(stderr, "gpufrac node: --fake-gpus and --nvml exclude each "
                    "other\n");
    return GF_EXIT_USAGE;
  }
  if (o.print && strcmp(o.print, "gpus") && strcmp(o.print, "inventory") &&
      strcmp(o.print, "cdi") && strcmp(o.print, "metrics") &&
      strcmp(o.print, "slices")) {
    fprintf(stderr,
            "gpufrac node: --print '%s': want gpus, inventory, cdi, metrics "
            "or slices\n",
            o.print);
    return GF_EXIT_USAGE;
  }
  if ((o.print || o.write_cdi) && !o.once) {
    fprintf(stderr, "gpufrac node: --print and --write-cdi need --once\n");
    return GF_EXIT_USAGE;
  }
  gf_node_config cfg;
  gf_node_config_init(&cfg);
  gf_diag d = {""};
  if (o.config && gf_node_config_load(&cfg, o.config, &d)) {
    fprintf(stderr, "gpufrac node: %s\n", d.msg);
    return GF_EXIT_FAIL;
  }
  const struct {
    const char *v;
    char *dst;
    size_t cap;
  } over[] = {{o.state_dir, cfg.state_dir, sizeof(cfg.state_dir)},
              {o.cdi_dir, cfg.cdi_dir, sizeof(cfg.cdi_dir)},
              {o.listen, cfg.listen, sizeof(cfg.listen)}};
  for (size_t k = 0; k < 3; k++) {
    if (!over[k].v)
      continue;
    if (strlen(over[k].v) >= over[k].cap || !over[k].v[0]) {
      fprintf(stderr, "gpufrac node: '%s' is empty or too long\n", over[k].v);
      return GF_EXIT_USAGE;
    }
    snprintf(over[k].dst, over[k].cap, "%s", over[k].v);
  }
  gf_node_agent *agent = NULL;
  int rc = gf_node_agent_new(&agent, &o.a, &cfg);
  if (!rc && o.once) {
    if (o.write_cdi)
      rc = gf_node_agent_write_cdi(agent);
    if (!rc && o.print)
      rc = gf_node_agent_print(agent, o.print, stdout);
    if (!rc && !o.print && !o.write_cdi)
      rc = gf_node_agent_print(agent, "gpus", stdout);
  } else if (!rc) {
    /* A node without healthy GPUs still serves. */
    (void)gf_node_agent_write_cdi(agent);
    rc = gf_node_agent_start(agent);
    if (!rc)
      gf_node_agent_run(agent);
    gf_node_agent_stop(agent);
  }
  gf_node_agent_free(agent);
  return rc ? GF_EXIT_FAIL : GF_EXIT_OK;
}
