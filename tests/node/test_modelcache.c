/*
 * The weight cache's store (src/modelcache/modelcache.c) against file://
 * sources in a scratch directory: the manifest's canonical form and digest (a
 * vector computed with Python's hashlib), hostile manifests, lying sizes
 * and digests, the budget, LRU eviction with pins, restart recovery, single
 * flight, verify.  The HTTP side is test_modelcache_http.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/modelcache.h"
#include "gpufrac/modelcache_prefetch.h"
#include "gpufrac/node.h"
#include "tmpdir.h"

/* Paths here are under a short /tmp/gf_test.XXXXXX; one cut short would
 * fail the assertions that read it back. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

/* ---- helpers ------------------------------------------------------------ */

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

static char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  char *buf = malloc(1 << 20);
  *n = fread(buf, 1, 1 << 20, f);
  fclose(f);
  return buf;
}

static bool exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* A source model <tmpdir>/src-<tag> with `files` files of `size` bytes
 * each (content from tag), its manifest written; hex of the manifest into
 * hex, the source URL into url. */
static void make_source(const char *tag, int files, size_t size, char *hex,
                        char *url, size_t cap) {
  char dir[512], path[600];
  snprintf(dir, sizeof(dir), "%s/src-%s", tmpdir, tag);
  mkdir(dir, 0755);
  snprintf(path, sizeof(path), "%s/sub", dir);
  mkdir(path, 0755);
  char *buf = malloc(size + 1);
  for (int i = 0; i < files; i++) {
    for (size_t k = 0; k < size; k++)
      buf[k] = (char)(tag[0] + (int)k * 7 + i);
    snprintf(path, sizeof(path), "%s/%sw%d.bin", dir, i % 2 ? "sub/" : "", i);
    write_file(path, buf, size);
  }
  free(buf);
  char *text = NULL;
  size_t len = 0;
  gf_diag d = {{0}};
  assert_int_equal(gf_node_cache_manifest_build(dir, &text, &len, &d), 0);
  snprintf(path, sizeof(path), "%s/gpufrac.manifest", dir);
  write_file(path, text, len);
  gf_node_cache_sha256_hex(text, len, hex);
  free(text);
  snprintf(url, cap, "file://%s", dir);
}

static gf_node_cache *open_cache(uint64_t budget) {
  char root[300];
  snprintf(root, sizeof(root), "%s/cache", tmpdir);
  gf_node_cache_opts o = {.root = root, .budget = budget, .retries = 1};
  gf_node_cache *c = NULL;
  gf_diag d = {{0}};
  int rc = gf_node_cache_open(&o, &c, &d);
  if (rc)
    fprintf(stderr, "open: %s\n", d.msg);
  assert_int_equal(rc, 0);
  return c;
}

static int count_dir(const char *sub) {
  char path[400];
  snprintf(path, sizeof(path), "%s/cache/%s", tmpdir, sub);
  char cmd[500];
  snprintf(cmd, sizeof(cmd), "exit $(ls -A '%s' | wc -l)", path);
  int r = system(cmd);
  return WEXITSTATUS(r);
}

/* ---- manifests ---------------------------------------------------------- */

#define HELLO "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
#define EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static void test_manifest_digest(void **state) {
  (void)state;
  /* python3: sha256 over the two lines below. */
  const char *text = "a/x.bin\t6\t" HELLO "\nb\t0\t" EMPTY "\n";
  gf_node_cache_manifest m;
  gf_diag d = {{0}};
  assert_int_equal(gf_node_cache_manifest_parse(text, strlen(text), &m, &d), 0);
  assert_string_equal(
      m.hex,
      "1c7895c9131f525ccbd3cba6f84cb5c4341452ffc779d5dea897b18e531f5eb2");
  assert_int_equal(m.n, 2);
  assert_int_equal(m.bytes, 6);
  assert_string_equal(m.files[0].path, "a/x.bin");
  gf_node_cache_manifest_release(&m);

  /* The builder writes that same text for that tree. */
  char dir[400], path[500];
  snprintf(dir, sizeof(dir), "%s/tree", tmpdir);
  mkdir(dir, 0755);
  snprintf(path, sizeof(path), "%s/a", dir);
  mkdir(path, 0755);
  snprintf(path, sizeof(path), "%s/a/x.bin", dir);
  write_file(path, "hello\n", 6);
  snprintf(path, sizeof(path), "%s/b", dir);
  write_file(path, "", 0);
  char *built = NULL;
  size_t len = 0;
  assert_int_equal(gf_node_cache_manifest_build(dir, &built, &len, &d), 0);
  assert_int_equal(len, strlen(text));
  assert_memory_equal(built, text, len);
  free(built);
}

