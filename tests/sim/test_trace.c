/* The trace reader: the bundled format, and every kind of malformed input
 * giving an error that names the file, the line and the column. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gpufrac/error.h"
#include "gpufrac/trace.h"

static int read_pods(const char *text, gf_pod_list *l, gf_diag *d) {
  FILE *fp = fmemopen((void *)text, strlen(text), "r");
  assert_non_null(fp);
  gf_cluster *c = gf_cluster_new();
  int rc = gf_trace_read_pods(fp, "pods.csv", c, l, d);
  fclose(fp);
  gf_cluster_free(c);
  return rc;
}

static int read_nodes(const char *text, gf_diag *d) {
  FILE *fp = fmemopen((void *)text, strlen(text), "r");
  assert_non_null(fp);
  gf_cluster *c = gf_cluster_new();
  int rc = gf_trace_read_nodes(fp, "nodes.csv", c, d);
  fclose(fp);
  gf_cluster_free(c);
  return rc;
}

static void test_bundled_small(void **st) {
  (void)st;
  gf_cluster *c = gf_cluster_new();
  gf_diag d = {""};
  assert_int_equal(gf_trace_load_nodes(GF_TEST_DATA "/nodes_small.csv", c, &d),
                   0);
  assert_int_equal(gf_cluster_nnodes(c), 4);
  assert_int_equal(gf_cluster_ngpus(c), 18);
  const gf_node *b = gf_cluster_node(c, 1);
  assert_string_equal(b->name, "node-b");
  assert_int_equal(b->cpu_milli, 64000);
  assert_true(b->mem_bytes == 262144LL << 20);
  assert_string_equal(gf_cluster_model_name(c, b->gpus[0].model), "V100M32");
  gf_pod_list l;
  assert_int_equal(
      gf_trace_load_pods(GF_TEST_DATA "/pods_small.csv", c, &l, &d), 0);
  assert_int_equal(l.n, 12);
  assert_string_equal(l.pods[4].name, "pod-04");
  assert_int_equal(l.pods[4].req.gpu_count, 4);
  assert_true(l.pods[4].req.model_mask ==
              1ull << gf_cluster_model_id(c, "V100M32", false));
  assert_true(l.pods[5].req.model_mask ==
              ((1ull << gf_cluster_model_id(c, "T4", false)) |
               (1ull << gf_cluster_model_id(c, "G2", false))));
  assert_string_equal(l.pods[5].gpu_spec, "T4|G2");
  assert_int_equal(l.pods[3].req.gpu_count, 0);
  assert_int_equal(l.pods[3].req.gpu_milli, 0);
  assert_int_equal(gf_request_gpu_demand(&l.pods[4].req), 4000);
  gf_pod_list_release(&l);
  gf_cluster_free(c);
}

static void test_five_column_pods(void **st) {
  (void)st;
  gf_pod_list l;
  gf_diag d;
  assert_int_equal(read_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                             "p1,1000,1024,2,1000\r\n"
                             "\n"
                             "p2,0,0,0,0\n",
                             &l, &d),
                   0);
  assert_int_equal(l.n, 2);
  assert_int_equal(l.pods[0].req.gpu_count, 2);
  gf_pod_list_release(&l);
  /* Columns in another order, quoted fields. */
  assert_int_equal(read_pods("gpu_milli,num_gpu,name,memory_mib,cpu_milli\n"
                             "500,1,\"p,1\",10,\"20\"\n",
                             &l, &d),
                   0);
  assert_string_equal(l.pods[0].name, "p,1");
  assert_int_equal(l.pods[0].req.cpu_milli, 20);
  gf_pod_list_release(&l);
}

/* Each malformed input: the error code and a fragment the message must
 * contain (file, line, column or what is wrong). */
