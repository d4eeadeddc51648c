/*
 * The one check of a model source's form (gf_node_cache_source_check,
 * docs/modelcache.md "Sources"): used by the cache for every request (a
 * pod's, a prefetch ConfigMap's, an operator's fetch), by the node
 * config's prefixes and hub endpoint, and by `gpufrac cache prefetch`
 * before it writes a ConfigMap.  A source must say only what it seems to:
 * libcurl resolves dot segments before it sends, a server may decode
 * percent-encoded ones, and an empty port or a user name are read
 * differently by different parsers.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "gpufrac/error.h"
#include "gpufrac/modelcache.h"
#include "modelcache_int.h"

#define SOURCE_MAX 2048

/* ORG/NAME: [A-Za-z0-9][A-Za-z0-9._-]*, no "..", each <= 96. */
bool gf__mc_hf_repo_ok(const char *r, size_t n) {
  size_t parts = 0, len = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i == n || r[i] == '/') {
      if (len == 0 || len > HF_PART_MAX)
        return false;
      parts++;
      len = 0;
      continue;
    }
    char ch = r[i];
    bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (ch >= '0' && ch <= '9');
    if (!alnum && (len == 0 || (ch != '.' && ch != '_' && ch != '-')))
      return false;
    if (ch == '.' && i > 0 && r[i - 1] == '.')
      return false;
    len++;
  }
  return parts == 2;
}

/* A branch, tag or commit: [A-Za-z0-9._/-], no "..", no '.' or empty
 * '/'-separated segment (no leading, trailing or double '/'). */
bool gf__mc_hf_rev_ok(const char *v) {
  size_t n = strlen(v);
  if (n == 0 || n > HF_REV_MAX || v[0] == '/' || v[n - 1] == '/' ||
      strstr(v, "..") || strstr(v, "//") || !strcmp(v, ".") ||
      !strncmp(v, "./", 2) || strstr(v, "/./") ||
      (n >= 2 && !strcmp(v + n - 2, "/.")))
    return false;
  for (size_t i = 0; i < n; i++) {
    char ch = v[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-' ||
          ch == '/'))
      return false;
  }
  return true;
}

const char *gf__mc_hf_source_why(const char *source) {
  const char *r = source + 5;
  const char *at = strchr(r, '@');
  size_t rl = at ? (size_t)(at - r) : strlen(r);
  if (!gf__mc_hf_repo_ok(r, rl))
    return "is not hf://ORG/NAME[@REVISION]: want hf://ORG/NAME or "
           "hf://ORG/NAME@REVISION (names of letters, digits, '.', '_', '-', "
           "at most 96 each, no '..')";
  if (at && !gf__mc_hf_rev_ok(at + 1))
    return "has a revision that is not a branch, tag or commit: want "
           "hf://ORG/NAME@REVISION (letters, digits, '.', '_', '-' and '/', "
           "no '.', '..' or empty segment)";
  return NULL;
}

static bool is_hexdig(char ch) {
  return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
         (ch >= 'A' && ch <= 'F');
}

/* What is wrong with a host[:port] authority a[n] (NULL: nothing). */
#define CREDS_WHY                                                              \
  "has a user name or password (user:password@): credentials never go "        \
  "in a source (a hub token goes in model_hf_token_file)"

