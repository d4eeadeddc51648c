/*
 * Placement scenarios as data: each tests/core/scenarios/NAME.scn holds a
 * cluster, a workload, and runs of placements with what each must give, and
 * this one driver replays them (STYLE.md: test cases as data where they are
 * data). The hand-worked reasoning lives in the file's comments, beside the
 * case it explains.
 *
 * Format: one statement per line, '#' starts a comment, fields are key=value.
 *   workload cpu=C gpus=G milli=M [count=K]   the workload the typical set is
 *                                             built from (fgd and gpufrac need
 *                                             one; 100% of shapes, CPU-only
 *                                             pods counted)
 *   node NAME cpu=C gpus=G [model=T4]          a node (memory 1 TiB)
 *   cache NODE weights=REF [bytes=B] [state=ready|fetching]
 *                                             NODE's weight cache holds REF
 *                                             (state ready by default)
 *   run POLICY [seeds=A-B] [ties=order|uniform]
 *                                             a fresh cluster and engine per
 *                                             seed; the steps that follow
 *                                             belong to this run
 *   apply cpu=C gpus=G milli=M on=NODE/GPU[,GPU..]
 *                                             a placement made at a fixed spot
 *   place cpu=C gpus=G milli=M [weights=REF] expect=NODE[/GPU,..]|nofit
 *                                             the engine's choice, and what it
 *                                             must be (the pod loads REF)
 *   used milli=U                              the cluster's GPU milli in use
 *                                             at this point of the run
 * A malformed line fails the test with the file and line.
 */
#include <dirent.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpufrac/engine.h"
#include "gpufrac/error.h"
#include "gpufrac/frag.h"
#include "gpufrac/model.h"

#ifndef GF_SCENARIO_DIR
#error "GF_SCENARIO_DIR must name tests/core/scenarios"
#endif

#define MAX_LINES 256
#define MAX_TOK 12
#define MAX_NODES 32
#define MAX_WORK 64

typedef struct line {
  int no;
  int ntok;
  char *tok[MAX_TOK];
} line;

typedef struct scenario {
  const char *path;
  char *text;
  line lines[MAX_LINES];
  int nlines;
} scenario;

/* Splits `text` in place into lines of whitespace-separated tokens, comments
 * and blank lines left out. */
static void split(scenario *s) {
  char *p = s->text;
  int no = 0;
  while (*p) {
    no++;
    char *end = strchr(p, '\n');
    if (end)
      *end = '\0';
    char *hash = strchr(p, '#');
    if (hash)
      *hash = '\0';
    line l = {.no = no};
    for (char *q = p; *q;) {
      while (*q == ' ' || *q == '\t' || *q == '\r')
        *q++ = '\0';
      if (!*q)
        break;
      if (l.ntok == MAX_TOK)
        fail_msg("%s:%d: more than %d fields", s->path, no, MAX_TOK);
      l.tok[l.ntok++] = q;
      while (*q && *q != ' ' && *q != '\t' && *q != '\r')
        q++;
    }
    if (l.ntok) {
      if (s->nlines == MAX_LINES)
        fail_msg("%s: more than %d statements", s->path, MAX_LINES);
      s->lines[s->nlines++] = l;
    }
    if (!end)
      break;
    p = end + 1;
  }
}

/* The value of key=... in l (from field `from` on), or NULL. */
static const char *field(const line *l, int from, const char *key) {
  size_t k = strlen(key);
  for (int i = from; i < l->ntok; i++)
    if (strncmp(l->tok[i], key, k) == 0 && l->tok[i][k] == '=')
      return l->tok[i] + k + 1;
  return NULL;
}

static int64_t num(const scenario *s, const line *l, int from, const char *key,
                   int64_t dflt, int required) {
  const char *v = field(l, from, key);
  if (!v) {
    if (required)
      fail_msg("%s:%d: '%s' needs %s=", s->path, l->no, l->tok[0], key);
    return dflt;
  }
  char *end;
  long long x = strtoll(v, &end, 10);
  if (end == v || *end)
    fail_msg("%s:%d: %s='%s' is not a whole number", s->path, l->no, key, v);
  return (int64_t)x;
}