static void test_manifest_hostile(void **state) {
  (void)state;
  static const struct {
    const char *text, *says;
  } bad[] = {
      {"../x\t1\t" HELLO "\n", "'..'"},
      {"a/../../etc/passwd\t1\t" HELLO "\n", "'..'"},
      {"/etc/passwd\t1\t" HELLO "\n", "absolute"},
      {"./x\t1\t" HELLO "\n", "'.'"},
      {"a//b\t1\t" HELLO "\n", "empty path component"},
      {"a/\t1\t" HELLO "\n", "empty path component"},
      {"\t1\t" HELLO "\n", "empty path"},
      {"a\x01\t1\t" HELLO "\n", "control byte"},
      {"x\t1\t" HELLO "\nx\t1\t" HELLO "\n", "appears twice"},
      {"y\t1\t" HELLO "\nx\t1\t" HELLO "\n", "not sorted"},
      {"a\t1\t" HELLO "\na/b\t1\t" HELLO "\n", "the directory of"},
      {"x\t01\t" HELLO "\n", "not a decimal"},
      {"x\t-1\t" HELLO "\n", "not a decimal"},
      {"x\t18446744073709551616\t" HELLO "\n", "not a decimal"},
      {"x\t18446744073709551615\t" HELLO "\ny\t1\t" HELLO "\n", "past 2^64"},
      {"x\t1\t5891B5B522D5DF086D0FF0B110FBD9D21BB4FC7163AF34D08286A2E846F6BE03"
       "\n",
       "64 lowercase"},
      {"x\t1\t" HELLO "0\n", "64 lowercase"},
      {"x\t1\n", "not <path>"},
      {"x\t1\t" HELLO, "no newline"},
      {"a\t1\t" HELLO "\na.part\t1\t" HELLO "\n", "'.part'"},
      {"w/x.part\t1\t" HELLO "\n", "'.part'"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    gf_node_cache_manifest m;
    gf_diag d = {{0}};
    int rc =
        gf_node_cache_manifest_parse(bad[i].text, strlen(bad[i].text), &m, &d);
    if (rc != GF_ESYNTAX || !strstr(d.msg, bad[i].says))
      fail_msg("case %zu: rc %d, '%s' (wanted '%s')", i, rc, d.msg,
               bad[i].says);
    assert_null(m.files);
  }
}

/* Each allocation of a parse refused alone in turn: GF_ENOMEM, nothing
 * half-filled (ASan: nothing leaked); with none refused, the parse. */
static void test_manifest_alloc_failures(void **state) {
  (void)state;
  const char *text = "a\t1\t" HELLO "\nb\t1\t" HELLO "\nc/d\t1\t" HELLO "\n";
  for (long n = 0;; n++) {
    gf_node_cache_manifest m;
    gf__alloc_fail_once(n);
    int rc = gf_node_cache_manifest_parse(text, strlen(text), &m, NULL);
    long refused = gf__alloc_refused();
    gf__alloc_fail_after(-1);
    if (refused == 0) {
      assert_int_equal(rc, 0);
      assert_int_equal(m.n, 3);
      gf_node_cache_manifest_release(&m);
      break;
    }
    assert_int_equal(rc, GF_ENOMEM);
    assert_null(m.files);
  }
}

static void test_ref_parse(void **state) {
  (void)state;
  char name[64], hex[GF_NODE_CACHE_HEX];
  gf_diag d = {{0}};
  assert_int_equal(gf_node_cache_ref_parse("llama-3-8b@sha256:" HELLO, name,
                                           sizeof(name), hex, &d),
                   0);
  assert_string_equal(name, "llama-3-8b");
  assert_string_equal(hex, HELLO);
  const char *bad[] = {"llama",
                       "@sha256:" HELLO,
                       "x@sha1:" HELLO,
                       "x@sha256:" HELLO "0",
                       "../x@sha256:" HELLO,
                       "x y@sha256:" HELLO};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    assert_int_equal(
        gf_node_cache_ref_parse(bad[i], name, sizeof(name), hex, &d),
        GF_ESYNTAX);
}

/* ---- fetch, publish, reopen -------------------------------------------- */

static void test_fetch_file_source(void **state) {
  (void)state;
  char hex[GF_NODE_CACHE_HEX], url[400], dir[600], path[800];
  make_source("a", 5, 3000, hex, url, sizeof(url));
  gf_node_cache *c = open_cache(0);
  gf_diag d = {{0}};
  int rc = gf_node_cache_fetch(c, "model-a", hex, url, &d);
  if (rc)
    fail_msg("fetch: %s", d.msg);
  assert_int_equal(gf_node_cache_path(c, hex, dir, sizeof(dir)), 0);
  snprintf(path, sizeof(path), "%s/sub/w3.bin", dir);
  size_t n = 0;
  char *got = read_all(path, &n);
  snprintf(path, sizeof(path), "%s/src-a/sub/w3.bin", tmpdir);
  size_t n2 = 0;
  char *want = read_all(path, &n2);
  assert_non_null(got);
  assert_int_equal(n, 3000);
  assert_int_equal(n2, 3000);
  assert_memory_equal(got, want, n);
  free(got);
  free(want);
  gf_node_cache_stats s;
  gf_node_cache_stats_get(c, &s);
  assert_int_equal(s.bytes_fetched, 15000);
  assert_int_equal(s.models, 1);
  assert_int_equal(s.used, 15000);
  /* A second request is a hit: no bytes fetched. */
  assert_int_equal(gf_node_cache_fetch(c, "model-a", hex, url, &d), 0);
  gf_node_cache_stats_get(c, &s);
  assert_int_equal(s.bytes_fetched, 15000);
  assert_int_equal(s.fetch_hit, 1);
  char *js = NULL;
  assert_int_equal(gf_node_cache_models_json(c, &js), 0);
  char want_js[300];
  snprintf(want_js, sizeof(want_js),
           "[{\"name\":\"model-a\",\"digest\":\"sha256:%s\",\"bytes\":15000,"
           "\"state\":\"ready\",\"shared\":true}]",
           hex);
  assert_string_equal(js, want_js);
  gf__free(js);
  gf_node_cache_free(c);
  /* Reopened: still there, nothing removed. */
  c = open_cache(0);
  assert_int_equal(gf_node_cache_path(c, hex, dir, sizeof(dir)), 0);
  gf_node_cache_entry *l = NULL;
  size_t ln = 0;
  assert_int_equal(gf_node_cache_list(c, &l, &ln), 0);
  assert_int_equal(ln, 1);
  assert_string_equal(l[0].name, "model-a");
  assert_int_equal(l[0].bytes, 15000);
  free(l);
  assert_int_equal(count_dir("tmp"), 0);
  gf_node_cache_free(c);
}

/* Nothing of a failed fetch is visible, and the cache holds nothing. */
static void expect_failed(gf_node_cache *c, const char *hex, const char *url,
                          int want, const char *says) {
  gf_diag d = {{0}};
  int rc = gf_node_cache_fetch(c, "m", hex, url, &d);
  if (rc != want || !strstr(d.msg, says))
    fail_msg("rc %d '%s' (wanted %d, '%s')", rc, d.msg, want, says);
  char dir[600];
  assert_int_equal(gf_node_cache_path(c, hex, dir, sizeof(dir)), GF_ENOTFOUND);
  assert_int_equal(count_dir("sha256"), 0);
  gf_node_cache_stats s;
  gf_node_cache_stats_get(c, &s);
  assert_int_equal(s.models + s.fetching, 0);
  assert_int_equal(s.used, 0);
}

static void test_lies(void **state) {
  (void)state;
  char hex[GF_NODE_CACHE_HEX], url[400], path[600];
  gf_node_cache *c = open_cache(0);

  /* The manifest is not the one asked for. */
  make_source("b", 2, 100, hex, url, sizeof(url));
  expect_failed(c, HELLO, url, GF_ESYNTAX, "not the sha256:" HELLO);

  /* A file longer than its manifest says. */
  snprintf(path, sizeof(path), "%s/src-b/w0.bin", tmpdir);
  char longer[130];
  memset(longer, 'L', sizeof(longer));
  write_file(path, longer, sizeof(longer));
  expect_failed(c, hex, url, GF_EIO, "more than the manifest's 100 bytes");

  /* Shorter. */
  write_file(path, "short", 5);
  expect_failed(c, hex, url, GF_EIO, "5 bytes, the manifest says 100");

  /* The right size, the wrong bytes: the part is deleted too. */
  char junk[100];
  memset(junk, 'j', sizeof(junk));
  write_file(path, junk, sizeof(junk));
  expect_failed(c, hex, url, GF_EIO, "the manifest says");
  snprintf(path, sizeof(path), "%s/cache/tmp/%s/files/w0.bin.part", tmpdir,
           hex);
  assert_false(exists(path));

  /* A missing file. */
  snprintf(path, sizeof(path), "%s/src-b/w0.bin", tmpdir);
  unlink(path);
  expect_failed(c, hex, url, GF_EHTTP, "w0.bin");

  /* A source that is not a URL we fetch. */
  expect_failed(c, hex, "ftp://x/y", GF_EINVAL, "not an http://");
  expect_failed(c, hex, "/plain/path", GF_EINVAL, "not an http://");
  expect_failed(c, hex, NULL, GF_EINVAL, "no source was given");

  /* A hostile manifest at the source: nothing outside the cache written. */
  char dir[500];
  snprintf(dir, sizeof(dir), "%s/src-evil", tmpdir);
  mkdir(dir, 0755);
  char text[300];
  snprintf(text, sizeof(text), "../../escaped\t6\t%s\n", HELLO);
  snprintf(path, sizeof(path), "%s/gpufrac.manifest", dir);
  write_file(path, text, strlen(text));
  char evil[GF_NODE_CACHE_HEX];
  gf_node_cache_sha256_hex(text, strlen(text), evil);
  snprintf(url, sizeof(url), "file://%s", dir);
  expect_failed(c, evil, url, GF_ESYNTAX, "'..'");
  snprintf(path, sizeof(path), "%s/escaped", tmpdir);
  assert_false(exists(path));
  gf_node_cache_free(c);
}

/* ---- budget, LRU, pins -------------------------------------------------- */

static void test_budget_lru_pins(void **state) {
  (void)state;
  char ha[GF_NODE_CACHE_HEX], hb[GF_NODE_CACHE_HEX], hc[GF_NODE_CACHE_HEX];
  char ua[400], ub[400], uc[400], dir[600];
  make_source("a", 2, 1000, ha, ua, sizeof(ua)); /* 2000 bytes each */
  make_source("b", 2, 1000, hb, ub, sizeof(ub));
  make_source("c", 2, 1000, hc, uc, sizeof(uc));
  gf_diag d = {{0}};

  /* Larger than the whole budget. */
  gf_node_cache *c = open_cache(1999);
  expect_failed(c, ha, ua, GF_ENOFIT, "budget of 1999");
  gf_node_cache_free(c);

  c = open_cache(4500); /* two fit, not three */
  assert_int_equal(gf_node_cache_fetch(c, "a", ha, ua, &d), 0);
  assert_int_equal(gf_node_cache_fetch(c, "b", hb, ub, &d), 0);
  assert_int_equal(gf_node_cache_fetch(c, "a", ha, ua, &d), 0); /* a used */
  gf_node_cache_free(c);

  /* Restart: the LRU order is kept, so c evicts b, not a. */
  c = open_cache(4500);
  assert_int_equal(gf_node_cache_fetch(c, "c", hc, uc, &d), 0);
  assert_int_equal(gf_node_cache_path(c, ha, dir, sizeof(dir)), 0);
  assert_int_equal(gf_node_cache_path(c, hb, dir, sizeof(dir)), GF_ENOTFOUND);
  assert_int_equal(gf_node_cache_path(c, hc, dir, sizeof(dir)), 0);

  /* a is least recent now, but pinned: b's fetch evicts c. */
  assert_int_equal(gf_node_cache_pin(c, ha, "pod-1"), 0);
  assert_int_equal(gf_node_cache_fetch(c, "c", hc, uc, &d), 0); /* c used */
  assert_int_equal(gf_node_cache_fetch(c, "b", hb, ub, &d), 0);
  assert_int_equal(gf_node_cache_path(c, ha, dir, sizeof(dir)), 0);
  assert_int_equal(gf_node_cache_path(c, hc, dir, sizeof(dir)), GF_ENOTFOUND);
  assert_int_equal(gf_node_cache_evict(c, ha, &d), GF_ESTATE);
  gf_node_cache_free(c);

  /* Pins survive a restart; with both pinned, nothing fits. */
  c = open_cache(4500);
  assert_int_equal(gf_node_cache_pin(c, hb, "pod-2"), 0);
  assert_int_equal(gf_node_cache_fetch(c, "c", hc, uc, &d), GF_ENOFIT);
  assert_non_null(strstr(d.msg, "4000 of the budget's 4500 are pinned"));
  assert_int_equal(gf_node_cache_path(c, ha, dir, sizeof(dir)), 0);
  assert_int_equal(gf_node_cache_path(c, hb, dir, sizeof(dir)), 0);
  /* pod-1 leaves: a may go now. */
  assert_int_equal(gf_node_cache_unpin(c, NULL, "pod-1"), 1);
  assert_int_equal(gf_node_cache_fetch(c, "c", hc, uc, &d), 0);
  assert_int_equal(gf_node_cache_path(c, ha, dir, sizeof(dir)), GF_ENOTFOUND);
  assert_int_equal(gf_node_cache_evict(c, hc, &d), 0);
  assert_int_equal(gf_node_cache_path(c, hc, dir, sizeof(dir)), GF_ENOTFOUND);
  gf_node_cache_free(c);

  /* A budget lowered across a restart is met at open (b pinned stays). */
  c = open_cache(2000);
  gf_node_cache_stats s;
  gf_node_cache_stats_get(c, &s);
  assert_int_equal(s.used, 2000);
  assert_int_equal(gf_node_cache_path(c, hb, dir, sizeof(dir)), 0);
  gf_node_cache_free(c);
}

/* ---- restart recovery --------------------------------------------------- */

static void test_recovery(void **state) {
  (void)state;
  char ha[GF_NODE_CACHE_HEX], ua[400], path[800], dir[600];
  make_source("a", 3, 500, ha, ua, sizeof(ua));
  gf_node_cache *c = open_cache(0);
  gf_diag d = {{0}};
  assert_int_equal(gf_node_cache_fetch(c, "a", ha, ua, &d), 0);
  gf_node_cache_free(c);

  /* Leftovers of a crash: a half-done temp dir without a manifest, one
   * whose manifest is not its name, stray files, a model dir whose
   * manifest does not hash to its name, one with a truncated file. */
  char root[400];
  snprintf(root, sizeof(root), "%s/cache", tmpdir);
  snprintf(path, sizeof(path), "%s/tmp/%s", root, HELLO);
  mkdir(path, 0755);
  snprintf(path, sizeof(path), "%s/tmp/%s/files", root, HELLO);
  mkdir(path, 0755);
  snprintf(path, sizeof(path), "%s/tmp/%s/files/w.part", root, HELLO);
  write_file(path, "xx", 2);
  snprintf(path, sizeof(path), "%s/tmp/%s", root, EMPTY);
  mkdir(path, 0755);
  snprintf(path, sizeof(path), "%s/tmp/%s/manifest", root, EMPTY);
  write_file(path, "x\t1\t" HELLO "\n", 4 + 64 + 1);
  snprintf(path, sizeof(path), "%s/tmp/stray", root);
  write_file(path, "s", 1);
  snprintf(path, sizeof(path), "%s/sha256/%s", root, EMPTY);
  mkdir(path, 0755);
  snprintf(path, sizeof(path), "%s/sha256/not-hex", root);
  write_file(path, "s", 1);
  /* An unfinished fetch that can resume: kept. */
  char hb[GF_NODE_CACHE_HEX], ub[400];
  make_source("b", 2, 500, hb, ub, sizeof(ub));
  snprintf(path, sizeof(path), "%s/tmp/%s", root, hb);
  mkdir(path, 0755);
  snprintf(dir, sizeof(dir), "%s/src-b/gpufrac.manifest", tmpdir);
  size_t mlen = 0;
  char *mtext = read_all(dir, &mlen);
  snprintf(path, sizeof(path), "%s/tmp/%s/manifest", root, hb);
  write_file(path, mtext, mlen);
  free(mtext);

  c = open_cache(0);
  assert_int_equal(count_dir("tmp"), 1);
  assert_int_equal(count_dir("sha256"), 1);
  assert_int_equal(gf_node_cache_path(c, ha, dir, sizeof(dir)), 0);
  gf_node_cache_free(c);

  /* A model file truncated behind the cache's back: dropped at open. */
  snprintf(path, sizeof(path), "%s/sha256/%s/files/sub/w1.bin", root, ha);
  chmod(path, 0644);
  truncate(path, 10);
  c = open_cache(0);
  assert_int_equal(gf_node_cache_path(c, ha, dir, sizeof(dir)), GF_ENOTFOUND);
  assert_int_equal(count_dir("sha256"), 0);
  gf_node_cache_free(c);

  /* A state file that is garbage: the directories rebuild it. */
  assert_int_equal(gf_node_cache_fetch(c = open_cache(0), "a", ha, ua, &d), 0);
  gf_node_cache_free(c);
  snprintf(path, sizeof(path), "%s/state.json", root);
  write_file(path, "{\"version\":1,\"models\":[{", 24);
  c = open_cache(0);
  assert_int_equal(gf_node_cache_path(c, ha, dir, sizeof(dir)), 0);
  gf_node_cache_free(c);
}

/* A model changed on disk after publish: verify finds and removes it. */
static void keep_why(void *user, const char *hex, const char *name,
                     const char *why) {
  (void)hex;
  (void)name;
  snprintf(user, 1200, "%s", why);
}

static bool never_alive(void *user, const char *holder) {
  (void)user;
  (void)holder;
  return false;
}

static void test_verify(void **state) {
  (void)state;
  char ha[GF_NODE_CACHE_HEX], ua[400], path[800], dir[600];
  make_source("a", 2, 500, ha, ua, sizeof(ua));
  gf_node_cache *c = open_cache(0);
  gf_diag d = {{0}};
  assert_int_equal(gf_node_cache_fetch(c, "a", ha, ua, &d), 0);
  assert_int_equal(gf_node_cache_verify(c, NULL, NULL), 0);
  assert_int_equal(gf_node_cache_path(c, ha, dir, sizeof(dir)), 0);
  snprintf(path, sizeof(path), "%s/w0.bin", dir);
  chmod(path, 0644);
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  fputc('Z', f);
  fclose(f);
  assert_int_equal(gf_node_cache_verify(c, NULL, NULL), 1);
  assert_int_equal(gf_node_cache_path(c, ha, dir, sizeof(dir)), GF_ENOTFOUND);

  /* In use (issue 28 item 5): out of service, not handed to the next pod;
   * the pod that has it keeps its copy; the next pod's request fetches it
   * again, whole; the copy goes once its pins do. */
  assert_int_equal(gf_node_cache_fetch(c, "a", ha, ua, &d), 0);
  assert_int_equal(gf_node_cache_pin(c, ha, "pod-1"), 0);
  assert_int_equal(gf_node_cache_path(c, ha, dir, sizeof(dir)), 0);
  snprintf(path, sizeof(path), "%s/w0.bin", dir);
  chmod(path, 0644);
  f = fopen(path, "r+b");
  assert_non_null(f);
  fputc('Z', f);
  fclose(f);
  char why[1200] = "";
  assert_int_equal(gf_node_cache_verify(c, keep_why, why), 1);
  assert_non_null(strstr(why, "taken out of service"));
  assert_int_equal(gf_node_cache_path(c, ha, dir, sizeof(dir)), GF_ENOTFOUND);
  assert_int_equal(count_dir("quarantine"), 1);
  assert_int_equal(gf_node_cache_fetch(c, "a", ha, ua, &d), 0);
  assert_int_equal(gf_node_cache_verify(c, NULL, NULL), 0);
  assert_int_equal(gf_node_cache_unpin(c, ha, "pod-1"), 1);
  assert_int_equal(gf_node_cache_prune(c, never_alive, NULL), 0);
  gf_node_cache_free(c);
  c = open_cache(0); /* the quarantined copy, unpinned, goes at open */
  assert_int_equal(count_dir("quarantine"), 0);
  gf_node_cache_free(c);
}

/* ---- single flight ------------------------------------------------------ */

static volatile int g_in_flight;

static void slow_log(void *user, const char *line) {
  (void)user;
  if (strstr(line, ": fetching ")) {
    g_in_flight = 1;
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

typedef struct sf_arg {
  gf_node_cache *c;
  const char *hex, *url;
  int rc;
} sf_arg;

static void *sf_fetch(void *p) {
  sf_arg *a = p;
  gf_diag d = {{0}};
  a->rc = gf_node_cache_fetch(a->c, "a", a->hex, a->url, &d);
  return NULL;
}

static void test_single_flight(void **state) {
  (void)state;
  char ha[GF_NODE_CACHE_HEX], ua[400], root[400];
  make_source("a", 4, 4096, ha, ua, sizeof(ua));
  snprintf(root, sizeof(root), "%s/cache", tmpdir);
  gf_node_cache_opts o = {.root = root, .log = slow_log};
  gf_node_cache *c = NULL;
  gf_diag d = {{0}};
  assert_int_equal(gf_node_cache_open(&o, &c, &d), 0);
  g_in_flight = 0;
  sf_arg a1 = {c, ha, ua, -1}, a2 = {c, ha, ua, -1};
  pthread_t t1, t2;
  assert_int_equal(pthread_create(&t1, NULL, sf_fetch, &a1), 0);
  while (!g_in_flight) {
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(pthread_create(&t2, NULL, sf_fetch, &a2), 0);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  assert_int_equal(a1.rc, 0);
  assert_int_equal(a2.rc, 0);
  gf_node_cache_stats s;
  gf_node_cache_stats_get(c, &s);
  assert_int_equal(s.bytes_fetched, 4 * 4096); /* one download */
  assert_int_equal(s.fetch_ok, 1);
  gf_node_cache_free(c);
}

static void test_metrics(void **state) {
  (void)state;
  gf_node_cache *c = open_cache(12345);
  char *t = NULL;
  size_t n = 0;
  assert_int_equal(gf_node_cache_metrics_text(c, &t, &n), 0);
  /* the whole page, byte for byte (what scrapers and promtool read) */
  static const char want[] =
      "# HELP gpufrac_model_cache_bytes_fetched_total Bytes received from "
      "model sources.\n"
      "# TYPE gpufrac_model_cache_bytes_fetched_total counter\n"
      "gpufrac_model_cache_bytes_fetched_total 0\n"
      "# HELP gpufrac_model_cache_fetches_total Model requests by result "
      "(hit: already cached).\n"
      "# TYPE gpufrac_model_cache_fetches_total counter\n"
      "gpufrac_model_cache_fetches_total{result=\"ok\"} 0\n"
      "gpufrac_model_cache_fetches_total{result=\"failed\"} 0\n"
      "gpufrac_model_cache_fetches_total{result=\"hit\"} 0\n"
      "# HELP gpufrac_model_cache_evictions_total Models evicted.\n"
      "# TYPE gpufrac_model_cache_evictions_total counter\n"
      "gpufrac_model_cache_evictions_total 0\n"
      "# HELP gpufrac_model_cache_used_bytes Bytes of cached models and "
      "fetches under way.\n"
      "# TYPE gpufrac_model_cache_used_bytes gauge\n"
      "gpufrac_model_cache_used_bytes 0\n"
      "# HELP gpufrac_model_cache_budget_bytes The cache's byte budget (0: "
      "none).\n"
      "# TYPE gpufrac_model_cache_budget_bytes gauge\n"
      "gpufrac_model_cache_budget_bytes 12345\n"
      "# HELP gpufrac_model_cache_models Models by state.\n"
      "# TYPE gpufrac_model_cache_models gauge\n"
      "gpufrac_model_cache_models{state=\"ready\"} 0\n"
      "gpufrac_model_cache_models{state=\"fetching\"} 0\n";
  assert_string_equal(t, want);
  assert_int_equal(n, strlen(want));
  gf__free(t);
  gf_node_cache_free(c);
}

/* Keep-warm: after the last pin goes, the files are advised in and, within
 * the budget, mlock'ed; after keep_s they are let go; a pinned model is not
 * "kept" (it is in use). */
static void test_keep_warm(void **state) {
  (void)state;
  char ha[GF_NODE_CACHE_HEX], ua[400];
  make_source("a", 2, 8192, ha, ua, sizeof(ua));
  gf_node_cache *c = open_cache(0);
  gf_diag d = {{0}};
  assert_int_equal(gf_node_cache_fetch(c, "a", ha, ua, &d), 0);
  int64_t now = (int64_t)time(NULL);
  assert_int_equal(gf_node_cache_keep_warm(c, 60, 1 << 20, now), 0);
  assert_int_equal(gf_node_cache_pin(c, ha, "pod"), 0);
  assert_int_equal(gf_node_cache_keep_warm(c, 60, 1 << 20, now), 0);
  assert_int_equal(gf_node_cache_unpin(c, ha, "pod"), 1);
  assert_int_equal(gf_node_cache_keep_warm(c, 60, 1 << 20, now), 1);
  gf_node_cache_stats s;
  gf_node_cache_stats_get(c, &s);
  assert_int_equal(s.locked, 2 * 8192);
  assert_int_equal(gf_node_cache_keep_warm(c, 60, 1 << 20, now + 1), 0);
  assert_int_equal(gf_node_cache_keep_warm(c, 60, 1 << 20, now + 61), 1);
  gf_node_cache_stats_get(c, &s);
  assert_int_equal(s.locked, 0);
  /* A budget smaller than a file locks nothing, still advises. */
  assert_int_equal(gf_node_cache_pin(c, ha, "pod"), 0);
  assert_int_equal(gf_node_cache_unpin(c, ha, "pod"), 1);
  now = (int64_t)time(NULL);
  assert_int_equal(gf_node_cache_keep_warm(c, 60, 100, now), 1);
  gf_node_cache_stats_get(c, &s);
  assert_int_equal(s.locked, 0);
  assert_int_equal(gf_node_cache_drop_page_cache(c, ha), 0);
  /* Cancelled: the next fetch stops at once, nothing published. */
  char hb[GF_NODE_CACHE_HEX], ub[400];
  make_source("b", 1, 100, hb, ub, sizeof(ub));
  gf_node_cache_cancel(c);
  assert_int_equal(gf_node_cache_fetch(c, "b", hb, ub, &d), GF_ESTATE);
  gf_node_cache_free(c);
}

/* ---- the prefetch ConfigMap ------------------------------------------- */

static void test_prefetch(void **state) {
  (void)state;
  gf_node_prefetch p;
  gf_node_prefetch_init(&p);
  snprintf(p.model, sizeof(p.model), "Llama_3.8b@sha256:%s", HELLO);
  snprintf(p.source, sizeof(p.source), "https://models.example/llama");
  snprintf(p.selector, sizeof(p.selector), "pool=gpu,zone=a");
  json_t *cm = gf_node_prefetch_configmap(&p, "ns1");
  assert_non_null(cm);
  assert_string_equal(json_string_value(json_object_get(
                          json_object_get(cm, "metadata"), "name")),
                      "gpufrac-prefetch-llama-3-8b-5891b5b522d5");
  gf_node_prefetch q;
  gf_diag d = {{0}};
  assert_int_equal(gf_node_prefetch_parse(cm, &q, &d), 0);
  assert_string_equal(q.model, p.model);
  json_t *labels =
      json_pack("{s:s,s:s,s:s}", "pool", "gpu", "zone", "a", "other", "x");
  json_t *wrong = json_pack("{s:s,s:s}", "pool", "gpu", "zone", "ab");
  assert_true(gf_node_prefetch_wants(&q, "n1", labels));
  assert_false(gf_node_prefetch_wants(&q, "n1", wrong));
  assert_false(gf_node_prefetch_wants(&q, "n1", NULL));
  json_decref(labels);
  json_decref(wrong);
  /* By names. */
  json_t *data = json_object_get(cm, "data");
  json_object_del(data, "nodeSelector");
  json_object_set_new(data, "nodeNames", json_string("n10,n2"));
  assert_int_equal(gf_node_prefetch_parse(cm, &q, &d), 0);
  assert_true(gf_node_prefetch_wants(&q, "n2", NULL));
  assert_true(gf_node_prefetch_wants(&q, "n10", NULL));
  assert_false(gf_node_prefetch_wants(&q, "n1", NULL));
  /* A Hugging Face repository is a source too (its digest pinned in
   * data.model); a malformed one is refused when fetched. */
  json_object_set_new(data, "source", json_string("hf://acme/tiny@main"));
  assert_int_equal(gf_node_prefetch_parse(cm, &q, &d), 0);
  assert_string_equal(q.source, "hf://acme/tiny@main");
  json_object_set_new(data, "source",
                      json_string("https://models.example/llama"));
  /* Hostile or incomplete declarations are refused, naming the field. */
  static const struct {
    const char *key, *value, *says;
  } bad[] = {
      {"model", "llama", "data.model"},
      {"source", "ftp://x", "data.source"},
      {"source", "hf:/acme/x", "data.source"},
      {"nodeSelector", "pool", "give exactly one"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    json_t *c2 = json_deep_copy(cm);
    json_object_set_new(json_object_get(c2, "data"), bad[i].key,
                        json_string(bad[i].value));
    int rc = gf_node_prefetch_parse(c2, &q, &d);
    if (rc != GF_ESYNTAX || !strstr(d.msg, bad[i].says))
      fail_msg("case %zu: rc %d '%s'", i, rc, d.msg);
    json_decref(c2);
  }
  json_object_del(data, "nodeNames");
  json_object_set_new(data, "nodeSelector", json_string("a=b,=c"));
  assert_int_equal(gf_node_prefetch_parse(cm, &q, &d), GF_ESYNTAX);
  json_object_set_new(data, "nodeSelector", json_integer(3));
  assert_int_equal(gf_node_prefetch_parse(cm, &q, &d), GF_ESYNTAX);
  json_decref(cm);
}

static void test_prefetch_pick(void **state) {
  (void)state;
  char inv_has[300];
  snprintf(inv_has, sizeof(inv_has),
           "{\"version\":1,\"gpus\":[],\"models\":[{\"name\":\"m\","
           "\"digest\":\"sha256:%s\",\"bytes\":1,\"state\":\"ready\"}]}",
           HELLO);
  const char *inv = "{\"version\":1,\"gpus\":[]}";
  json_t *list = json_pack(
      "{s:[{s:{s:s,s:{s:s}}},{s:{s:s,s:{s:s}}},{s:{s:s,s:{s:s}},s:{s:b}},"
      "{s:{s:s}},{s:{s:s,s:{s:s}}}]}",
      "items", "metadata", "name", "n-a", "annotations", "gpufrac.io/inventory",
      inv, "metadata", "name", "n-b", "annotations", "gpufrac.io/inventory",
      inv, "metadata", "name", "n-cordoned", "annotations",
      "gpufrac.io/inventory", inv_has, "spec", "unschedulable", 1, "metadata",
      "name", "n-nogpu", "metadata", "name", "n-has", "annotations",
      "gpufrac.io/inventory", inv_has);
  assert_non_null(list);
  char names[200];
  /* The node holding the model first; cordoned and GPU-less never. */
  assert_int_equal(gf_node_prefetch_pick(list, HELLO, 1, names, sizeof(names)),
                   1);
  assert_string_equal(names, "n-has");
  assert_int_equal(gf_node_prefetch_pick(list, HELLO, 10, names, sizeof(names)),
                   3);
  assert_non_null(strstr(names, "n-a"));
  assert_non_null(strstr(names, "n-b"));
  assert_null(strstr(names, "n-cordoned"));
  assert_null(strstr(names, "n-nogpu"));
  json_decref(list);
}

/* A pod names a source only under the node's model_pod_sources (the agent
 * fetches as root on the node's network: a tenant's URL must not reach the
 * metadata service or the node's ports), each prefix ending in '/'. */
static void test_pod_sources(void **state) {
  (void)state;
  assert_false(gf_node_cache_source_allowed(NULL, "https://m.example/a"));
  assert_false(gf_node_cache_source_allowed("", "https://m.example/a"));
  const char *allow = "https://m.example/models/,file:///srv/models/";
  assert_true(
      gf_node_cache_source_allowed(allow, "https://m.example/models/l"));
  assert_true(gf_node_cache_source_allowed(allow, "file:///srv/models/x"));
  assert_false(gf_node_cache_source_allowed(allow, "https://m.example/other"));
  assert_false(gf_node_cache_source_allowed(allow, "file:///etc/"));
  assert_false(
      gf_node_cache_source_allowed(allow, "http://169.254.169.254/latest/"));
  /* a prefix without its '/' never matches: it would let a longer host in */
  assert_false(gf_node_cache_source_allowed("https://m.example",
                                            "https://m.example.evil.net/x"));

  char hex[GF_NODE_CACHE_HEX], url[400];
  make_source("p", 2, 100, hex, url, sizeof(url));
  gf_node_cache *c = open_cache(0); /* no pod sources */
  gf_diag d = {{0}};
  assert_int_equal(gf_node_cache_fetch_for_pod(c, "m", hex, url, &d),
                   GF_EINVAL);
  assert_non_null(strstr(d.msg, "model_pod_sources"));
  gf_node_cache_stats st;
  gf_node_cache_stats_get(c, &st);
  assert_int_equal(st.bytes_fetched, 0);
  assert_int_equal(st.models, 0);
  gf_node_cache_free(c);

  char root[300], prefix[400];
  snprintf(root, sizeof(root), "%s/cache", tmpdir);
  snprintf(prefix, sizeof(prefix), "file://%s/", tmpdir);
  /* one file at a time, in the manifest's order: which parts a failed
   * fetch leaves must not depend on how two workers race */
  gf_node_cache_opts o = {
      .root = root, .retries = 1, .parallel = 1, .pod_sources = prefix};
  assert_int_equal(gf_node_cache_open(&o, &c, &d), 0);
  /* A pod's fetch that fails (a file shorter than the manifest says)
   * leaves no parts behind: they are outside the budget, so failing fetches
   * one after another would fill the disk.  An operator's keeps them. */
  char path[600];
  snprintf(path, sizeof(path), "%s/src-p/w0.bin", tmpdir);
  write_file(path, "short", 5);
  assert_int_equal(gf_node_cache_fetch(c, "m", hex, url, &d), GF_EIO);
  assert_true(count_dir("tmp") > 0);
  assert_int_equal(gf_node_cache_fetch(c, "m", hex, url, &d), GF_EIO);
  assert_non_null(strstr(d.msg, "5 bytes")); /* the operator sees why */
  assert_int_equal(gf_node_cache_fetch_for_pod(c, "m", hex, url, &d), GF_EIO);
  assert_int_equal(count_dir("tmp"), 0);
  /* ... a pod does not: the real size (or sha256) of what the source sent
   * would let it read a file out try by try; the agent's log has it */
  assert_null(strstr(d.msg, "5 bytes"));
  assert_non_null(strstr(d.msg, "agent's log"));
  /* ... unless the caller retries (the agent's model loader, issue 28
   * item 3): the verified file stays for the next try, until it gives up */
  gf_node_cache_req kr = {.name = "m",
                          .hex = hex,
                          .source = url,
                          .ns = "ns1",
                          .holder = "pod-k",
                          .keep_parts = true};
  char kdir[600];
  assert_int_equal(gf_node_cache_acquire(c, &kr, kdir, sizeof(kdir), &d),
                   GF_EIO);
  /* (the manifest lists sub/w1.bin first: it is verified before w0 fails) */
  snprintf(path, sizeof(path), "%s/cache/tmp/%s/files/sub/w1.bin", tmpdir, hex);
  assert_true(exists(path));
  assert_int_equal(gf_node_cache_drop_parts(c, hex), 0);
  assert_int_equal(count_dir("tmp"), 0);
  make_source("p", 2, 100, hex, url, sizeof(url)); /* whole again */
  int rc = gf_node_cache_fetch_for_pod(c, "m", hex, url, &d);
  if (rc)
    fail_msg("under the prefix: %s", d.msg);
  gf_node_cache_free(c);

  /* the config key refuses a prefix that does not end in '/' */
  gf_node_config cfg;
  gf_node_config_init(&cfg);
  const char *bad = "model_pod_sources = https://m.example\n";
  assert_int_equal(gf_node_config_parse(&cfg, bad, strlen(bad), "t", &d),
                   GF_ESYNTAX);
  const char *good =
      "model_pod_sources = https://m.example/,file:///srv/models/\n";
  assert_int_equal(gf_node_config_parse(&cfg, good, strlen(good), "t", &d), 0);
  assert_string_equal(cfg.model_pod_sources,
                      "https://m.example/,file:///srv/models/");
}

/* hf:// sources in the node config (issue 28 item 8): the hub's endpoint,
 * its token file and a CA bundle as keys, hf://ORG/ prefixes for pods and
 * shared models; a pod's hf:// source only under model_pod_sources, and a
 * hub that cannot be reached fails the pod's fetch with the details in the
 * log only (the pod sees "the node agent's log says why"). */
static void test_hf_config(void **state) {
  (void)state;
  gf_node_config cfg;
  gf_node_config_init(&cfg);
  gf_diag d = {{0}};
  const char *good = "model_hf_endpoint = https://hub.example:8443\n"
                     "model_hf_token_file = /var/run/secrets/hf/token\n"
                     "model_ca_file = /etc/gpufrac/ca.pem\n"
                     "model_pod_sources = hf://acme/,https://m.example/\n"
                     "model_shared_sources = hf://public-org/\n";
  int rc = gf_node_config_parse(&cfg, good, strlen(good), "t", &d);
  if (rc)
    fail_msg("good config: %s", d.msg);
  assert_string_equal(cfg.model_hf_endpoint, "https://hub.example:8443");
  assert_string_equal(cfg.model_hf_token_file, "/var/run/secrets/hf/token");
  assert_string_equal(cfg.model_ca_file, "/etc/gpufrac/ca.pem");
  assert_string_equal(cfg.model_pod_sources, "hf://acme/,https://m.example/");
  assert_string_equal(cfg.model_shared_sources, "hf://public-org/");
  const char *bad[] = {
      "model_hf_endpoint = hub.example\n", "model_hf_token_file = token\n",
      "model_ca_file = ca.pem\n", "model_pod_sources = hf://acme\n",
      "model_pod_sources = hf:///\n"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    gf_node_config_init(&cfg);
    assert_int_equal(
        gf_node_config_parse(&cfg, bad[i], strlen(bad[i]), "t", &d),
        GF_ESYNTAX);
    assert_non_null(strstr(d.msg, "t:"));
  }

  char root[300];
  snprintf(root, sizeof(root), "%s/cache", tmpdir);
  gf_node_cache_opts o = {.root = root,
                          .retries = 1,
                          .pod_sources = "hf://acme/",
                          .hf_endpoint = "http://127.0.0.1:1"};
  gf_node_cache *c = NULL;
  assert_int_equal(gf_node_cache_open(&o, &c, &d), 0);
  char dir[512], hex[GF_NODE_CACHE_HEX];
  memset(hex, 'a', 64);
  hex[64] = '\0';
  gf_node_cache_req r = {.name = "m",
                         .hex = hex,
                         .source = "hf://other/m",
                         .ns = "team",
                         .holder = "uid-1"};
  assert_int_equal(gf_node_cache_acquire(c, &r, dir, sizeof(dir), &d),
                   GF_EINVAL);
  assert_non_null(strstr(d.msg, "model_pod_sources"));
  r.source = "hf://acme/m@0123456789abcdef0123456789abcdef01234567";
  assert_int_equal(gf_node_cache_acquire(c, &r, dir, sizeof(dir), &d),
                   GF_EHTTP);
  assert_non_null(strstr(d.msg, "the node agent's log says why"));
  assert_null(strstr(d.msg, "127.0.0.1"));
  r.source = "hf://acme/../m";
  assert_int_equal(gf_node_cache_acquire(c, &r, dir, sizeof(dir), &d),
                   GF_EINVAL);
  /* the operator's fetch names the digest by the hub's listing: none
   * needed, but only for hf:// */
  char got[GF_NODE_CACHE_HEX];
  assert_int_equal(
      gf_node_cache_fetch_source(c, "m", NULL, "https://m.example/x", got, &d),
      GF_EINVAL);
  gf_node_cache_free(c);
}

/* One config text: 0 or the code, with its sentence in d. */
static int parse_cfg(const char *text, gf_diag *d) {
  gf_node_config cfg;
  gf_node_config_init(&cfg);
  return gf_node_config_parse(&cfg, text, strlen(text), "t", d);
}

/* Issue 28's leftovers, items 1 and 2: a source with a user name and
 * password or a dot segment, an empty port, and other forms that do not
 * say what they seem to are refused by one check wherever a source, a
 * prefix or a hub endpoint is read: a prefetch ConfigMap (as `gpufrac cache
 * prefetch` refuses it before writing one: test_options.sh), the node
 * config's prefixes and endpoint, an operator's fetch; each saying what
 * and where, never the password. */
static void test_source_forms(void **state) {
  (void)state;
  static const struct {
    const char *src, *why;
  } bad[] = {
      {"https://u:s3cret@models.example/llama", "user name or password"},
      {"https://s3cret@models.example/llama", "user name or password"},
      /* a password with a '/' (a stranger's finding: shown, and called a
       * port that is not a number) */
      {"https://AKIA:wJal/s3cret@models.example/llama",
       "user name or password"},
      {"https://AKIA:s3cret/x/y@models.example/llama", "user name or password"},
      {"https://models.example/public/../private", "'..' path segment"},
      {"https://models.example/a/./b", "'..' path segment"},
      {"https://models.example:/llama", "empty port"},
      {"https://models.example:99999/llama", "port out of"},
      {"https://models.example:8x/llama", "port that is not a number"},
      {"https://models.example/a//b", "empty path segment"},
      {"https://models.example/llama?sig=1", "query"},
      {"https://models.example/a%2e%2e/b", "encoded"},
      {"https://models.example/a%zz", "escape"},
      {"https:///llama", "no host"},
      {"file:///srv/models/../etc", "'..' path segment"},
      {"file://host/srv/models", "names a host"},
      {"hf://acme/tiny@main/./x", "revision"},
      {"hf://acme/tiny@v1//x", "revision"},
      {"hf://acme/../tiny", "hf://ORG/NAME"},
      {"ftp://models.example/llama", "not an http://"},
  };
  gf_node_prefetch p;
  gf_node_prefetch_init(&p);
  snprintf(p.model, sizeof(p.model), "m@sha256:%s", HELLO);
  snprintf(p.names, sizeof(p.names), "n1");
  gf_node_cache *c = open_cache(1 << 20);
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    /* (1) a prefetch ConfigMap carrying it: refused by the agent */
    snprintf(p.source, sizeof(p.source), "%s", bad[i].src);
    json_t *cm = gf_node_prefetch_configmap(&p, "ns1");
    assert_non_null(cm);
    gf_node_prefetch q;
    gf_diag d = {{0}};
    int rc = gf_node_prefetch_parse(cm, &q, &d);
    json_decref(cm);
    if (rc != GF_ESYNTAX || !strstr(d.msg, "data.source") ||
        !strstr(d.msg, bad[i].why) || strstr(d.msg, "s3cret"))
      fail_msg("configmap with source %s: %s (%s)", bad[i].src, gf_err_name(rc),
               d.msg);
    /* (2) an operator's fetch of it */
    rc = gf_node_cache_fetch(c, "m", HELLO, bad[i].src, &d);
    if (rc != GF_EINVAL || !strstr(d.msg, bad[i].why) ||
        strstr(d.msg, "s3cret"))
      fail_msg("fetch from %s: %s (%s)", bad[i].src, gf_err_name(rc), d.msg);
  }
  gf_node_cache_free(c);
  /* (3) the node config: prefixes and the hub endpoint, the line named */
  static const struct {
    const char *text, *why;
  } badcfg[] = {
      {"model_pod_sources = https://models.example:/x/\n", "empty port"},
      {"model_pod_sources = https://m.example/a/../b/\n", "'..' path segment"},
      {"model_shared_sources = https://m.example/./\n", "'..' path segment"},
      {"model_pod_sources = https://u:s3cret@m.example/\n", "user name"},
      {"model_pod_sources = file:///srv//models/\n", "empty path segment"},
      {"model_hf_endpoint = https://hub.example:\n", "empty port"},
      {"model_hf_endpoint = https://hub.example/a/../b\n", "'..' path segment"},
      {"model_hf_endpoint = https://hub.example/./api\n", "'..' path segment"},
      {"model_hf_endpoint = https://hub.example:0\n", "port out of"},
  };
  for (size_t i = 0; i < sizeof(badcfg) / sizeof(badcfg[0]); i++) {
    gf_diag d = {{0}};
    int rc = parse_cfg(badcfg[i].text, &d);
    if (rc != GF_ESYNTAX || !strstr(d.msg, "t:1") ||
        !strstr(d.msg, badcfg[i].why) || strstr(d.msg, "s3cret"))
      fail_msg("%s: %s (%s)", badcfg[i].text, gf_err_name(rc), d.msg);
  }
  /* a long source: its reason still in the message (a stranger saw it
   * cut off, the source echoed whole before it) */
  char lng[2100] = "https://models.example/";
  memset(lng + strlen(lng), 'a', 2030);
  lng[2060] = '\0';
  gf_diag dl = {{0}};
  if (gf_node_cache_source_check(lng, &dl) != GF_EINVAL ||
      !strstr(dl.msg, "longer than 2047 bytes"))
    fail_msg("a 2060-byte source: %s", dl.msg);
  snprintf(lng + 480, sizeof(lng) - 480, "/%%2e%%2e/x");
  if (gf_node_cache_source_check(lng, &dl) != GF_EINVAL ||
      !strstr(dl.msg, "encoded") || !strstr(dl.msg, "docs/modelcache.md"))
    fail_msg("a 490-byte source: %s", dl.msg);
  /* what is fine stays fine */
  static const char *const good[] = {
      "https://models.example/llama", "https://models.example:8443/m/",
      "http://127.0.0.1:9/x", "http://[::1]:9/x", "file:///srv/models/llama",
      "hf://acme/tiny", "hf://acme/tiny@refs/pr/1", "https://m.example/a%20b",
      /* an '@' in the path is no password */
      "https://m.example:8443/org@v1/m", "http://[::1]:9/org@v1/m"};
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    gf_diag d = {{0}};
    if (gf_node_cache_source_check(good[i], &d))
      fail_msg("%s refused: %s", good[i], d.msg);
  }
  gf_diag d = {{0}};
  if (parse_cfg("model_pod_sources = https://m.example:8443/x/,file:///a/\n"
                "model_hf_endpoint = http://[::1]:9/hub/\n",
                &d))
    fail_msg("good config refused: %s", d.msg);
}

/* A stranger's hostile sources (after test_source_forms): hosts that are
 * neither an RFC 1123 name, a dotted-quad IPv4 address nor a bracketed
 * IPv6 one; path segments and characters a server or a reader may take for
 * a traversal or for something else ("..;", a double encoding, an
 * overlong UTF-8 '.', a fullwidth dot, a bidi control); each refused
 * saying why, the message all ASCII (a bidi control echoed into a log would
 * reorder what the reader sees).  A scheme in capitals is a scheme
 * (RFC 3986: case-insensitive), taken as its lower case. */
static void test_source_hostile(void **state) {
  (void)state;
  char l64[80] = "https://", l63[80] = "https://";
  memset(l64 + 8, 'a', 64);
  memcpy(l64 + 72, ".ex/m", 6);
  memset(l63 + 8, 'a', 63);
  memcpy(l63 + 71, ".ex/m", 6);
  static const struct {
    const char *src, *why;
  } bad[] = {
      {"https://[1:2:3:4:5:6:7:8:9]/m", "not an IPv6 address"},
      {"https://[::1::2]/m", "not an IPv6 address"},
      {"https://[]/m", "empty IPv6 host"},
      {"https://-h/m", "starts or ends with '-'"},
      {"https://h-.example/m", "starts or ends with '-'"},
      {"https://h..x/m", "empty label"},
      {"https://.h/m", "empty label"},
      {"https://h.example./m", "empty label"},
      {"https://a_b.example/m", "not a name or an address"},
      {"https://999.1.1.1/m", "not an IPv4 address"},
      {"https://1.2.3.4.5/m", "not an IPv4 address"},
      {"https://127.1/m", "not an IPv4 address"},
      {"https://2130706433/m", "not an IPv4 address"},
      {"https://0x7f.0.0.1/m", "not an IPv4 address"},
      {"https://010.0.0.1/m", "not an IPv4 address"},
      {"https://m.example/a/..;/b", "'..' path segment"},
      {"https://m.example/a/..;x=1/b", "'..' path segment"},
      {"https://m.example/a/.;/b", "'..' path segment"},
      {"https://m.example/a/%252e%252e/b", "doubly encoded"},
      {"https://m.example/a/%c0%ae%c0%ae/b", "not UTF-8"},
      {"https://m.example/a/%e0%80%af/b", "not UTF-8"},
      {"https://m.example/a/\xef\xbc\x8e\xef\xbc\x8e/b", "looks like"},
      {"https://m.example/a/%EF%BC%8E%EF%BC%8E/b", "looks like"},
      {"https://m.example/a\xef\xbc\x8f"
       "b",
       "looks like"},
      {"https://m.example/a\xe2\x80\xae"
       "b/m",
       "bidirectional"},
      {"https://m.example/a%e2%81%a6b/m", "bidirectional"},
      {"https://m.example/a\xe2\x80\x8b"
       "b/m",
       "invisible"},
      {"https://m.example/a\xc2\xa0"
       "b/m",
       "invisible"},
  };
  gf_node_cache *c = open_cache(1 << 20);
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]) + 3; i++) {
    const char *src = i < sizeof(bad) / sizeof(bad[0])    ? bad[i].src
                      : i == sizeof(bad) / sizeof(bad[0]) ? l64
                      /* raw bytes that are not UTF-8: an overlong '.' */
                      : i == sizeof(bad) / sizeof(bad[0]) + 1
                          ? "https://m.example/a/\xc0\xae\xc0\xae/b"
                          : "https://m.example/a\xff/b";
    const char *why = i < sizeof(bad) / sizeof(bad[0])    ? bad[i].why
                      : i == sizeof(bad) / sizeof(bad[0]) ? "longer than 63"
                                                          : "not UTF-8";
    gf_diag d = {{0}};
    int rc = gf_node_cache_fetch(c, "m", HELLO, src, &d);
    bool ascii = true;
    for (const char *p = d.msg; *p; p++)
      ascii = ascii && (unsigned char)*p < 0x80;
    if (rc != GF_EINVAL || !strstr(d.msg, why) || !ascii)
      fail_msg("fetch from %s: %s (%s)", src, gf_err_name(rc), d.msg);
  }
  gf_node_cache_free(c);
  static const char *const good[] = {
      "https://a-b.example/m",     "https://0.0.0.0/m",
      "https://255.255.255.255/m", "http://[::ffff:1.2.3.4]:9/m",
      "https://123.example/m",     "https://m.example/caf\xc3\xa9/x",
      "https://m.example/a;v=1/b", "HTTPS://m.example/m",
      "Http://127.0.0.1:9/x",      "FILE:///srv/models/m",
      "HF://acme/tiny@main"};
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    gf_diag d = {{0}};
    if (gf_node_cache_source_check(good[i], &d))
      fail_msg("%s refused: %s", good[i], d.msg);
  }
  if (gf_node_cache_source_check(l63, NULL))
    fail_msg("a 63-byte label refused");
  /* a capital scheme is its lower case: in a prefetch ConfigMap, in the
   * node config's prefixes, and matched against them */
  gf_node_prefetch p, q;
  gf_node_prefetch_init(&p);
  snprintf(p.model, sizeof(p.model), "m@sha256:%s", HELLO);
  snprintf(p.names, sizeof(p.names), "n1");
  snprintf(p.source, sizeof(p.source), "HTTPS://m.example/m");
  json_t *cm = gf_node_prefetch_configmap(&p, "ns1");
  gf_diag d = {{0}};
  int rc = gf_node_prefetch_parse(cm, &q, &d);
  json_decref(cm);
  if (rc)
    fail_msg("prefetch of HTTPS://: %s", d.msg);
  assert_string_equal(q.source, "https://m.example/m");
  gf_node_config cfg;
  gf_node_config_init(&cfg);
  const char *t = "model_pod_sources = HTTPS://m.example/,File:///srv/m/\n"
                  "model_hf_endpoint = HTTP://[::1]:9/hub\n";
  if (gf_node_config_parse(&cfg, t, strlen(t), "t", &d))
    fail_msg("capital schemes in the config: %s", d.msg);
  assert_string_equal(cfg.model_pod_sources,
                      "https://m.example/,file:///srv/m/");
  assert_string_equal(cfg.model_hf_endpoint, "http://[::1]:9/hub");
  /* a pod's FILE:// source under a file:// prefix, fetched */
  char hex[GF_NODE_CACHE_HEX], url[600], up[620], root[300], prefix[400];
  make_source("cap", 1, 100, hex, url, sizeof(url));
  snprintf(up, sizeof(up), "FILE%s", url + 4);
  snprintf(root, sizeof(root), "%s/cache", tmpdir);
  snprintf(prefix, sizeof(prefix), "file://%s/", tmpdir);
  gf_node_cache_opts o = {.root = root, .retries = 1, .pod_sources = prefix};
  assert_int_equal(gf_node_cache_open(&o, &c, &d), 0);
  rc = gf_node_cache_fetch_for_pod(c, "m", hex, up, &d);
  if (rc)
    fail_msg("a pod's %s under %s: %s", up, prefix, d.msg);
  gf_node_cache_free(c);
}

