/*
 * The kubelet DRA plugin (draplugin.h): pluginregistration v1 on
 * <registry>/<driver>-reg.sock and dra v1 on <plugin_dir>/dra.sock, each on
 * its own gRPC server of h2grpc.c, with one worker that runs the prepare
 * and unprepare callbacks.
 */
#include "draplugin.h"
#include "alloc.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dra/v1/api.pb-c.h"
#include "gpufrac/error.h"
#include "h2grpc.h"
#include "node_dra.h"
#include "pluginregistration/v1/api.pb-c.h"

#define DRAP_PATH_MAX 108 /* sun_path */
#define DRAP_MAX_QUEUED 64

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest
    prep_req;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse
    prep_resp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse__ClaimsEntry
    prep_entry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse
    prep_one;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device pb_device;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest
    unprep_req;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse
    unprep_resp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry
    unprep_entry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourceResponse
    unprep_one;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim pb_claim;

struct gf_drap {
  char driver[254];
  char reg_path[DRAP_PATH_MAX], dra_path[DRAP_PATH_MAX];
  gf_drap_prepare_fn prepare;
  gf_drap_unprepare_fn unprepare;
  gf_drap_log_fn log;
  void *user;
  gf__h2srv *reg, *dra;
  pthread_t reg_thread, dra_thread, worker;
  bool have_reg_thread, have_dra_thread, have_worker;
  struct stat reg_st, dra_st; /* the sockets we made */
  pthread_mutex_t mu;         /* guards the queue and stopping */
  pthread_cond_t cv;
  gf__grpc_jobq jobs;
  bool stopping;
  bool stopped; /* gf__drap_stop has run (the stopping thread's own) */
  atomic_uint_fast64_t regs;
};

enum { R_INFO, R_NOTIFY };
static const gf__h2_method reg_methods[] = {
    [R_INFO] = {"/pluginregistration.Registration/GetInfo", false, false},
    [R_NOTIFY] = {"/pluginregistration.Registration/NotifyRegistrationStatus",
                  false, false},
};
enum { D_PREPARE, D_UNPREPARE };
static const gf__h2_method dra_methods[] = {
    [D_PREPARE] = {"/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
                   "NodePrepareResources",
                   false, true},
    [D_UNPREPARE] = {"/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
                     "NodeUnprepareResources",
                     false, true},
};

