/*
 * `gpufrac completion bash|zsh`: a shell completion script on stdout.  The
 * script asks gpufrac itself at completion time (`gpufrac help` for the
 * commands, `gpufrac CMD --help` for a command's options), so it never
 * falls out of step with the option tables.  zsh runs the bash function
 * through bashcompinit.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "parse_options.h"

static const char bash_script[] =
    "# gpufrac's bash completion: source <(gpufrac completion bash)\n"
    "_gpufrac() {\n"
    "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" prog=\"${COMP_WORDS[0]}\"\n"
    "  local words\n"
    "  COMPREPLY=()\n"
    "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
    "    words=$(command \"$prog\" help 2>/dev/null |\n"
    "      sed -n 's/^  \\([a-z][a-z-]*\\)  *.*/\\1/p')\n"
    "    COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
    "    return 0\n"
    "  fi\n"
    "  local cmd=\"${COMP_WORDS[1]}\"\n"
    "  case \"$cur\" in\n"
    "  -*)\n"
    "    words=$(command \"$prog\" \"$cmd\" --help 2>/dev/null |\n"
    "      grep -o -- '--[a-z][a-z0-9-]*' | sort -u)\n"
    "    COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
    "    ;;\n"
    "  *)\n"
    "    case \"$cmd\" in\n"
    "    completion) COMPREPLY=($(compgen -W \"bash zsh\" -- \"$cur\")) ;;\n"
    "    kubectl)\n"
    "      if [ \"$COMP_CWORD\" -eq 2 ]; then\n"
    "        COMPREPLY=($(compgen -W \"top describe why-pending doctor\" "
    "-- \"$cur\"))\n"
    "      fi ;;\n"
    "    help) COMPREPLY=($(compgen -W \"$(command \"$prog\" help 2>/dev/null "
    "|\n"
    "      sed -n 's/^  \\([a-z][a-z-]*\\)  *.*/\\1/p')\" -- \"$cur\")) ;;\n"
    "    *) COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n"
    "    esac\n"
    "    ;;\n"
    "  esac\n"
    "  return 0\n"
    "}\n"
    "complete -F _gpufrac gpufrac\n";

static const gf__opt_cmd completion_cmd = {
    .prog = "gpufrac completion",
    .usage = "usage: gpufrac completion bash|zsh\n"
             "\n"
             "Prints a shell completion script for gpufrac's commands and "
             "options:\n"
             "  bash: source <(gpufrac completion bash)   (in ~/.bashrc)\n"
             "  zsh:  source <(gpufrac completion zsh)    (in ~/.zshrc)\n"
             "\n",
    .operands = true,
};

int cmd_completion(int argc, char **argv) {
  const gf__opt flags[] = {GF__OPT_END()};
  gf__opt_cmd c = completion_cmd;
  c.opts = flags;
  int rc = GF_EXIT_OK;
  int rest = gf__opt_parse(&c, argc, argv, &rc);
  if (rest < 0)
    return rc;
  if (rest != argc - 1)
    return gf__opt_usage_error(&c,
                               rest == argc ? "which shell: bash or zsh"
                                            : "unexpected argument '%s'",
                               argv[argc - 1]);
  const char *sh = argv[rest];
  if (strcmp(sh, "bash") == 0) {
    fputs(bash_script, stdout);
  } else if (strcmp(sh, "zsh") == 0) {
    printf("# gpufrac's zsh completion: source <(gpufrac completion zsh)\n"
           "autoload -U +X compinit && compinit\n"
           "autoload -U +X bashcompinit && bashcompinit\n");
    fputs(bash_script, stdout);
  } else {
    return gf__opt_usage_error(&c, "shell '%s': bash or zsh", sh);
  }
  return GF_EXIT_OK;
}
