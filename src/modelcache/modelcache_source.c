/*
 * The one check of a model source's form (gf_node_cache_source_check,
 * docs/modelcache.md "Sources"): used by the cache for every request (a
 * pod's, a prefetch ConfigMap's, an operator's fetch), by the node
 * config's prefixes and hub endpoint, and by `gpufrac cache prefetch`
 * before it writes a ConfigMap.  A source must say only what it seems to:
 * libcurl resolves dot segments before it sends, a server may decode
 * percent-encoded ones (twice, or after dropping ";parameters"), an empty
 * port, a user name or a host like 127.1 are read differently by different
 * parsers, a lax UTF-8 decoder or a normaliser turns an overlong '.' or a
 * fullwidth one into '.', and a bidi control reorders the log line that
 * shows the source.
 */
#include <arpa/inet.h>
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

static unsigned hexval(char ch) {
  return ch <= '9' ? (unsigned)(ch - '0') : (unsigned)((ch | 0x20) - 'a' + 10);
}

#define CREDS_WHY                                                              \
  "has a user name or password (user:password@): credentials never go "        \
  "in a source (a hub token goes in model_hf_token_file)"

static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* A dotted-quad IPv4 address h[n]: four decimal numbers 0..255, no
 * leading zero (some parsers read 010 as octal). */
static bool ipv4_ok(const char *h, size_t n) {
  int parts = 0;
  for (size_t i = 0; i <= n; parts++) {
    size_t k = 0;
    unsigned v = 0;
    for (; i + k < n && is_digit(h[i + k]) && k < 4; k++)
      v = v * 10 + (unsigned)(h[i + k] - '0');
    if (k == 0 || k > 3 || v > 255 || (k > 1 && h[i] == '0') || parts == 4)
      return false;
    i += k;
    if (i < n && h[i] != '.')
      return false;
    i++;
  }
  return parts == 4;
}

/* Whether the label l[n] is a number as a URL parser reads one: decimal,
 * or 0x hexadecimal. */
static bool numeric_label(const char *l, size_t n) {
  size_t i = n >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X') ? 2 : 0;
  for (size_t k = i; k < n; k++)
    if (i ? !is_hexdig(l[k]) : !is_digit(l[k]))
      return false;
  return n > 0;
}

#define HOST_WHY                                                               \
  "has a host that is not a name or an address (a name of letters, digits, "   \
  "'-' and '.', a dotted-quad IPv4 address, or [IPv6])"

/* What is wrong with the host name h[n] (RFC 1123: labels of 1..63
 * letters, digits and '-', not starting or ending with '-', 253 bytes at
 * most), or with it as an IPv4 address when its last label is a number
 * (then a URL parser reads it as one: 127.1, 2130706433, 0x7f.1). */
static const char *name_why(const char *h, size_t n) {
  if (n > 253)
    return "has a host name longer than 253 bytes";
  size_t start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i < n && h[i] != '.') {
      char ch = h[i];
      if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
            is_digit(ch) || ch == '-'))
        return HOST_WHY;
      continue;
    }
    if (i == start)
      return "has an empty label in its host (a '.' at its start or end, "
             "or '..')";
    if (i - start > 63)
      return "has a host label longer than 63 bytes";
    if (h[start] == '-' || h[i - 1] == '-')
      return "has a host label that starts or ends with '-'";
    if (i == n && numeric_label(h + start, i - start) && !ipv4_ok(h, n))
      return "has an all-numeric host that is not an IPv4 address (want "
             "four numbers 0..255 without leading zeros: parsers read forms "
             "like 127.1 or 0x7f.1 differently)";
    start = i + 1;
  }
  return NULL;
}

/* What is wrong with the host h[n] of an http(s) URL (NULL: nothing). */
static const char *host_why(const char *h, size_t n) {
  if (n == 0)
    return "has no host";
  if (h[0] != '[')
    return name_why(h, n);
  if (n == 2)
    return "has an empty IPv6 host ('[]')";
  char a[INET6_ADDRSTRLEN];
  struct in6_addr v6;
  if (n - 2 >= sizeof(a))
    return "has a host in [] that is not an IPv6 address";
  memcpy(a, h + 1, n - 2);
  a[n - 2] = '\0';
  if (inet_pton(AF_INET6, a, &v6) != 1)
    return "has a host in [] that is not an IPv6 address";
  return NULL;
}