static const struct bad_case {
  const char *text;
  int rc;
  const char *where;
} bad_pods[] = {
    {"", GF_ESYNTAX, "empty file"},
    {"name,cpu_milli,memory_mib,num_gpu\n", GF_ESYNTAX, "gpu_milli"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1x,1,0,0\n", GF_ESYNTAX,
     "pods.csv:2: column cpu_milli"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,-1,1,0,0\n", GF_ERANGE,
     "pods.csv:2: column cpu_milli"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1001\n", GF_ERANGE,
     "column gpu_milli"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,17,1000\n", GF_ERANGE,
     "column num_gpu"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,500\n", GF_EINVAL,
     "pods.csv:2"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,0\n", GF_ERANGE,
     "pods.csv:2: column gpu_milli"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1\n", GF_ESYNTAX,
     "pods.csv:2: 4 fields"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n,1,1,0,0\n", GF_ESYNTAX,
     "column name"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n\"p,1,1,0,0\n", GF_ESYNTAX,
     "unterminated quote"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\np\"q,1,1,0,0\n", GF_ESYNTAX,
     "stray quote"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n\"p\"x,1,1,0,0\n",
     GF_ESYNTAX, "after a closing quote"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,1,1,1,500,A||B\n",
     GF_ESYNTAX, "column gpu_spec"},
    {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
     "p,1,99999999999999999999,0,0\n",
     GF_ERANGE, "column memory_mib"},
};

static void test_bad_pods(void **st) {
  (void)st;
  for (size_t i = 0; i < sizeof(bad_pods) / sizeof(bad_pods[0]); i++) {
    gf_pod_list l = {NULL, 0};
    gf_diag d = {""};
    int rc = read_pods(bad_pods[i].text, &l, &d);
    if (rc != bad_pods[i].rc || !strstr(d.msg, bad_pods[i].where))
      fail_msg("case %zu: rc %s, message '%s'; want %s containing '%s'", i,
               gf_err_name(rc), d.msg, gf_err_name(bad_pods[i].rc),
               bad_pods[i].where);
    assert_null(l.pods); /* nothing half-loaded */
  }
}

static void test_long_and_binary_lines(void **st) {
  (void)st;
  static char text[20000];
  strcpy(text, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n");
  size_t n = strlen(text);
  memset(text + n, 'a', 9000);
  text[n + 9000] = '\0';
  gf_pod_list l;
  gf_diag d;
  assert_int_equal(read_pods(text, &l, &d), GF_ELIMIT);
  assert_non_null(strstr(d.msg, "pods.csv:2: line longer"));
  /* A NUL byte in the middle of a line. */
  static const char nul[] = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                            "p,1\0,1,0,0\n";
  FILE *fp = fmemopen((void *)nul, sizeof(nul) - 1, "r");
  gf_cluster *c = gf_cluster_new();
  assert_int_equal(gf_trace_read_pods(fp, "pods.csv", c, &l, &d), GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "NUL"));
  fclose(fp);
  gf_cluster_free(c);
  /* Too many fields. */
  strcpy(text, "a");
  for (int i = 0; i < 40; i++)
    strcat(text, ",a");
  assert_int_equal(read_pods(text, &l, &d), GF_ELIMIT);
}

static void test_bad_nodes(void **st) {
  (void)st;
  gf_diag d = {""};
  assert_int_equal(read_nodes("sn,cpu_milli,memory_mib,gpu,model\n"
                              "n1,1000,1024,2,T4\n"
                              "n1,1000,1024,2,T4\n",
                              &d),
                   GF_EEXIST);
  assert_non_null(strstr(d.msg, "nodes.csv:3"));
  assert_int_equal(
      read_nodes("sn,cpu_milli,memory_mib,gpu,model\nn1,1000,1024,2,\n", &d),
      GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "no model"));
  assert_int_equal(
      read_nodes("sn,cpu_milli,memory_mib,gpu,model\nn1,1000,1024,99,T4\n", &d),
      GF_ERANGE);
  assert_non_null(strstr(d.msg, "column gpu"));
  assert_int_equal(read_nodes("sn,cpu,memory_mib,gpu,model\n", &d), GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "cpu_milli"));
  gf_cluster *c = gf_cluster_new();
  assert_int_equal(gf_trace_load_nodes("/nonexistent/nodes.csv", c, &d),
                   GF_EIO);
  assert_non_null(strstr(d.msg, "/nonexistent/nodes.csv"));
  gf_cluster_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bundled_small),
      cmocka_unit_test(test_five_column_pods),
      cmocka_unit_test(test_bad_pods),
      cmocka_unit_test(test_long_and_binary_lines),
      cmocka_unit_test(test_bad_nodes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
