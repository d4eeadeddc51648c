/* Lease-based leader election (coordination.k8s.io/v1), after client-go's
 * rules: expiry is judged by when *we* last saw the lease change, on our own
 * clock; every write carries the resourceVersion we read. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "internal.h"

#define ID_MAX 256
#define STAMP_MAX 64

struct gf_kube_leader {
  gf_kube *k;
  char *ns;
  char *name;
  char *identity;
  long dur_s;
  long renew_deadline_s;
  long retry_s;
  int64_t (*now_us)(void *);
  void *clock_user;
  void (*on_started)(void *);
  void (*on_stopped)(void *);
  void *user;
  void (*on_error)(void *, int, const char *);
  gf__errstate err; /* last error reported to on_error */
  char path[900];
  char create_path[400];

  /* What we last observed, and when (our clock). */
  bool have_obs;
  char obs_holder[ID_MAX];
  char obs_renew[STAMP_MAX];
  char obs_rv[STAMP_MAX];
  int64_t obs_at_us;

  atomic_bool leading;
  int64_t last_renew_us;
  atomic_int stop;
};

static int64_t real_now_us(void *u) {
  (void)u;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static bool dns_name(const char *s) {
  size_t n = s ? strlen(s) : 0;
  return n > 0 && n <= 253 &&
         strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789.-") == n;
}

int gf_kube_leader_new(gf_kube_leader **out, gf_kube_config *cfg,
                       const gf_kube_opts *kopts, const gf_kube_leader_opts *o,
                       gf_diag *d) {
  int rc = 0;
  if (!out || !cfg || !o)
    return GF_EINVAL;
  if (!dns_name(o->ns) || !dns_name(o->name))
    return gf_diag_set(d, GF_EINVAL,
                       "leader: lease namespace/name '%.64s/%.64s' invalid",
                       o->ns ? o->ns : "", o->name ? o->name : "");
  if (!o->identity || !*o->identity || strlen(o->identity) >= ID_MAX)
    return gf_diag_set(d, GF_EINVAL, "leader: identity empty or over %d bytes",
                       ID_MAX - 1);
  gf_kube_leader *le = gf__calloc(1, sizeof(*le));
  if (!le)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  le->ns = gf__strdup(o->ns);
  le->name = gf__strdup(o->name);
  le->identity = gf__strdup(o->identity);
  if (!le->ns || !le->name || !le->identity) {
    rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
    goto out;
  }
  le->dur_s = o->lease_duration_s > 0 ? o->lease_duration_s : 15;
  le->renew_deadline_s = o->renew_deadline_s > 0 ? o->renew_deadline_s : 10;
  le->retry_s = o->retry_period_s > 0 ? o->retry_period_s : 2;
  if (le->renew_deadline_s >= le->dur_s) {
    rc = gf_diag_set(d, GF_EINVAL,
                     "leader: renew deadline %lds must be shorter than the "
                     "lease duration %lds",
                     le->renew_deadline_s, le->dur_s);
    goto out;
  }
  le->now_us = o->now_us ? o->now_us : real_now_us;
  le->clock_user = o->clock_user;
  le->on_started = o->on_started;
  le->on_stopped = o->on_stopped;
  le->user = o->user;
  le->on_error = o->on_error;
  snprintf(le->create_path, sizeof(le->create_path),
           "/apis/coordination.k8s.io/v1/namespaces/%s/leases", le->ns);
  snprintf(le->path, sizeof(le->path), "%s/%.253s", le->create_path, le->name);
  atomic_init(&le->leading, false);
  atomic_init(&le->stop, 0);
  rc = gf_kube_new(&le->k, cfg, kopts, d);
  if (rc)
    goto out;
  *out = le;
  le = NULL;
out:
  gf_kube_leader_free(le);
  return rc;
}

void gf_kube_leader_free(gf_kube_leader *le) {
  if (!le)
    return;
  gf_kube_free(le->k);
  gf__free(le->ns);
  gf__free(le->name);
  gf__free(le->identity);
  gf__free(le);
}

static void set_leading(gf_kube_leader *le, bool v) {
  bool was = atomic_exchange(&le->leading, v);
  if (v && !was && le->on_started)
    le->on_started(le->user);
  if (!v && was && le->on_stopped)
    le->on_stopped(le->user);
}

static const char *str_at(const json_t *o, const char *a, const char *b) {
  const char *s = json_string_value(json_object_get(json_object_get(o, a), b));
  return s ? s : "";
}

/* Records the lease as observed now if it changed since last time. */
static void observe(gf_kube_leader *le, const json_t *lease, int64_t now) {
  const char *holder = str_at(lease, "spec", "holderIdentity");
  const char *renew = str_at(lease, "spec", "renewTime");
  const char *rv = str_at(lease, "metadata", "resourceVersion");
  if (le->have_obs && !strcmp(holder, le->obs_holder) &&
      !strcmp(renew, le->obs_renew) && !strcmp(rv, le->obs_rv))
    return;
  snprintf(le->obs_holder, sizeof(le->obs_holder), "%s", holder);
  snprintf(le->obs_renew, sizeof(le->obs_renew), "%s", renew);
  snprintf(le->obs_rv, sizeof(le->obs_rv), "%s", rv);
  le->obs_at_us = now;
  le->have_obs = true;
}

/* After a failed write or read: leading ends once the last renewal is
 * older than the renew deadline. */
static void check_deadline(gf_kube_leader *le, int64_t now) {
  if (atomic_load(&le->leading) &&
      now - le->last_renew_us > (int64_t)le->renew_deadline_s * 1000000)
    set_leading(le, false);
}

static int lease_spec(gf_kube_leader *le, json_t *spec, const char *holder,
                      long dur, const char *acquire, const char *renew,
                      json_int_t transitions) {
  int bad = 0;
  bad |= json_object_set_new(spec, "holderIdentity", json_string(holder));
  bad |= json_object_set_new(spec, "leaseDurationSeconds", json_integer(dur));
  bad |= json_object_set_new(spec, "acquireTime", json_string(acquire));
  bad |= json_object_set_new(spec, "renewTime", json_string(renew));
  bad |=
      json_object_set_new(spec, "leaseTransitions", json_integer(transitions));
  (void)le;
  return bad ? GF_ENOMEM : 0;
}

static int create_lease(gf_kube_leader *le, int64_t now, gf_diag *d) {
  char stamp[STAMP_MAX];
  gf_kube_time_format(now, stamp, sizeof(stamp));
  json_t *lease =
      json_pack("{s:s, s:s, s:{s:s, s:s}, s:{}}", "apiVersion",
                "coordination.k8s.io/v1", "kind", "Lease", "metadata", "name",
                le->name, "namespace", le->ns, "spec");
  json_t *got = NULL;
  int rc = lease ? 0 : GF_ENOMEM;
  if (!rc)
    rc = lease_spec(le, json_object_get(lease, "spec"), le->identity, le->dur_s,
                    stamp, stamp, 0);
  if (rc) {
    json_decref(lease);
    return gf_diag_set(d, rc, "out of memory");
  }
  rc = gf_kube_create(le->k, le->create_path, lease, &got, d);
  json_decref(lease);
  if (rc == GF_EEXIST || rc == GF_ECONFLICT)
    return 0; /* another replica created it first */
  if (rc)
    return rc;
  observe(le, got, now);
  json_decref(got);
  le->last_renew_us = now;
  set_leading(le, true);
  return 0;
}

static int try_once(gf_kube_leader *le, bool *leading, gf_diag *d) {
  int rc = 0;
  json_t *lease = NULL, *got = NULL;
  int64_t now = le->now_us(le->clock_user);
  char stamp[STAMP_MAX];
  rc = gf_kube_get(le->k, le->path, &lease, d);
  if (rc == GF_ENOTFOUND) {
    rc = create_lease(le, now, d);
    goto out;
  }
  if (rc)
    goto out;
  observe(le, lease, now);
  json_t *spec = json_object_get(lease, "spec");
  if (!json_is_object(spec)) {
    spec = json_object();
    if (!spec || json_object_set_new(lease, "spec", spec)) {
      rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
      goto out;
    }
  }
  const char *holder = str_at(lease, "spec", "holderIdentity");
  bool mine = !strcmp(holder, le->identity);
  json_int_t dur =
      json_integer_value(json_object_get(spec, "leaseDurationSeconds"));
  if (dur <= 0)
    dur = le->dur_s;
  if (*holder && !mine && now < le->obs_at_us + (int64_t)dur * 1000000) {
    set_leading(le, false); /* held by another, not expired */
    goto out;
  }
  json_int_t trans =
      json_integer_value(json_object_get(spec, "leaseTransitions"));
  gf_kube_time_format(now, stamp, sizeof(stamp));
  char acquire[STAMP_MAX];
  snprintf(acquire, sizeof(acquire), "%s",
           mine && *str_at(lease, "spec", "acquireTime")
               ? str_at(lease, "spec", "acquireTime")
               : stamp);
  rc = lease_spec(le, spec, le->identity, le->dur_s, acquire, stamp,
                  mine ? trans : trans + 1);
  if (rc) {
    gf_diag_set(d, rc, "out of memory");
    goto out;
  }
  rc = gf_kube_replace(le->k, le->path, lease, &got, d);
  if (rc == GF_ECONFLICT) {
    rc = 0; /* someone else wrote first; we learn who on the next try */
    check_deadline(le, now);
    goto out;
  }
  if (rc)
    goto out;
  observe(le, got, now);
  le->last_renew_us = now;
  set_leading(le, true);
out:
  if (rc)
    check_deadline(le, now);
  json_decref(lease);
  json_decref(got);
  if (leading)
    *leading = atomic_load(&le->leading);
  return rc;
}

int gf_kube_leader_try(gf_kube_leader *le, bool *leading, gf_diag *d) {
  gf_diag own = {""};
  if (!d)
    d = &own;
  d->msg[0] = '\0';
  int rc = try_once(le, leading, d);
  if (le->on_error && gf__err_changed(&le->err, rc, rc ? d->msg : ""))
    le->on_error(le->user, rc, rc ? d->msg : "");
  return rc;
}

int gf_kube_leader_release(gf_kube_leader *le, gf_diag *d) {
  json_t *lease = NULL;
  int rc = 0;
  if (!atomic_load(&le->leading))
    return 0;
  int64_t now = le->now_us(le->clock_user);
  char stamp[STAMP_MAX];
  gf_kube_time_format(now, stamp, sizeof(stamp));
  rc = gf_kube_get(le->k, le->path, &lease, d);
  if (rc)
    goto out;
  json_t *spec = json_object_get(lease, "spec");
  if (!json_is_object(spec) ||
      strcmp(str_at(lease, "spec", "holderIdentity"), le->identity))
    goto out; /* no longer ours: nothing to give up */
  rc =
      lease_spec(le, spec, "", 1, stamp, stamp,
                 json_integer_value(json_object_get(spec, "leaseTransitions")));
  if (!rc)
    rc = gf_kube_replace(le->k, le->path, lease, NULL, d);
out:
  json_decref(lease);
  set_leading(le, false);
  return rc;
}

int gf_kube_leader_run(gf_kube_leader *le) {
  while (!atomic_load(&le->stop)) {
    gf_kube_leader_try(le, NULL, NULL);
    for (long ms = le->retry_s * 1000; ms > 0 && !atomic_load(&le->stop);
         ms -= 50) {
      struct timespec ts = {0, 50 * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
  gf_kube_clear_stop(le->k);
  return gf_kube_leader_release(le, NULL);
}

void gf_kube_leader_stop(gf_kube_leader *le) {
  atomic_store(&le->stop, 1);
  gf_kube_stop(le->k);
}

bool gf_kube_leader_is_leading(gf_kube_leader *le) {
  return atomic_load(&le->leading);
}