/* What is wrong with a host[:port] authority a[n] (NULL: nothing). */
static const char *authority_why(const char *a, size_t n) {
  if (memchr(a, '@', n))
    return CREDS_WHY;
  size_t h = 0;
  if (n && a[0] == '[') { /* an IPv6 literal */
    const char *close = memchr(a, ']', n);
    if (!close)
      return "has a malformed IPv6 host ('[' without ']')";
    h = (size_t)(close - a) + 1;
  } else {
    while (h < n && a[h] != ':')
      h++;
  }
  const char *why = host_why(a, h);
  if (why || h == n)
    return why;
  if (a[h] != ':')
    return "has something after its host that is not ':PORT'";
  const char *port = a + h + 1;
  size_t pn = n - h - 1;
  if (pn == 0)
    return "has an empty port ('host:' with no number after the ':')";
  unsigned long v = 0;
  for (size_t i = 0; i < pn; i++) {
    if (!is_digit(port[i]))
      return "has a port that is not a number";
    v = v * 10 + (unsigned long)(port[i] - '0');
    if (v > 65535)
      break;
  }
  if (v < 1 || v > 65535 || pn > 5)
    return "has a port out of 1..65535";
  return NULL;
}

/* One UTF-8 character at s[n] (strict: no overlong form, surrogate or
 * value past U+10FFFF) into *cp; its length, 0 when it is not one. */
static size_t utf8_one(const unsigned char *s, size_t n, unsigned *cp) {
  unsigned c = s[0];
  size_t k = c < 0x80 ? 1 : c < 0xc2 ? 0 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
  if (k == 0 || c > 0xf4 || k > n)
    return 0;
  unsigned v = k == 1 ? c : c & (0x7fu >> k);
  for (size_t i = 1; i < k; i++) {
    if ((s[i] & 0xc0) != 0x80)
      return 0;
    v = v << 6 | (s[i] & 0x3fu);
  }
  if ((k == 3 && v < 0x800) || (k == 4 && (v < 0x10000 || v > 0x10ffff)) ||
      (v >= 0xd800 && v <= 0xdfff))
    return 0;
  *cp = v;
  return k;
}

/* Characters that stand for '.', '/' or '\' once a server or a library
 * normalises the text (NFKC, IDNA), or that look like them to a reader. */
static bool lookalike(unsigned v) {
  static const unsigned set[] = {0x2024, 0x2025, 0x2026, 0x2044, 0x2215, 0x2216,
                                 0x29f5, 0x29f8, 0x29f9, 0x3002, 0xfe52, 0xfe68,
                                 0xff0e, 0xff0f, 0xff3c, 0xff61};
  for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++)
    if (v == set[i])
      return true;
  return false;
}

static bool bidi_control(unsigned v) {
  return v == 0x061c || v == 0x200e || v == 0x200f ||
         (v >= 0x202a && v <= 0x202e) || (v >= 0x2066 && v <= 0x2069);
}

/* Characters that print nothing or a blank: C1 controls, spaces other than
 * ' ', zero-width and format characters, variation selectors, tags. */
static bool invisible(unsigned v) {
  return (v >= 0x80 && v <= 0xa0) || v == 0xad || v == 0x34f || v == 0x115f ||
         v == 0x1160 || v == 0x1680 || v == 0x180e ||
         (v >= 0x2000 && v <= 0x200d) || (v >= 0x2028 && v <= 0x202f) ||
         (v >= 0x205f && v <= 0x206f) || v == 0x3000 || v == 0x3164 ||
         (v >= 0xfe00 && v <= 0xfe0f) || v == 0xfeff || v == 0xffa0 ||
         (v >= 0xfff9 && v <= 0xfffb) || (v >= 0x1d173 && v <= 0x1d17a) ||
         (v >= 0xe0000 && v <= 0xe0fff);
}

/* What is wrong with the characters of the path p, raw or %XX-encoded
 * (NULL: nothing): bytes that are not UTF-8 (an overlong '.' or '/' among
 * them), a look-alike of '.', '/' or '\', a bidi control, an invisible
 * character.  The '%' escapes are well-formed (path_why checked). */