static gf_request request(const scenario *s, const line *l) {
  gf_request r;
  memset(&r, 0, sizeof(r));
  r.cpu_milli = num(s, l, 1, "cpu", 0, 1);
  r.gpu_count = (uint32_t)num(s, l, 1, "gpus", 0, 1);
  r.gpu_milli = (int32_t)num(s, l, 1, "milli", 0, r.gpu_count > 0);
  return r;
}

/* "NODE" or "NODE/G,G,..": the node index (and GPUs, *ngpus = 0 if none
 * are named). */
static uint32_t spot(const scenario *s, const line *l, gf_cluster *c,
                     const char *v, uint8_t *gpus, uint32_t *ngpus) {
  char name[64];
  const char *slash = strchr(v, '/');
  size_t n = slash ? (size_t)(slash - v) : strlen(v);
  if (n == 0 || n >= sizeof(name))
    fail_msg("%s:%d: '%s' is not NODE[/GPU,..]", s->path, l->no, v);
  memcpy(name, v, n);
  name[n] = '\0';
  int idx = gf_cluster_find_node(c, name);
  if (idx < 0)
    fail_msg("%s:%d: no node '%s'", s->path, l->no, name);
  *ngpus = 0;
  for (const char *p = slash ? slash + 1 : NULL; p && *p;) {
    char *end;
    long g = strtol(p, &end, 10);
    if (end == p || g < 0 || g >= GF_MAX_GPUS_PER_NODE ||
        *ngpus == GF_MAX_GPUS_PER_NODE)
      fail_msg("%s:%d: bad GPU list in '%s'", s->path, l->no, v);
    gpus[(*ngpus)++] = (uint8_t)g;
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',')
      fail_msg("%s:%d: bad GPU list in '%s'", s->path, l->no, v);
  }
  return (uint32_t)idx;
}

static gf_cluster *build_cluster(const scenario *s) {
  gf_cluster *c = gf_cluster_new();
  assert_non_null(c);
  for (int i = 0; i < s->nlines; i++) {
    const line *l = &s->lines[i];
    if (strcmp(l->tok[0], "node") != 0)
      continue;
    if (l->ntok < 2 || strchr(l->tok[1], '='))
      fail_msg("%s:%d: node needs a name", s->path, l->no);
    int64_t g = num(s, l, 2, "gpus", 0, 1);
    if (g < 0 || g > GF_MAX_GPUS_PER_NODE)
      fail_msg("%s:%d: gpus=%" PRId64 " out of range", s->path, l->no, g);
    const char *model = field(l, 2, "model");
    gf_gpu_spec spec[GF_MAX_GPUS_PER_NODE];
    memset(spec, 0, sizeof(spec));
    for (int k = 0; k < g; k++)
      spec[k].model = model ? model : "T4";
    int rc = gf_cluster_add_node(c, l->tok[1], num(s, l, 2, "cpu", 0, 1),
                                 1LL << 40, spec, (uint32_t)g, NULL);
    if (rc < 0)
      fail_msg("%s:%d: node %s: %s", s->path, l->no, l->tok[1],
               gf_strerror(rc));
  }
  for (int i = 0; i < s->nlines; i++) {
    const line *l = &s->lines[i];
    if (strcmp(l->tok[0], "cache") != 0)
      continue;
    const char *ref = field(l, 2, "weights");
    const char *st = field(l, 2, "state");
    if (l->ntok < 3 || !ref)
      fail_msg("%s:%d: cache needs NODE weights=REF", s->path, l->no);
    int node = gf_cluster_find_node(c, l->tok[1]);
    if (node < 0)
      fail_msg("%s:%d: no node '%s'", s->path, l->no, l->tok[1]);
    if (st && strcmp(st, "ready") != 0 && strcmp(st, "fetching") != 0)
      fail_msg("%s:%d: state='%s', want ready or fetching", s->path, l->no, st);
    int id = gf_cluster_weights_id(c, ref, num(s, l, 2, "bytes", 0, 0), true);
    if (id < 0 || gf_cluster_node_cache_set(c, (uint32_t)node, id,
                                            st && strcmp(st, "fetching") == 0
                                                ? GF_CACHE_FETCHING
                                                : GF_CACHE_READY) != 0)
      fail_msg("%s:%d: cache %s: not accepted", s->path, l->no, ref);
  }
  return c;
}