static const char *authority_why(const char *a, size_t n) {
  if (memchr(a, '@', n))
    return CREDS_WHY;
  size_t h = 0;
  if (n && a[0] == '[') { /* an IPv6 literal */
    const char *close = memchr(a, ']', n);
    if (!close || close == a + 1)
      return "has a malformed IPv6 host ('[' without ']')";
    for (const char *p = a + 1; p < close; p++)
      if (!is_hexdig(*p) && *p != ':' && *p != '.')
        return "has a malformed IPv6 host";
    h = (size_t)(close - a) + 1;
  } else {
    for (; h < n && a[h] != ':'; h++) {
      char ch = a[h];
      if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
            (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_'))
        return "has a host that is not a name or an address (letters, "
               "digits, '.', '-', '_', or [IPv6])";
    }
  }
  if (h == 0)
    return "has no host";
  if (h == n)
    return NULL;
  if (a[h] != ':')
    return "has something after its host that is not ':PORT'";
  const char *port = a + h + 1;
  size_t pn = n - h - 1;
  if (pn == 0)
    return "has an empty port ('host:' with no number after the ':')";
  unsigned long v = 0;
  for (size_t i = 0; i < pn; i++) {
    if (port[i] < '0' || port[i] > '9')
      return "has a port that is not a number";
    v = v * 10 + (unsigned long)(port[i] - '0');
    if (v > 65535)
      break;
  }
  if (v < 1 || v > 65535 || pn > 5)
    return "has a port out of 1..65535";
  return NULL;
}

/* What is wrong with the path p (from its first '/', or ""; NULL:
 * nothing). */
static const char *path_why(const char *p) {
  if (strchr(p, '\\'))
    return "has a backslash";
  for (const char *q = p; (q = strchr(q, '%')) != NULL; q++) {
    if (!is_hexdig(q[1]) || !is_hexdig(q[2]))
      return "has a '%' that is not a %XX escape";
    if (!strncmp(q, "%00", 3))
      return "has an encoded NUL byte (%00)";
    if (!strncasecmp(q, "%2e", 3) || !strncasecmp(q, "%2f", 3) ||
        !strncasecmp(q, "%5c", 3))
      return "has an encoded '.', '/' or '\\' (%2e, %2f, %5c), which a "
             "server may decode into another path";
  }
  for (const char *s = p; *s == '/'; s += strcspn(s + 1, "/") + 1) {
    size_t n = strcspn(s + 1, "/");
    if ((n == 1 && s[1] == '.') || (n == 2 && s[1] == '.' && s[2] == '.'))
      return "has a '.' or '..' path segment (libcurl resolves them before "
             "it sends, out of the path it names)";
    if (n == 0 && s[1] == '/')
      return "has an empty path segment ('//')";
  }
  return NULL;
}

/* The '@' that ends a user name and password whose password holds a '/'
 * (AWS secret keys do): the authority a[an] has a ':' followed by more
 * than digits, and an '@' comes later, before any '?' or '#'.  NULL:
 * none.  A URL's own parser takes "user:pa" as host and port there, so the
 * password would be shown and the reason would be a bad port. */
static const char *split_creds_at(const char *a, size_t an) {
  const char *colon = memchr(a, ':', an);
  if (!colon || a[0] == '[') /* none, or an IPv6 literal's */
    return NULL;
  bool digits = true;
  for (const char *p = colon + 1; p < a + an; p++)
    digits = digits && *p >= '0' && *p <= '9';
  if (digits)
    return NULL;
  const char *end = a + strcspn(a, "?#"), *at = NULL;
  for (const char *p = a + an; p < end; p++)
    if (*p == '@')
      at = p;
  return at;
}

const char *gf__mc_url_why(const char *url) {
  size_t len = strlen(url);
  if (len >= SOURCE_MAX)
    return "is longer than 2047 bytes";
  for (const char *p = url; *p; p++)
    if ((unsigned char)*p <= 0x20 || *p == 0x7f)
      return "has a space or a control byte";
  bool file = !strncmp(url, "file://", 7);
  if (!file && strncmp(url, "http://", 7) && strncmp(url, "https://", 8))
    return "is not an http://, https:// or file:// URL";
  const char *a = strstr(url, "://") + 3;
  size_t an = strcspn(a, "/?#");
  const char *why = NULL;
  if (file && an)
    why = "names a host: want file:///an/absolute/path";
  else if (file && a[0] != '/')
    why = "has no path: want file:///an/absolute/path";
  else if (!file && split_creds_at(a, an))
    why = CREDS_WHY;
  else if (!file)
    why = authority_why(a, an);
  if (why)
    return why;
  const char *path = a + an;
  const char *q = strpbrk(path, "?#");
  if (q && *q == '?')
    return "has a query string ('?...'): the model's file paths are "
           "appended to it, want scheme://host[:port][/path]";
  if (q)
    return "has a fragment ('#...'): want scheme://host[:port][/path]";
  return path_why(path);
}

const char *gf__mc_url_path_why(const char *url) {
  const char *a = strstr(url, "://");
  if (!a)
    return "is not a URL";
  a += 3;
  const char *path = a + strcspn(a, "/?#");
  char buf[SOURCE_MAX];
  size_t n = strcspn(path, "?#");
  if (n >= sizeof(buf))
    return "is longer than 2047 bytes";
  memcpy(buf, path, n);
  buf[n] = '\0';
  return path_why(buf);
}

void gf__mc_url_redact(const char *url, char *out, size_t cap) {
  const char *a = strstr(url, "://");
  const char *at = NULL; /* the last '@' of the authority */
  if (a) {
    a += 3;
    size_t an = strcspn(a, "/?#");
    for (size_t i = 0; i < an; i++)
      if (a[i] == '@')
        at = a + i;
    if (!at)
      at = split_creds_at(a, an);
  }
  if (at)
    snprintf(out, cap, "%.*s***%.1000s", (int)(a - url), url, at);
  else
    snprintf(out, cap, "%.1500s", url);
}

int gf_node_cache_source_check(const char *source, gf_diag *d) {
  if (!source || !*source)
    return gf_diag_set(d, GF_EINVAL, "'': an empty source");
  bool hf = strncmp(source, "hf://", 5) == 0;
  const char *why = hf ? gf__mc_hf_source_why(source) : gf__mc_url_why(source);
  if (!why)
    return 0;
  char shown[1600];
  gf__mc_url_redact(source, shown, sizeof(shown));
  /* Cut long ones: the reason must fit the message (GF_DIAG_MAX). */
  if (strlen(shown) > 160)
    memcpy(shown + 150, "...", 4);
  /* a control byte shown as '?', so the message is one line */
  for (char *p = shown; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      *p = '?';
  if (!hf && !strncmp(why, "is not an http", 14))
    why = "is not an http://, https:// or file:// URL, nor "
          "hf://ORG/NAME[@REVISION]";
  return gf_diag_set(d, GF_EINVAL, "'%s' %s: refused (docs/modelcache.md)",
                     shown, why);
}