static const char *chars_why(const char *p) {
  unsigned char buf[SOURCE_MAX];
  size_t n = 0;
  for (const char *q = p; *q && n < sizeof(buf); n++) {
    if (*q == '%') {
      buf[n] = (unsigned char)(hexval(q[1]) << 4 | hexval(q[2]));
      q += 3;
    } else {
      buf[n] = (unsigned char)*q++;
    }
  }
  for (size_t i = 0; i < n;) {
    unsigned v = 0;
    size_t k = utf8_one(buf + i, n - i, &v);
    if (k == 0)
      return "has bytes that are not UTF-8, raw or %XX-encoded (an overlong "
             "form such as %c0%ae is read as '.' or '/' by some decoders)";
    if (lookalike(v))
      return "has a character that looks like '.', '/' or '\\', or becomes "
             "one when a server normalises the text (a fullwidth dot, a "
             "division slash, ...)";
    if (bidi_control(v))
      return "has a bidirectional control character (U+202E and the like "
             "reorder the text a reader sees in a log)";
    if (invisible(v))
      return "has an invisible or non-printing character (a non-ASCII "
             "space, a zero-width or format character)";
    i += k;
  }
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
    if (!strncmp(q, "%25", 3) && is_hexdig(q[3]) && is_hexdig(q[4]))
      return "has a doubly encoded escape (%25XX: %252e%252e is '..' to a "
             "server that decodes twice)";
  }
  for (const char *s = p; *s == '/'; s += strcspn(s + 1, "/") + 1) {
    size_t n = strcspn(s + 1, "/");
    size_t body = strcspn(s + 1, "/;"); /* before any ";parameters" */
    if (body < n && (body == 0 || (body == 1 && s[1] == '.') ||
                     (body == 2 && s[1] == '.' && s[2] == '.')))
      return "has a '.' or '..' path segment with ';' parameters ('..;'), "
             "or a segment of ';' parameters alone: servers that drop them "
             "read '..', '.' or an empty segment";
    if ((n == 1 && s[1] == '.') || (n == 2 && s[1] == '.' && s[2] == '.'))
      return "has a '.' or '..' path segment (libcurl resolves them before "
             "it sends, out of the path it names)";
    if (n == 0 && s[1] == '/')
      return "has an empty path segment ('//')";
  }
  return chars_why(p);
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
  bool file = !strncasecmp(url, "file://", 7);
  if (!file && strncasecmp(url, "http://", 7) &&
      strncasecmp(url, "https://", 8))
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

void gf__mc_source_shown(const char *source, char *out, size_t cap) {
  char red[1600];
  gf__mc_url_redact(source, red, sizeof(red));
  /* a control byte as '?' (the message is one line), a byte past ASCII
   * as %XX (a bidi control echoed raw would reorder the log line) */
  size_t k = 0;
  for (const unsigned char *p = (const unsigned char *)red; *p; p++) {
    if (k + 4 >= cap)
      break;
    if (*p >= 0x80)
      k += (size_t)snprintf(out + k, cap - k, "%%%02X", *p);
    else
      out[k++] = *p < 0x20 || *p == 0x7f ? '?' : (char)*p;
  }
  out[k] = '\0';
  /* Cut long ones: the reason must fit the message (GF_DIAG_MAX). */
  if (k > 160 && cap > 154)
    memcpy(out + 150, "...", 4);
}

void gf_node_cache_scheme_lower(char *source) {
  size_t n = 0; /* the scheme: letters (ours are http, https, file, hf) */
  while (source && n < 6 &&
         ((source[n] >= 'a' && source[n] <= 'z') ||
          (source[n] >= 'A' && source[n] <= 'Z')))
    n++;
  if (n == 0 || n > 5 || strncmp(source + n, "://", 3))
    return;
  for (size_t i = 0; i < n; i++)
    if (source[i] >= 'A' && source[i] <= 'Z')
      source[i] = (char)(source[i] - 'A' + 'a');
}

int gf_node_cache_source_check(const char *source, gf_diag *d) {
  if (!source || !*source)
    return gf_diag_set(d, GF_EINVAL, "'': an empty source");
  bool hf = strncasecmp(source, "hf://", 5) == 0;
  const char *why = hf ? gf__mc_hf_source_why(source) : gf__mc_url_why(source);
  if (!why)
    return 0;
  char shown[200];
  gf__mc_source_shown(source, shown, sizeof(shown));
  if (!hf && !strncmp(why, "is not an http", 14))
    why = "is not an http://, https:// or file:// URL, nor "
          "hf://ORG/NAME[@REVISION]";
  return gf_diag_set(d, GF_EINVAL, "'%s' %s: refused (docs/modelcache.md)",
                     shown, why);
}
