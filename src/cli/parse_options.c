/* The subcommands' option parser: see parse_options.h. */
#include "parse_options.h"

#include <stdarg.h>
#include <string.h>

#include "cli.h"

int gf__opt_usage_error(const gf__opt_cmd *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", cmd->prog);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(see '%s --help')\n", cmd->prog);
  va_end(ap);
  return GF_EXIT_USAGE;
}

/* The widest "--name ARG" the help's first column is made for; a longer one
 * has its help start on the next line. */
#define HEAD_MAX 24

/* "-x, --name ARG": its width in the help's first column. */
static size_t head_len(const gf__opt *o) {
  return (o->short_name ? 4 : 0) + 2 + strlen(o->name) +
         (o->type == GF__OPT_STRING ? 1 + strlen(o->arg) : 0);
}

static void print_help_text(FILE *fp, const char *help, int col) {
  for (const char *p = help; *p;) {
    const char *nl = strchr(p, '\n');
    int n = nl ? (int)(nl - p) : (int)strlen(p);
    fprintf(fp, "%.*s\n", n, p);
    if (!nl)
      break;
    p = nl + 1;
    fprintf(fp, "%*s", col, "");
  }
}

void gf__opt_help(const gf__opt_cmd *cmd, FILE *fp) {
  size_t w = strlen("-h, --help");
  for (const gf__opt *o = cmd->opts; o->type != GF__OPT_END; o++)
    if (o->type != GF__OPT_GROUP && head_len(o) > w && head_len(o) <= HEAD_MAX)
      w = head_len(o);
  int col = 2 + (int)w + 2;
  fputs(cmd->usage, fp);
  fputs("options:\n", fp);
  bool helped = false;
  for (const gf__opt *o = cmd->opts; o->type != GF__OPT_END; o++) {
    if (o->type == GF__OPT_GROUP) {
      if (!helped)
        fprintf(fp, "  %-*s  this help\n", (int)w, "-h, --help");
      helped = true;
      fprintf(fp, "\n%s%s", o->name, o->name[0] ? ":\n" : "");
      continue;
    }
    char head[128], sh[8] = "";
    if (o->short_name)
      snprintf(sh, sizeof(sh), "-%c, ", o->short_name);
    if (o->type == GF__OPT_STRING)
      snprintf(head, sizeof(head), "%s--%s %s", sh, o->name, o->arg);
    else
      snprintf(head, sizeof(head), "%s--%s", sh, o->name);
    if (strlen(head) > w) /* a long head: its help on the next line */
      fprintf(fp, "  %s\n%*s", head, col, "");
    else
      fprintf(fp, "  %-*s  ", (int)w, head);
    print_help_text(fp, o->help, col);
  }
  if (!helped)
    fprintf(fp, "  %-*s  this help\n", (int)w, "-h, --help");
  if (cmd->footer)
    fputs(cmd->footer, fp);
  if (cmd->footer_fn)
    cmd->footer_fn(fp);
}

void gf__opt_iter_init(gf__opt_iter *it, const gf__opt_cmd *cmd, int argc,
                       char **argv) {
  memset(it, 0, sizeof(*it));
  it->cmd = cmd;
  it->argc = argc;
  it->argv = argv;
  it->i = 1;
  it->rest = argc;
}

static const gf__opt *find(const gf__opt *opts, const char *name, size_t n) {
  for (const gf__opt *o = opts; o->type != GF__OPT_END; o++)
    if (o->type != GF__OPT_GROUP && strlen(o->name) == n &&
        memcmp(o->name, name, n) == 0)
      return o;
  return NULL;
}

static int stop(gf__opt_iter *it, int exit) {
  it->exit = exit;
  return -1;
}

static const char *unknown(const gf__opt_cmd *c) {
  return c->unknown ? c->unknown : "option";
}

/* Stores or hands back option o with value v (NULL for a flag). */
static int take(gf__opt_iter *it, const gf__opt *o, const char *v,
                const char **value) {
  if (o->value) {
    if (o->type == GF__OPT_FLAG)
      *(bool *)o->value = true;
    else
      *(const char **)o->value = v;
    return 0;
  }
  it->opt = o;
  *value = v;
  return o->id;
}

/* A required value that is empty, or that was the next argument and looks
 * like an option (`--listen --policy`): a usage error (-1), else 0. */
