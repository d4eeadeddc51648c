/* libFuzzer target: the weight cache's manifest parser and the pod
 * annotation's model reference (src/modelcache/modelcache.c).  A manifest comes
 * from a model source on the network; parsing it must never crash, and
 * what it accepts must be canonical: writing the parsed files back gives
 * the input byte for byte (so one text has one digest), every path is
 * relative with no "." or ".." component, no path is another's directory,
 * the sizes add up, and the digest is the sha256 of the input.  Seeds:
 * tests/fuzz/seeds/modelcache (deep: 505 components; chain: each path a
 * prefix of the next; dirconflict: a file and its directory apart;
 * src-*: model sources, gf_node_cache_source_check: hosts, '..;', double
 * encodings, overlong UTF-8, fullwidth dots, bidi controls, capital
 * schemes among them). */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/diag.h"
#include "gpufrac/modelcache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_path(const char *p) {
  if (!*p || p[0] == '/' || strstr(p, "//"))
    abort();
  const char *c = p;
  for (;;) {
    const char *sl = strchr(c, '/');
    size_t n = sl ? (size_t)(sl - c) : strlen(c);
    if (n == 0 || (n == 1 && c[0] == '.') ||
        (n == 2 && c[0] == '.' && c[1] == '.'))
      abort();
    if (!sl)
      break;
    c = sl + 1;
  }
}

/* An accepted source's invariants (docs/modelcache.md, "Sources"), s
 * with its scheme in lower case (accepted the same way). */
static void check_source(const char *s) {
  if (!strncmp(s, "hf://", 5)) {
    if (strstr(s, "..") || strstr(s + 5, "//"))
      abort();
    return;
  }
  const char *a = strstr(s, "://");
  if (!a || (strncmp(s, "http://", 7) && strncmp(s, "https://", 8) &&
             strncmp(s, "file:///", 8)))
    abort();
  a += 3;
  size_t an = strcspn(a, "/");
  if (memchr(a, '@', an) || strpbrk(s, "?#\\ ") || (an && a[an - 1] == ':'))
    abort();
  /* a host name: no empty label, none starting or ending with '-' */
  const char *hend = memchr(a, ':', an);
  size_t hn = a[0] == '[' ? 0 : hend ? (size_t)(hend - a) : an;
  for (size_t i = 0; i < hn; i++)
    if ((i == 0 && (a[i] == '.' || a[i] == '-')) ||
        (i + 1 == hn && (a[i] == '.' || a[i] == '-')) ||
        (a[i] == '.' && (a[i + 1] == '.' || a[i + 1] == '-')) ||
        (a[i] == '-' && a[i + 1] == '.') || (unsigned char)a[i] >= 0x80)
      abort();
  for (const char *p = a + an; p && *p == '/'; p = strchr(p + 1, '/')) {
    size_t n = strcspn(p + 1, "/;"); /* ';' parameters dropped */
    if ((n == 1 && p[1] == '.') || (n == 2 && p[1] == '.' && p[2] == '.') ||
        (n == 0 && (p[1] == '/' || p[1] == ';')))
      abort();
  }
  /* no double encoding, no byte that starts an overlong form, no bidi
   * control (U+202A..E, U+2066..9) raw */
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if ((p[0] == '%' && p[1] == '2' && p[2] == '5' && isxdigit(p[3]) &&
         isxdigit(p[4])) ||
        p[0] == 0xc0 || p[0] == 0xc1 || p[0] >= 0xf5 ||
        (p[0] == 0xe2 && p[1] == 0x80 && p[2] >= 0xaa && p[2] <= 0xae) ||
        (p[0] == 0xe2 && p[1] == 0x81 && p[2] >= 0xa6 && p[2] <= 0xa9))
      abort();
}

/* A refusal's message: one line of ASCII (a bidi control echoed would
 * reorder the log line a reader sees). */
static void check_message(const char *m) {
  if (!m[0])
    abort();
  for (const unsigned char *p = (const unsigned char *)m; *p; p++)
    if (*p < 0x20 || *p >= 0x7f)
      abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  gf_node_cache_manifest m;
  gf_diag d = {""};
  if (gf_node_cache_manifest_parse(text, size, &m, &d) == 0) {
    char *out = malloc(size + 1);
    size_t at = 0;
    uint64_t sum = 0;
    for (size_t i = 0; i < m.n; i++) {
      check_path(m.files[i].path);
      if (i && strcmp(m.files[i - 1].path, m.files[i].path) >= 0)
        abort();
      int w =
          snprintf(out + at, size + 1 - at, "%s\t%llu\t%s\n", m.files[i].path,
                   (unsigned long long)m.files[i].size, m.files[i].hex);
      if (w < 0 || (size_t)w > size - at)
        abort(); /* longer than the input: not what was read */
      at += (size_t)w;
      sum += m.files[i].size;
    }
    if (at != size || memcmp(out, text, size) != 0 || sum != m.bytes)
      abort();
    /* no path is also another's directory (the parser's check is linear;
     * this one is the plain quadratic one) */
    for (size_t i = 0; i < m.n; i++) {
      size_t pl = strlen(m.files[i].path);
      for (size_t j = 0; j < m.n; j++)
        if (j != i && !strncmp(m.files[j].path, m.files[i].path, pl) &&
            m.files[j].path[pl] == '/')
          abort();
    }
    char hex[GF_NODE_CACHE_HEX];
    gf_node_cache_sha256_hex(text, size, hex);
    if (strcmp(hex, m.hex) != 0)
      abort();
    free(out);
    gf_node_cache_manifest_release(&m);
  } else if (m.files || m.n || !d.msg[0]) {
    abort(); /* empty on failure, and a reason */
  }
  /* The same bytes as a pod's gpufrac.io/model value. */
  char ref[512], name[GF_NODE_CACHE_NAME_MAX], h[GF_NODE_CACHE_HEX];
  size_t n = size < sizeof(ref) - 1 ? size : sizeof(ref) - 1;
  memcpy(ref, data, n);
  ref[n] = '\0';
  if (gf_node_cache_ref_parse(ref, name, sizeof(name), h, &d) == 0 &&
      (strlen(h) != 64 || !name[0] || strchr(name, '/')))
    abort();
  /* ... and as a model source (gf_node_cache_source_check): what it
   * accepts has no user information, no empty port, no dot or empty path
   * segment, no query; what it refuses says why without a password. */
  if (gf_node_cache_source_check(ref, &d) == 0) {
    gf_node_cache_scheme_lower(ref);
    if (gf_node_cache_source_check(ref, &d) != 0)
      abort(); /* the lower-case scheme is the same source */
    check_source(ref);
  } else {
    check_message(d.msg);
  }
  return 0;
}
