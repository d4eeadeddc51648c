/*
 * The start shared by gf_plan_add_snapshot, gf_plan_add_usage and
 * gf_plan_add_node_types: check the plan, parse the text as JSON.
 */
#include <jansson.h>

#include "gpufrac/error.h"
#include "internal.h"

int gf__plan_load_json(const gf_plan *p, const char *text, size_t len,
                       const char *source, const char *noplan, gf_diag *d,
                       json_t **root) {
  *root = NULL;
  if (!p || !text)
    return gf_diag_set(d, GF_EINVAL, "%s", noplan);
  if (p->ran)
    return gf_diag_set(d, GF_ESTATE, "%s: the plan has already run", source);
  json_error_t je;
  *root = json_loadb(text, len, 0, &je);
  if (!*root)
    return gf_diag_set(d, GF_ESYNTAX, "%s:%d:%d: not JSON: %s", source, je.line,
                       je.column, je.text);
  return 0;
}