#define COMMIT40 "0123456789abcdef0123456789abcdef01234567"

/* Issue 28's hf:// leftovers: a model_pod_sources / model_shared_sources
 * entry naming one repository (hf://ORG/NAME) matches it at any revision
 * and nothing else; an endpoint with userinfo, a query or a fragment, and
 * a hub token with a non-loopback http:// endpoint, are refused when the
 * config is read (and when the cache is opened), saying what and where; a
 * pod's hf:// source pins its commit. */
static void test_hf_prefix_repo(void **state) {
  (void)state;
  gf_diag d = {{0}};
  /* (1) a repository as a prefix */
  const char *repo = "model_pod_sources = hf://acme/tiny,hf://acme/big/\n"
                     "model_shared_sources = hf://pub/m\n";
  if (parse_cfg(repo, &d))
    fail_msg("hf://ORG/NAME as a prefix: %s", d.msg);
  assert_true(gf_node_cache_source_allowed("hf://acme/tiny", "hf://acme/tiny"));
  assert_true(gf_node_cache_source_allowed("hf://acme/tiny",
                                           "hf://acme/tiny@" COMMIT40));
  assert_true(
      gf_node_cache_source_allowed("x/,hf://acme/big/", "hf://acme/big@main"));
  assert_false(gf_node_cache_source_allowed("hf://acme/tiny",
                                            "hf://acme/tiny-other@main"));
  assert_false(
      gf_node_cache_source_allowed("hf://acme/tiny", "hf://acme/tinyx"));
  assert_false(
      gf_node_cache_source_allowed("hf://acme/big/", "hf://acme/big-x"));
  assert_false(
      gf_node_cache_source_allowed("hf://acme/tiny", "hf://acme/tiny/x"));
  assert_true(gf_node_cache_source_allowed("hf://acme/", "hf://acme/any@v1"));
  const char *badpre[] = {"model_pod_sources = hf://acme/tiny/x\n",
                          "model_pod_sources = hf://acme/ti ny\n",
                          "model_pod_sources = hf://acme//\n",
                          "model_shared_sources = hf://a/b@main\n"};
  for (size_t i = 0; i < sizeof(badpre) / sizeof(badpre[0]); i++) {
    assert_int_equal(parse_cfg(badpre[i], &d), GF_ESYNTAX);
    assert_non_null(strstr(d.msg, "t:"));
  }
}

