/* The bundled data directory, found at run time (cli.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static bool is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Whether dir holds plan-example/ or traces/. */
static bool holds_data(const char *dir) {
  char p[2 * PATH_MAX];
  static const char *const sub[] = {"plan-example", "traces"};
  for (size_t i = 0; i < sizeof(sub) / sizeof(sub[0]); i++) {
    int n = snprintf(p, sizeof(p), "%s/%s", dir, sub[i]);
    if (n > 0 && (size_t)n < sizeof(p) && is_dir(p))
      return true;
  }
  return false;
}

const char *gf__cli_data_dir(void) {
  static char found[PATH_MAX + 32];
  const char *env = getenv("GPUFRAC_DATA");
  if (env && *env)
    return env;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = '\0'; /* the executable's directory */
      static const char *const rel[] = {"../share/gpufrac", "../data",
                                        "../../data"};
      for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
        snprintf(found, sizeof(found), "%s/%s", exe, rel[i]);
        if (holds_data(found))
          return found;
      }
    }
  }
  return "/usr/share/gpufrac";
}
