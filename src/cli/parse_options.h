/*
 * The one option parser every subcommand uses (git's parse-options is the
 * model).  A command describes its options once, in a table of gf__opt;
 * from that table the parser
 *   - accepts `--key=value` and `--key value` for an option that takes a
 *     value, and `--flag` (never `--flag=x`) for one that does not;
 *   - names what is wrong: an unknown option, a missing value, a value given
 *     to a flag, an empty value (`--key=`), a value taken from the next
 *     argument that looks like an option (`--key --other`), an operand
 *     (after `--` too) where the command takes none (each a usage error,
 *     exit 2, on stderr as "PROG: ... (see 'PROG --help')");
 *   - reads a short option's value as `-xVALUE`, `-x=VALUE` (as kubectl
 *     does) or `-x VALUE`;
 *   - prints `--help` / `-h`: the command's prose, then every option of the
 *     table with its argument and help, so the help cannot omit an option.
 *
 * An option either stores itself (GF__OPT_FLAG sets a bool, GF__OPT_STRING
 * keeps the last value given) or, with an id, is handed back to the command
 * (gf__opt_next returns the id and the value) for checks of its own; the
 * command's messages for a bad value stay its own.
 *
 * Invariants: the table ends with an entry whose type is GF__OPT_END; long
 * names are given without the leading "--"; argv is never modified; a
 * value is a pointer into argv.
 */
#ifndef GPUFRAC_CLI_PARSE_OPTIONS_H
#define GPUFRAC_CLI_PARSE_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

typedef enum gf__opt_type {
  GF__OPT_END = 0,
  GF__OPT_FLAG,   /* no value: sets *(bool *)value, or returns id */
  GF__OPT_STRING, /* a value: stores it in *(const char **)value, or id */
  GF__OPT_GROUP,  /* no option: a heading in the help ("" = a blank line) */
} gf__opt_type;

typedef struct gf__opt {
  gf__opt_type type;
  const char *name; /* long name without "--" (GF__OPT_GROUP: the heading) */
  const char *arg;  /* the value's name in the help ("FILE"); STRING only */
  const char *help; /* the help; '\n' starts a continuation line */
  void *value;      /* where it stores itself; NULL: handed back by id */
  int id;           /* > 0: what gf__opt_next returns for it */
  char short_name;  /* 'n' for -n (-n VALUE, -nVALUE), or 0 */
} gf__opt;

#define GF__OPT_FLAG(n, h, v)                                                  \
  { GF__OPT_FLAG, (n), NULL, (h), (v), 0, 0 }
#define GF__OPT_STRING(n, a, h, v)                                             \
  { GF__OPT_STRING, (n), (a), (h), (v), 0, 0 }
#define GF__OPT_FLAG_ID(n, h, i)                                               \
  { GF__OPT_FLAG, (n), NULL, (h), NULL, (i), 0 }
#define GF__OPT_STRING_ID(n, a, h, i)                                          \
  { GF__OPT_STRING, (n), (a), (h), NULL, (i), 0 }
#define GF__OPT_SHORT_FLAG(c, n, h, v)                                         \
  { GF__OPT_FLAG, (n), NULL, (h), (v), 0, (c) }
#define GF__OPT_SHORT_STRING(c, n, a, h, v)                                    \
  { GF__OPT_STRING, (n), (a), (h), (v), 0, (c) }
#define GF__OPT_GROUP(h)                                                       \
  { GF__OPT_GROUP, (h), NULL, NULL, NULL, 0, 0 }
#define GF__OPT_END()                                                          \
  { GF__OPT_END, NULL, NULL, NULL, NULL, 0, 0 }

/* What a command is: its name in messages ("gpufrac node"), the text its
 * help opens with (usage lines and a description, ending in "\n\n" before
 * the options), an optional text after the options, and its table. */
typedef struct gf__opt_cmd {
  const char *prog;
  const char *usage;
  const char *footer;
  void (*footer_fn)(FILE *fp); /* printed after footer, when set */
  const gf__opt *opts;
  /* true: the first argument that is not an option ends the options (it
   * and the rest are operands, `gf__opt_iter.rest`); false: operands are a
   * usage error ("unexpected argument"), after "--" too. "--" always ends
   * the options. */
  bool operands;
  /* true: operands are taken only after "--" (run's command); false and
   * operands false: none at all */
  bool dashdash;
  /* true: operands may come between options (kubectl's style): each is
   * handed back as GF__OPT_OPERAND with its text in *value */
  bool mixed;
  const char *unknown; /* "unknown <this>" for an unknown one ("option") */
} gf__opt_cmd;

/* What gf__opt_next returns for an operand of a `mixed` command. */
#define GF__OPT_OPERAND 0x7fff

typedef struct gf__opt_iter {
  const gf__opt_cmd *cmd;
  int argc;
  char **argv;
  int i;    /* the next argument to read */
  int rest; /* after the loop: the index of the first operand (argc: none) */
  int exit; /* after the loop: 0 ok, or the exit code (help: 0, usage: 2) */
  bool done_help;
  const gf__opt *opt; /* the option gf__opt_next last returned */
} gf__opt_iter;

/* Prints the command's help: usage, "options:", the table, footer. */
void gf__opt_help(const gf__opt_cmd *cmd, FILE *fp);

/* Starts reading argv[1..argc-1] (argv[0] is the command's own name). */
void gf__opt_iter_init(gf__opt_iter *it, const gf__opt_cmd *cmd, int argc,
                       char **argv);

/* The next option handed back by id: returns the id (> 0) and sets *value
 * (NULL for a flag); options that store themselves are stored on the way.
 * Returns 0 when the options end (it->exit == 0, it->rest set), -1 when
 * they end early: --help printed (it->exit == 0, it->done_help) or a usage
 * error printed (it->exit == 2). */
int gf__opt_next(gf__opt_iter *it, const char **value);

/* For a table where every option stores itself: reads all of argv.
 * Returns -1 when the command must exit with *exit (help or usage error),
 * else the index of the first operand (argc when none). */
int gf__opt_parse(const gf__opt_cmd *cmd, int argc, char **argv, int *exit);

/* Prints "PROG: <message>\n(see 'PROG --help')\n" on stderr; returns 2. */
int gf__opt_usage_error(const gf__opt_cmd *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