static void drap_log(gf_drap *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void drap_log(gf_drap *p, const char *fmt, ...) {
  if (!p->log)
    return;
  char msg[GF_DIAG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  p->log(p->user, msg);
}

/* ---- registration ------------------------------------------------------- */

static void on_reg_call(void *user, size_t m, const uint8_t *req, size_t len,
                        uint64_t ticket, gf__grpc_reply *r) {
  (void)ticket;
  gf_drap *p = user;
  if (m == R_INFO) {
    Pluginregistration__InfoRequest *q =
        pluginregistration__info_request__unpack(NULL, len, req);
    if (!q) {
      gf__grpc_reply_error(r, GF__GRPC_INVALID_ARGUMENT,
                           "the request (%zu bytes) is not an InfoRequest",
                           len);
      return;
    }
    pluginregistration__info_request__free_unpacked(q, NULL);
    char *versions[] = {(char *)"v1.DRAPlugin"};
    Pluginregistration__PluginInfo info = PLUGINREGISTRATION__PLUGIN_INFO__INIT;
    info.type = (char *)"DRAPlugin";
    info.name = p->driver;
    info.endpoint = p->dra_path;
    info.n_supported_versions = 1;
    info.supported_versions = versions;
    gf__grpc_reply_pack(&info.base, r);
    return;
  }
  Pluginregistration__RegistrationStatus *q =
      pluginregistration__registration_status__unpack(NULL, len, req);
  if (!q) {
    gf__grpc_reply_error(r, GF__GRPC_INVALID_ARGUMENT,
                         "the request (%zu bytes) is not a RegistrationStatus",
                         len);
    return;
  }
  if (q->plugin_registered) {
    atomic_fetch_add(&p->regs, 1);
    drap_log(p, "kubelet registered DRA driver %s (endpoint %s)", p->driver,
             p->dra_path);
  } else {
    drap_log(p, "kubelet did not register DRA driver %s: %s", p->driver,
             q->error && q->error[0] ? q->error : "no reason given");
  }
  pluginregistration__registration_status__free_unpacked(q, NULL);
  Pluginregistration__RegistrationStatusResponse o =
      PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;
  gf__grpc_reply_pack(&o.base, r);
}

/* ---- prepare and unprepare (the worker) --------------------------------- */

static bool claim_ok(const pb_claim *c) {
  return c && c->uid && c->uid[0] && c->namespace_ && c->name;
}

/* Are claims[0..n) a call's worth of claims, each with its uid, namespace
 * and name?  false with r INVALID_ARGUMENT saying which is not. */
static bool claims_ok(pb_claim *const *claims, size_t n, gf__grpc_reply *r) {
  if (n > GF_DRAP_MAX_CLAIMS) {
    gf__grpc_reply_error(r, GF__GRPC_INVALID_ARGUMENT,
                         "%zu claims in one call, at most %d", n,
                         GF_DRAP_MAX_CLAIMS);
    return false;
  }
  for (size_t i = 0; i < n; i++)
    if (!claim_ok(claims[i])) {
      gf__grpc_reply_error(r, GF__GRPC_INVALID_ARGUMENT,
                           "claims[%zu] has no uid", i);
      return false;
    }
  return true;
}

static void do_prepare(gf_drap *p, const uint8_t *req, size_t len,
                       gf__grpc_reply *r) {
  prep_req *q =
      k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__unpack(
          NULL, len, req);
  if (!q) {
    gf__grpc_reply_error(
        r, GF__GRPC_INVALID_ARGUMENT,
        "the request (%zu bytes) is not a NodePrepareResourcesRequest", len);
    return;
  }
  size_t n = q->n_claims;
  prep_entry *ents = NULL, **eptr = NULL;
  prep_one *ones = NULL;
  gf_drap_answer *ans = NULL;
  pb_device *devs = NULL, **dptr = NULL;
  char **ids = NULL, **reqs = NULL;
  char(*errs)[GF_DIAG_MAX] = NULL;
  if (!claims_ok(q->claims, n, r))
    goto out;
  reqs = gf__calloc(n * GF_DRAP_MAX_DEVICES + 1, sizeof *reqs);
  ents = gf__calloc(n ? n : 1, sizeof *ents);
  eptr = gf__calloc(n ? n : 1, sizeof *eptr);
  ones = gf__calloc(n ? n : 1, sizeof *ones);
  ans = gf__calloc(n ? n : 1, sizeof *ans);
  errs = gf__calloc(n ? n : 1, sizeof *errs);
  devs = gf__calloc(n * GF_DRAP_MAX_DEVICES + 1, sizeof *devs);
  dptr = gf__calloc(n * GF_DRAP_MAX_DEVICES + 1, sizeof *dptr);
  ids = gf__calloc(2 * n * GF_DRAP_MAX_DEVICES + 1, sizeof *ids);
  if (!ents || !eptr || !ones || !ans || !errs || !devs || !dptr || !ids ||
      !reqs) {
    gf__grpc_reply_error(r, GF__GRPC_RESOURCE_EXHAUSTED, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    const pb_claim *c = q->claims[i];
    k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__claims_entry__init(
        &ents[i]);
    k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resource_response__init(
        &ones[i]);
    ents[i].key = c->uid;
    ents[i].value = &ones[i];
    eptr[i] = &ents[i];
    gf_diag d = {""};
    int rc = p->prepare(p->user, c->namespace_, c->name, c->uid, &ans[i], &d);
    if (rc || ans[i].n > GF_DRAP_MAX_DEVICES) {
      snprintf(errs[i], sizeof errs[i], "%s",
               d.msg[0] ? d.msg : "prepare failed");
      ones[i].error = errs[i];
      drap_log(p, "NodePrepareResources %s/%s (%s): %s", c->namespace_, c->name,
               c->uid, errs[i]);
      continue;
    }
    size_t base = i * GF_DRAP_MAX_DEVICES;
    for (size_t k = 0; k < ans[i].n; k++) {
      gf_drap_device *a = &ans[i].dev[k];
      pb_device *v = &devs[base + k];
      k8s__io__kubelet__pkg__apis__dra__v1__device__init(v);
      reqs[base + k] = a->request;
      v->n_request_names = 1;
      v->request_names = &reqs[base + k];
      v->pool_name = a->pool;
      v->device_name = a->device;
      /* the claim's device, then the driver's (its libraries and device
       * nodes) when there is one */
      char **my = &ids[2 * (base + k)];
      my[0] = a->cdi_id;
      my[1] = a->driver_cdi_id;
      v->n_cdi_device_ids = a->driver_cdi_id[0] ? 2 : 1;
      v->cdi_device_ids = my;
      v->share_id = a->share_id;
      dptr[base + k] = v;
    }
    ones[i].n_devices = ans[i].n;
    ones[i].devices = &dptr[base];
  }
  prep_resp resp =
      K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_RESPONSE__INIT;
  resp.n_claims = n;
  resp.claims = eptr;
  gf__grpc_reply_pack(&resp.base, r);
out:
  gf__free(reqs);
  gf__free(ids);
  gf__free(dptr);
  gf__free(devs);
  gf__free(errs);
  gf__free(ans);
  gf__free(ones);
  gf__free(eptr);
  gf__free(ents);
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__free_unpacked(
      q, NULL);
}

static void do_unprepare(gf_drap *p, const uint8_t *req, size_t len,
                         gf__grpc_reply *r) {
  unprep_req *q =
      k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__unpack(
          NULL, len, req);
  if (!q) {
    gf__grpc_reply_error(
        r, GF__GRPC_INVALID_ARGUMENT,
        "the request (%zu bytes) is not a NodeUnprepareResourcesRequest", len);
    return;
  }
  size_t n = q->n_claims;
  unprep_entry *ents = NULL, **eptr = NULL;
  unprep_one *ones = NULL;
  char(*errs)[GF_DIAG_MAX] = NULL;
  if (!claims_ok(q->claims, n, r))
    goto out;
  ents = gf__calloc(n ? n : 1, sizeof *ents);
  eptr = gf__calloc(n ? n : 1, sizeof *eptr);
  ones = gf__calloc(n ? n : 1, sizeof *ones);
  errs = gf__calloc(n ? n : 1, sizeof *errs);
  if (!ents || !eptr || !ones || !errs) {
    gf__grpc_reply_error(r, GF__GRPC_RESOURCE_EXHAUSTED, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    const pb_claim *c = q->claims[i];
    k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__claims_entry__init(
        &ents[i]);
    k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resource_response__init(
        &ones[i]);
    ents[i].key = c->uid;
    ents[i].value = &ones[i];
    eptr[i] = &ents[i];
    gf_diag d = {""};
    if (p->unprepare(p->user, c->namespace_, c->name, c->uid, &d)) {
      snprintf(errs[i], sizeof errs[i], "%s",
               d.msg[0] ? d.msg : "unprepare failed");
      ones[i].error = errs[i];
      drap_log(p, "NodeUnprepareResources %s/%s (%s): %s", c->namespace_,
               c->name, c->uid, errs[i]);
    }
  }
  unprep_resp resp =
      K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_RESPONSE__INIT;
  resp.n_claims = n;
  resp.claims = eptr;
  gf__grpc_reply_pack(&resp.base, r);
out:
  gf__free(errs);
  gf__free(ones);
  gf__free(eptr);
  gf__free(ents);
  k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__free_unpacked(
      q, NULL);
}

static void *worker_main(void *arg) {
  gf_drap *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stopping && !p->jobs.head)
      pthread_cond_wait(&p->cv, &p->mu);
    if (p->stopping)
      break;
    gf__grpc_job *j = gf__grpc_jobq_pop(&p->jobs);
    pthread_mutex_unlock(&p->mu);
    gf__grpc_reply r = {0};
    if (j->method == D_PREPARE)
      do_prepare(p, j->req, j->len, &r);
    else
      do_unprepare(p, j->req, j->len, &r);
    gf__h2srv_answer(p->dra, j->ticket, &r);
    gf__grpc_job_free(j);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static void on_dra_call(void *user, size_t m, const uint8_t *req, size_t len,
                        uint64_t ticket, gf__grpc_reply *r) {
  gf_drap *p = user;
  gf__grpc_job *j = gf__grpc_job_new(m, req, len, ticket);
  if (!j) {
    gf__grpc_reply_error(r, GF__GRPC_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  pthread_mutex_lock(&p->mu);
  bool full = p->jobs.n >= DRAP_MAX_QUEUED, stopping = p->stopping;
  if (!full && !stopping) {
    gf__grpc_jobq_push(&p->jobs, j);
    pthread_cond_signal(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  if (full || stopping) {
    gf__grpc_job_free(j);
    if (stopping)
      gf__grpc_reply_error(r, GF__GRPC_UNAVAILABLE,
                           "the DRA plugin is stopping");
    else
      gf__grpc_reply_error(r, GF__GRPC_RESOURCE_EXHAUSTED,
                           "%d calls are already waiting; try again",
                           DRAP_MAX_QUEUED);
    return;
  }
  r->later = true;
}

/* ---- sockets ------------------------------------------------------------ */

static int mkdirs(const char *dir, gf_diag *d) {
  char p[DRAP_PATH_MAX * 2];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/')
      continue;
    *s = '\0';
    if (mkdir(p, 0750) != 0 && errno != EEXIST)
      return gf_diag_set(d, GF_EIO, "mkdir %s: %s", p, strerror(errno));
    *s = '/';
  }
  if (mkdir(p, 0750) != 0 && errno != EEXIST)
    return gf_diag_set(d, GF_EIO, "mkdir %s: %s", p, strerror(errno));
  return 0;
}

static void *serve_main(void *arg) {
  gf__h2srv_run(arg);
  return NULL;
}

static int start_thread(pthread_t *t, bool *have, void *(*fn)(void *),
                        void *arg, gf_diag *d) {
  if (pthread_create(t, NULL, fn, arg) != 0)
    return gf_diag_set(d, GF_EIO, "DRA plugin: cannot start a thread");
  *have = true;
  return 0;
}

static int path_of(char *dst, const char *dir, const char *file, gf_diag *d) {
  int n = snprintf(dst, DRAP_PATH_MAX, "%s/%s", dir, file);
  if (n < 0 || n >= DRAP_PATH_MAX)
    return gf_diag_set(d, GF_EINVAL,
                       "DRA plugin: socket path %s/%s is longer than %d bytes",
                       dir, file, DRAP_PATH_MAX - 1);
  return 0;
}

int gf__drap_start(gf_drap **out, const gf_drap_opts *o, gf_diag *d) {
  if (!o->prepare || !o->unprepare || !o->driver || !o->driver[0] ||
      strlen(o->driver) > 63 || strchr(o->driver, '/'))
    return gf_diag_set(d, GF_EINVAL,
                       "DRA plugin: needs a driver name and both callbacks");
  gf_drap *p = gf__calloc(1, sizeof *p);
  if (!p)
    return gf_diag_set(d, GF_ENOMEM, "DRA plugin: out of memory");
  snprintf(p->driver, sizeof p->driver, "%s", o->driver);
  char pdir[DRAP_PATH_MAX * 2], file[128];
  snprintf(pdir, sizeof pdir, "%s",
           o->plugin_dir ? o->plugin_dir : "/var/lib/kubelet/plugins/");
  if (!o->plugin_dir)
    snprintf(pdir, sizeof pdir, "/var/lib/kubelet/plugins/%s", o->driver);
  const char *rdir =
      o->registry_dir ? o->registry_dir : "/var/lib/kubelet/plugins_registry";
  snprintf(file, sizeof file, "%s-reg.sock", o->driver);
  int rc = path_of(p->reg_path, rdir, file, d);
  if (!rc)
    rc = path_of(p->dra_path, pdir, "dra.sock", d);
  if (!rc)
    rc = mkdirs(rdir, d);
  if (!rc)
    rc = mkdirs(pdir, d);
  if (rc) {
    gf__free(p);
    return rc;
  }
  p->prepare = o->prepare;
  p->unprepare = o->unprepare;
  p->log = o->log;
  p->user = o->user;
  atomic_init(&p->regs, 0);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  gf__grpc_jobq_init(&p->jobs);
  /* The DRA service first: kubelet dials it as soon as it sees the
   * registration socket. */
  int fd;
  gf__h2srv_ops dops = {.methods = dra_methods,
                        .nmethods = 2,
                        .call = on_dra_call,
                        .user = p,
                        .idle_ms = o->idle_timeout_ms,
                        .preface_ms = o->preface_timeout_ms};
  gf__h2srv_ops rops = dops;
  rops.methods = reg_methods;
  rops.call = on_reg_call;
  if ((rc = gf__unix_listen(p->dra_path, 16, &p->dra_st, &fd, d)) ||
      (rc = gf__h2srv_new(&p->dra, fd, &dops, d)))
    goto fail;
  if ((rc = start_thread(&p->worker, &p->have_worker, worker_main, p, d)) ||
      (rc = start_thread(&p->dra_thread, &p->have_dra_thread, serve_main,
                         p->dra, d)))
    goto fail;
  if ((rc = gf__unix_listen(p->reg_path, 16, &p->reg_st, &fd, d)) ||
      (rc = gf__h2srv_new(&p->reg, fd, &rops, d)) ||
      (rc = start_thread(&p->reg_thread, &p->have_reg_thread, serve_main,
                         p->reg, d)))
    goto fail;
  *out = p;
  return 0;
fail:
  gf__drap_free(p);
  return rc;
}

uint64_t gf__drap_registrations(const gf_drap *p) {
  return atomic_load(&((gf_drap *)p)->regs);
}

const char *gf__drap_endpoint(const gf_drap *p) { return p->dra_path; }

void gf__drap_stop(gf_drap *p) {
  if (!p || p->stopped)
    return;
  p->stopped = true;
  pthread_mutex_lock(&p->mu);
  p->stopping = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  if (p->reg) {
    gf__h2srv_stop(p->reg);
    if (p->have_reg_thread)
      pthread_join(p->reg_thread, NULL);
  }
  gf__unix_remove_if_ours(p->reg_path, &p->reg_st);
  if (p->have_worker)
    pthread_join(p->worker, NULL); /* it finishes the claim it is on */
  if (p->dra) {
    gf__h2srv_stop(p->dra); /* queued calls: UNAVAILABLE */
    if (p->have_dra_thread)
      pthread_join(p->dra_thread, NULL);
  }
  gf__unix_remove_if_ours(p->dra_path, &p->dra_st);
  gf__grpc_jobq_clear(&p->jobs);
}

void gf__drap_free(gf_drap *p) {
  if (!p)
    return;
  gf__drap_stop(p);
  gf__h2srv_free(p->reg);
  gf__h2srv_free(p->dra);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  gf__free(p);
}

void gf__drap_answer_of(const gf_node_dra_prepared *p, gf_drap_answer *a) {
  a->n = 0;
  /* One CDI device per request when the claim has several (and is not
   * MIG: its spec keeps the one device), so a container gets what it
   * named. */
  bool per = p->per_request;
  for (uint32_t i = 0; i < p->claim.nresults && a->n < GF_DRAP_MAX_DEVICES;
       i++) {
    const gf_node_dra_result *r = &p->claim.results[i];
    gf_drap_device *v = &a->dev[a->n++];
    /* "request/subrequest" (firstAvailable): kubelet compares the names
     * answered here with the container's resources.claims[].request, which
     * names the request. */
    size_t base = strcspn(r->request, "/");
    snprintf(v->request, sizeof(v->request), "%.*s", (int)base, r->request);
    snprintf(v->pool, sizeof(v->pool), "%s", r->pool);
    snprintf(v->device, sizeof(v->device), "%s", r->device);
    snprintf(v->share_id, sizeof(v->share_id), "%s", r->share_id);
    snprintf(v->driver_cdi_id, sizeof(v->driver_cdi_id), "%s",
             p->driver_ids[i]);
    if (per)
      snprintf(v->cdi_id, sizeof(v->cdi_id), "%s=%s_%.*s", GF_NODE_CDI_KIND,
               p->claim.uid, (int)base, r->request);
    else
      snprintf(v->cdi_id, sizeof(v->cdi_id), "%s", p->cdi_id);
  }
}
