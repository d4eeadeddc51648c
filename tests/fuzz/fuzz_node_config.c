/* libFuzzer target: the node agent's config file (src/node/config.c).  The
 * file comes from a ConfigMap an operator edits by hand; parsing it must
 * never crash, an error must come with a message naming the file, and what
 * it accepts must be within the documented ranges. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/diag.h"
#include "gpufrac/node.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void terminated(const char *s, size_t cap) {
  if (!memchr(s, '\0', cap))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gf_node_config c;
  gf_node_config_init(&c);
  gf_diag d = {""};
  int rc = gf_node_config_parse(&c, (const char *)data, size, "node.conf", &d);
  if (rc) {
    if (strncmp(d.msg, "node.conf", 9) != 0)
      abort(); /* every error names the file */
    return 0;
  }
  /* slots 0 is `auto` (the default since issue 30 item 5), else 1..64 */
  if (c.slots > 64 || c.alloc_wait_ms < 0 || c.alloc_wait_ms > 30000 ||
      (unsigned)c.mode_default > 3 || c.nuuid > GF_NODE_MAX_GPUS ||
      c.nxid_ignore > sizeof(c.xid_ignore) / sizeof(c.xid_ignore[0]))
    abort();
  for (int i = 0; i < GF_NODE_MAX_GPUS; i++)
    if ((unsigned)c.mode_index[i] > 3)
      abort();
  for (uint32_t i = 0; i < c.nuuid; i++) {
    terminated(c.mode_uuid[i].uuid, sizeof(c.mode_uuid[i].uuid));
    if ((unsigned)c.mode_uuid[i].mode > 3 ||
        (strncmp(c.mode_uuid[i].uuid, "GPU-", 4) &&
         strncmp(c.mode_uuid[i].uuid, "MIG-", 4)))
      abort();
    for (uint32_t k = 0; k < i; k++)
      if (!strcmp(c.mode_uuid[k].uuid, c.mode_uuid[i].uuid))
        abort(); /* one entry per uuid: a later line overrides */
  }
  const char *paths[] = {c.state_dir, c.cdi_dir,     c.shim_lib,
                         c.preload,   c.kubelet_dir, c.mps_dir};
  for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
    terminated(paths[i], GF_NODE_PATH_MAX);
    if (paths[i][0] != '/')
      abort(); /* paths are absolute */
  }
  terminated(c.listen, sizeof(c.listen));
  terminated(c.log, sizeof(c.log));
  terminated(c.mps_control, sizeof(c.mps_control));
  if (!strchr(c.listen, ':') || !c.mps_control[0])
    abort();
  if (strcmp(c.log, "off") && strcmp(c.log, "warn") && strcmp(c.log, "info") &&
      strcmp(c.log, "debug"))
    abort();
  for (uint32_t i = 0; i < c.nxid_ignore; i++)
    if (c.xid_ignore[i] < 1 || c.xid_ignore[i] > 1000000)
      abort();
  return 0;
}