/* The weights=REF of a request line, interned in c (0 when absent). */
static uint32_t weights_of(const scenario *s, const line *l, gf_cluster *c) {
  const char *ref = field(l, 1, "weights");
  if (!ref)
    return 0;
  int id = gf_cluster_weights_id(c, ref, 0, true);
  if (id < 0)
    fail_msg("%s:%d: weights='%s' not accepted", s->path, l->no, ref);
  return (uint32_t)id + 1;
}

/* The workload lines, expanded by count, as the typical set's input. */
static size_t workload(const scenario *s, gf_request *w) {
  size_t n = 0;
  for (int i = 0; i < s->nlines; i++) {
    const line *l = &s->lines[i];
    if (strcmp(l->tok[0], "workload") != 0)
      continue;
    gf_request r = request(s, l);
    int64_t k = num(s, l, 1, "count", 1, 0);
    for (int64_t j = 0; j < k; j++) {
      if (n == MAX_WORK)
        fail_msg("%s:%d: workload over %d pods", s->path, l->no, MAX_WORK);
      w[n++] = r;
    }
  }
  return n;
}

static void describe(char *buf, size_t len, gf_cluster *c,
                     const gf_placement *p) {
  int k = snprintf(buf, len, "%s/", gf_cluster_node(c, p->node)->name);
  for (uint32_t g = 0; g < p->ngpus && k > 0 && (size_t)k < len; g++)
    k += snprintf(buf + k, len - (size_t)k, "%s%u", g ? "," : "",
                  (unsigned)p->gpus[g]);
}

/* Replays steps [from, to) of s once, for one seed. Returns the steps
 * checked. */
static int replay(const scenario *s, int run_line, int from, int to,
                  const gf_typical_set *t, uint64_t seed) {
  const line *rl = &s->lines[run_line];
  const char *ties = field(rl, 2, "ties");
  gf_cluster *c = build_cluster(s);
  gf_engine *e;
  gf_engine_config cfg = {.policy = rl->tok[1],
                          .seed = seed,
                          .typical = t,
                          .ties = ties && strcmp(ties, "uniform") == 0
                                      ? GF_TIE_UNIFORM
                                      : GF_TIE_ORDER};
  gf_diag d = {""};
  int rc = gf_engine_new(c, &cfg, &e, &d);
  if (rc)
    fail_msg("%s:%d: policy %s: %s", s->path, rl->no, rl->tok[1], d.msg);
  int checked = 0;
  for (int i = from; i < to; i++) {
    const line *l = &s->lines[i];
    const char *verb = l->tok[0];
    if (strcmp(verb, "apply") == 0) {
      gf_request r = request(s, l);
      r.weights = weights_of(s, l, c);
      const char *on = field(l, 1, "on");
      if (!on)
        fail_msg("%s:%d: apply needs on=NODE/GPU", s->path, l->no);
      gf_placement p;
      memset(&p, 0, sizeof(p));
      p.node = spot(s, l, c, on, p.gpus, &p.ngpus);
      rc = gf_engine_apply(e, &r, &p);
      if (rc)
        fail_msg("%s:%d: apply on %s: %s", s->path, l->no, on, gf_strerror(rc));
    } else if (strcmp(verb, "place") == 0) {
      gf_request r = request(s, l);
      r.weights = weights_of(s, l, c);
      const char *want = field(l, 1, "expect");
      if (!want)
        fail_msg("%s:%d: place needs expect=", s->path, l->no);
      gf_placement p;
      rc = gf_engine_place(e, &r, &p);
      char got[96] = "nofit";
      if (rc == 0)
        describe(got, sizeof(got), c, &p);
      else if (rc != GF_ENOFIT)
        fail_msg("%s:%d: place: %s", s->path, l->no, gf_strerror(rc));
      int ok;
      if (strcmp(want, "nofit") == 0) {
        ok = rc == GF_ENOFIT;
      } else if (rc) {
        ok = 0;
      } else {
        uint8_t g[GF_MAX_GPUS_PER_NODE];
        uint32_t ng;
        uint32_t node = spot(s, l, c, want, g, &ng);
        ok = node == p.node &&
             (ng == 0 || (ng == p.ngpus && memcmp(g, p.gpus, ng) == 0));
      }
      if (!ok)
        fail_msg("%s:%d: %s seed %" PRIu64 ": placed %s, expected %s", s->path,
                 l->no, rl->tok[1], seed, got, want);
      checked++;
    } else if (strcmp(verb, "used") == 0) {
      int64_t want = num(s, l, 1, "milli", 0, 1);
      int64_t got = gf_cluster_gpu_milli_used(c);
      if (got != want)
        fail_msg("%s:%d: %s seed %" PRIu64 ": %" PRId64
                 " milli in use, expected %" PRId64,
                 s->path, l->no, rl->tok[1], seed, got, want);
      checked++;
    } else {
      fail_msg("%s:%d: unknown statement '%s'", s->path, l->no, verb);
    }
  }
  gf_engine_free(e);
  gf_cluster_free(c);
  return checked;
}