static int check_value(gf__opt_iter *it, const gf__opt *o, const char *v,
                       bool separate) {
  const gf__opt_cmd *c = it->cmd;
  if (!v[0])
    return stop(it, gf__opt_usage_error(c, "--%s: empty value", o->name));
  if (separate && v[0] == '-' && v[1] == '-' && v[2])
    return stop(it,
                gf__opt_usage_error(c, "--%s: value '%s' looks like an option",
                                    o->name, v));
  return 0;
}

/* What short_opt returns when the option stored itself: go on. */
#define GO_ON (-2)

/* -x, -x VALUE, -xVALUE: one short option (no bundling of flags). */
static int short_opt(gf__opt_iter *it, const char **value) {
  const gf__opt_cmd *c = it->cmd;
  const char *a = it->argv[it->i];
  const gf__opt *o = c->opts;
  while (o->type != GF__OPT_END &&
         (o->type == GF__OPT_GROUP || o->short_name != a[1]))
    o++;
  if (o->type == GF__OPT_END || (o->type == GF__OPT_FLAG && a[2]))
    return stop(it, gf__opt_usage_error(c, "unknown %s '%s'", unknown(c), a));
  it->i++;
  const char *v = NULL;
  if (o->type == GF__OPT_STRING) {
    /* -xVALUE, -x=VALUE (as kubectl reads it) or -x VALUE */
    v = a[2] ? a + 2 + (a[2] == '=') : NULL;
    if (!v && it->i >= it->argc)
      return stop(it, gf__opt_usage_error(c, "%s needs a value", a));
    bool separate = !v;
    if (!v)
      v = it->argv[it->i++];
    if (check_value(it, o, v, separate))
      return -1;
  }
  int id = take(it, o, v, value);
  return id ? id : GO_ON;
}

/* An argument that is not an option: an operand, the end of the options,
 * or a usage error (-1), as the command takes them. */
static int operand(gf__opt_iter *it, const char **value) {
  const gf__opt_cmd *c = it->cmd;
  const char *a = it->argv[it->i];
  if (c->mixed) {
    it->i++;
    *value = a;
    return GF__OPT_OPERAND;
  }
  if (c->operands) {
    it->rest = it->i;
    it->i = it->argc;
    return 0;
  }
  return stop(it, gf__opt_usage_error(c, "unexpected argument '%s'", a));
}

int gf__opt_next(gf__opt_iter *it, const char **value) {
  const gf__opt_cmd *c = it->cmd;
  *value = NULL;
  while (it->i < it->argc) {
    const char *a = it->argv[it->i];
    if (strcmp(a, "--") == 0) {
      if (!c->operands && !c->mixed && !c->dashdash && it->i + 1 < it->argc)
        return stop(it, gf__opt_usage_error(c, "unexpected argument '%s'",
                                            it->argv[it->i + 1]));
      it->rest = it->i + 1;
      it->i = it->argc;
      return 0;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      gf__opt_help(c, stdout);
      it->done_help = true;
      return stop(it, GF_EXIT_OK);
    }
    if (a[0] == '-' && a[1] && a[1] != '-') {
      int id = short_opt(it, value);
      if (id == GO_ON)
        continue;
      return id;
    }
    if (a[0] != '-' || !a[1])
      return operand(it, value);
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t n = eq ? (size_t)(eq - name) : strlen(name);
    const gf__opt *o = find(c->opts, name, n);
    if (!o)
      return stop(it, gf__opt_usage_error(c, "unknown %s '%.*s'", unknown(c),
                                          (int)(n + 2), a));
    it->i++;
    const char *v = NULL;
    if (o->type == GF__OPT_FLAG && eq)
      return stop(it, gf__opt_usage_error(c, "--%s takes no value", o->name));
    if (o->type == GF__OPT_STRING) {
      v = eq ? eq + 1 : NULL;
      if (!v && it->i >= it->argc)
        return stop(it, gf__opt_usage_error(c, "--%s needs a value", o->name));
      bool separate = !v;
      if (!v)
        v = it->argv[it->i++];
      if (check_value(it, o, v, separate))
        return -1;
    }
    int id = take(it, o, v, value);
    if (id)
      return id;
  }
  it->rest = it->argc;
  return 0;
}

int gf__opt_parse(const gf__opt_cmd *cmd, int argc, char **argv, int *exit) {
  gf__opt_iter it;
  gf__opt_iter_init(&it, cmd, argc, argv);
  const char *v;
  int id;
  while ((id = gf__opt_next(&it, &v)) > 0)
    ;
  *exit = it.exit;
  return id < 0 ? -1 : it.rest;
}