static void test_hf_endpoint_refused(void **state) {
  (void)state;
  gf_diag d = {{0}};
  /* (2) the endpoint: scheme, host, port and path only */
  struct {
    const char *text, *why;
  } bad[] = {
      {"model_hf_endpoint = https://hub.example/?x=1\n", "query"},
      {"model_hf_endpoint = https://u:s3cret@hub.example\n", "user"},
      {"model_hf_endpoint = https://u@hub.example/api\n", "user"},
      {"model_hf_endpoint = https://\n", "host"},
      /* (3) a token only over https:// or to loopback http:// */
      {"model_hf_token_file = /t\nmodel_hf_endpoint = http://hub.example\n",
       "https://"},
      {"model_hf_endpoint = http://10.0.0.1:8080\nmodel_hf_token_file = /t\n",
       "https://"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    int rc = parse_cfg(bad[i].text, &d);
    if (rc != GF_ESYNTAX || !strstr(d.msg, "t:") ||
        !strstr(d.msg, "model_hf_endpoint") || !strstr(d.msg, bad[i].why) ||
        strstr(d.msg, "s3cret"))
      fail_msg("%s: %s (%s)", bad[i].text, gf_err_name(rc), d.msg);
  }
  const char *ok[] = {
      "model_hf_token_file = /t\nmodel_hf_endpoint = http://127.0.0.1:9\n",
      "model_hf_endpoint = http://localhost:9/hub\nmodel_hf_token_file = /t\n",
      "model_hf_endpoint = http://[::1]:9\nmodel_hf_token_file = /t\n",
      "model_hf_endpoint = https://hub.example/api\nmodel_hf_token_file = /t\n",
      "model_hf_endpoint = http://hub.example\n"}; /* no token: fine */
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
    if (parse_cfg(ok[i], &d))
      fail_msg("%s: %s", ok[i], d.msg);
  char root[300];
  snprintf(root, sizeof(root), "%s/cache", tmpdir);
  gf_node_cache_opts o = {.root = root,
                          .retries = 1,
                          .pod_sources = "hf://acme/m",
                          .hf_endpoint = "http://hub.example:80",
                          .hf_token_file = "/t"};
  gf_node_cache *c = NULL;
  assert_int_equal(gf_node_cache_open(&o, &c, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "model_hf_endpoint"));
  assert_null(c);
  o.hf_endpoint = "https://u:s3cret@hub.example";
  assert_int_equal(gf_node_cache_open(&o, &c, &d), GF_EINVAL);
  assert_null(strstr(d.msg, "s3cret"));
  o.hf_endpoint = "https://hub.example/#f"; /* ('#' starts a config comment) */
  assert_int_equal(gf_node_cache_open(&o, &c, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "fragment"));
  o.hf_endpoint = "https://hub.example/p?x";
  o.hf_token_file = NULL;
  assert_int_equal(gf_node_cache_open(&o, &c, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "query"));
}

static void test_hf_pod_pins(void **state) {
  (void)state;
  gf_diag d = {{0}};
  /* (4) a pod's source pins the commit */
  char root[300];
  snprintf(root, sizeof(root), "%s/cache", tmpdir);
  gf_node_cache_opts o = {.root = root,
                          .retries = 1,
                          .pod_sources = "hf://acme/",
                          .hf_endpoint = "http://127.0.0.1:1"};
  gf_node_cache *c = NULL;
  assert_int_equal(gf_node_cache_open(&o, &c, &d), 0);
  char dir[512], hex[GF_NODE_CACHE_HEX];
  memset(hex, 'a', 64);
  hex[64] = '\0';
  gf_node_cache_req r = {.name = "m",
                         .hex = hex,
                         .source = "hf://acme/m@" COMMIT40,
                         .ns = "team",
                         .holder = "uid-1"};
  assert_int_equal(gf_node_cache_acquire(c, &r, dir, sizeof(dir), &d),
                   GF_EHTTP); /* allowed; no hub there */
  /* 40 hex digits, some upper case: not a commit as the hub names them */
  static const char mixed[] = "hf://acme/m@0123456789ABCDEF"
                              "0123456789abcdef01234567";
  const char *unpinned[] = {"hf://acme/m", "hf://acme/m@main",
                            "hf://acme/m@v1.0", mixed};
  for (size_t i = 0; i < sizeof(unpinned) / sizeof(unpinned[0]); i++) {
    r.source = unpinned[i];
    int rc = gf_node_cache_acquire(c, &r, dir, sizeof(dir), &d);
    if (rc != GF_EINVAL || !strstr(d.msg, "commit"))
      fail_msg("%s: %s (%s)", unpinned[i], gf_err_name(rc), d.msg);
  }
  gf_node_cache_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_manifest_digest, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test(test_manifest_hostile),
      cmocka_unit_test(test_ref_parse),
      cmocka_unit_test(test_manifest_alloc_failures),
      cmocka_unit_test_setup_teardown(test_fetch_file_source, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_lies, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_budget_lru_pins, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_recovery, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_verify, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_single_flight, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_metrics, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_keep_warm, setup_tmp, teardown_tmp),
      cmocka_unit_test(test_prefetch),
      cmocka_unit_test(test_prefetch_pick),
      cmocka_unit_test_setup_teardown(test_pod_sources, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_hf_config, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_hf_prefix_repo, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_hf_endpoint_refused, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_source_forms, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_source_hostile, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_hf_pod_pins, setup_tmp,
                                      teardown_tmp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