static int run_scenario(scenario *s) {
  gf_request w[MAX_WORK];
  size_t nw = workload(s, w);
  gf_typical_set t;
  int have_t = 0;
  if (nw) {
    assert_int_equal(gf_typical_build(w, NULL, nw, 100.0, true, &t), 0);
    have_t = 1;
  }
  int checked = 0, runs = 0;
  for (int i = 0; i < s->nlines; i++) {
    const line *l = &s->lines[i];
    if (strcmp(l->tok[0], "run") != 0)
      continue;
    if (l->ntok < 2)
      fail_msg("%s:%d: run needs a policy", s->path, l->no);
    int end = i + 1;
    while (end < s->nlines && strcmp(s->lines[end].tok[0], "run") != 0 &&
           strcmp(s->lines[end].tok[0], "node") != 0 &&
           strcmp(s->lines[end].tok[0], "cache") != 0 &&
           strcmp(s->lines[end].tok[0], "workload") != 0)
      end++;
    uint64_t lo = 0, hi = 0;
    const char *seeds = field(l, 2, "seeds");
    if (seeds) {
      unsigned long long a, b;
      char tail;
      int k = sscanf(seeds, "%llu-%llu%c", &a, &b, &tail);
      if (k == 1)
        b = a;
      else if (k != 2 || b < a || b - a > 1000)
        fail_msg("%s:%d: seeds='%s' is not A or A-B", s->path, l->no, seeds);
      lo = a;
      hi = b;
    }
    for (uint64_t seed = lo; seed <= hi; seed++)
      checked += replay(s, i, i + 1, end, have_t ? &t : NULL, seed);
    runs++;
  }
  if (have_t)
    gf_typical_release(&t);
  if (runs == 0 || checked == 0)
    fail_msg("%s: no run with a checked step", s->path);
  return checked;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    fail_msg("%s: cannot open", path);
  char *buf = malloc(65537);
  assert_non_null(buf);
  size_t n = fread(buf, 1, 65536, f);
  int big = !feof(f);
  fclose(f);
  if (big)
    fail_msg("%s: over 64 KiB", path);
  buf[n] = '\0';
  return buf;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every .scn file in the directory, in name order; at least one. */
static void test_scenarios(void **st) {
  (void)st;
  DIR *dir = opendir(GF_SCENARIO_DIR);
  assert_non_null(dir);
  char *names[64];
  int n = 0;
  for (struct dirent *de; (de = readdir(dir));) {
    size_t len = strlen(de->d_name);
    if (len > 4 && strcmp(de->d_name + len - 4, ".scn") == 0 && n < 64) {
      names[n] = malloc(len + 1);
      assert_non_null(names[n]);
      memcpy(names[n++], de->d_name, len + 1);
    }
  }
  closedir(dir);
  assert_true(n > 0);
  qsort(names, (size_t)n, sizeof(names[0]), by_name);
  for (int i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", GF_SCENARIO_DIR, names[i]);
    scenario *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->path = path;
    s->text = slurp(path);
    split(s);
    int checked = run_scenario(s);
    printf("scenario %s: %d checks\n", names[i], checked);
    free(s->text);
    free(s);
    free(names[i]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scenarios),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
