/* The subcommands' option parser: see parse_options.h. */
#include "parse_options.h"

#include <stdarg.h>
#include <string.h>

#include "cli.h"

int gf_opt_usage_error(const gf_opt_cmd *cmd, const char *fmt, ...) {
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

/* "--name ARG": its width in the help's first column. */
static size_t head_len(const gf_opt *o) {
  return 2 + strlen(o->name) +
         (o->type == GF_OPT_STRING ? 1 + strlen(o->arg) : 0);
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

void gf_opt_help(const gf_opt_cmd *cmd, FILE *fp) {
  size_t w = strlen("-h, --help");
  for (const gf_opt *o = cmd->opts; o->type != GF_OPT_END; o++)
    if (o->type != GF_OPT_GROUP && head_len(o) > w && head_len(o) <= HEAD_MAX)
      w = head_len(o);
  int col = 2 + (int)w + 2;
  fputs(cmd->usage, fp);
  fputs("options:\n", fp);
  bool helped = false;
  for (const gf_opt *o = cmd->opts; o->type != GF_OPT_END; o++) {
    if (o->type == GF_OPT_GROUP) {
      if (!helped)
        fprintf(fp, "  %-*s  this help\n", (int)w, "-h, --help");
      helped = true;
      fprintf(fp, "\n%s%s", o->name, o->name[0] ? ":\n" : "");
      continue;
    }
    char head[128];
    if (o->type == GF_OPT_STRING)
      snprintf(head, sizeof(head), "--%s %s", o->name, o->arg);
    else
      snprintf(head, sizeof(head), "--%s", o->name);
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

void gf_opt_iter_init(gf_opt_iter *it, const gf_opt_cmd *cmd, int argc,
                      char **argv) {
  memset(it, 0, sizeof(*it));
  it->cmd = cmd;
  it->argc = argc;
  it->argv = argv;
  it->i = 1;
  it->rest = argc;
}

static const gf_opt *find(const gf_opt *opts, const char *name, size_t n) {
  for (const gf_opt *o = opts; o->type != GF_OPT_END; o++)
    if (o->type != GF_OPT_GROUP && strlen(o->name) == n &&
        memcmp(o->name, name, n) == 0)
      return o;
  return NULL;
}

static int stop(gf_opt_iter *it, int exit) {
  it->exit = exit;
  return -1;
}

int gf_opt_next(gf_opt_iter *it, const char **value) {
  const gf_opt_cmd *c = it->cmd;
  *value = NULL;
  while (it->i < it->argc) {
    const char *a = it->argv[it->i];
    if (strcmp(a, "--") == 0) {
      it->rest = it->i + 1;
      it->i = it->argc;
      return 0;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      gf_opt_help(c, stdout);
      it->done_help = true;
      return stop(it, GF_EXIT_OK);
    }
    if (strncmp(a, "--", 2) != 0 || !a[2]) {
      if (c->operands) {
        it->rest = it->i;
        it->i = it->argc;
        return 0;
      }
      return stop(it,
                  a[0] == '-'
                      ? gf_opt_usage_error(c, "unknown option '%s'", a)
                      : gf_opt_usage_error(c, "unexpected argument '%s'", a));
    }
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t n = eq ? (size_t)(eq - name) : strlen(name);
    const gf_opt *o = find(c->opts, name, n);
    if (!o)
      return stop(
          it, gf_opt_usage_error(c, "unknown option '%.*s'", (int)(n + 2), a));
    it->i++;
    if (o->type == GF_OPT_FLAG) {
      if (eq)
        return stop(it, gf_opt_usage_error(c, "--%s takes no value", o->name));
      if (o->value)
        *(bool *)o->value = true;
    } else {
      const char *v = eq ? eq + 1 : NULL;
      if (!v) {
        if (it->i >= it->argc)
          return stop(it, gf_opt_usage_error(c, "--%s needs a value", o->name));
        v = it->argv[it->i++];
      }
      if (o->value)
        *(const char **)o->value = v;
      *value = v;
    }
    if (!o->value) {
      it->opt = o;
      return o->id;
    }
    *value = NULL;
  }
  it->rest = it->argc;
  return 0;
}

int gf_opt_parse(const gf_opt_cmd *cmd, int argc, char **argv, int *exit) {
  gf_opt_iter it;
  gf_opt_iter_init(&it, cmd, argc, argv);
  const char *v;
  int id;
  while ((id = gf_opt_next(&it, &v)) > 0)
    ;
  *exit = it.exit;
  return id < 0 ? -1 : it.rest;
}
