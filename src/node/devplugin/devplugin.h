/*
 * src/node/devplugin.h - the kubelet device plugin (deviceplugin/v1beta1)
 * served over a unix socket, for the resource gpufrac.io/gpu.
 *
 * Why it exists.  kubelet counts what a node can hold through a device
 * plugin: the plugin registers a resource name with kubelet's Registration
 * service, streams the list of devices and their health (ListAndWatch),
 * and answers Allocate with what the container needs (environment, mounts,
 * device nodes, CDI device names).  gpufrac advertises `slots` devices per
 * shared GPU ("<GPU-uuid>::<k>"), so kubelet admits as many pods as the
 * extender granted; which slot kubelet picks does not matter, the grant
 * decides the GPU and the limits (docs/node.md).
 *
 * What is here and what is not.  This module is the protocol: gRPC over
 * HTTP/2 (nghttp2) with messages encoded by protobuf-c from
 * proto/deviceplugin/v1beta1/api.proto, written from the kubelet API's
 * definitions.  It knows nothing of grants: Allocate is answered by the
 * caller's gf_dp_allocate_fn.
 *
 * Invariants.
 *   - The server listens before it registers; a kubelet that restarts
 *     (kubelet.sock recreated) gets a new Registration within a second.
 *   - Malformed frames or messages from a client end that call (or that
 *     connection) with a gRPC status; the server keeps serving others.
 *   - All calls on a gf_dp are thread-safe.  The allocate callback runs
 *     on the plugin's worker threads, up to 4 at once, and may wait (for
 *     its pod): the server keeps answering every other call meanwhile.
 *     gf__dp_stop calls the cancel callback so that waiting ones return.
 */
#ifndef GPUFRAC_DEVPLUGIN_H
#define GPUFRAC_DEVPLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/contract.h"
#include "gpufrac/diag.h"

#define GF_DP_API_VERSION "v1beta1"
#define GF_DP_RESOURCE GF_RES_GPU /* gpufrac/contract.h */
#define GF_DP_KUBELET_SOCKET "/var/lib/kubelet/device-plugins/kubelet.sock"
#define GF_DP_ID_MAX 96 /* "GPU-<36 chars>::<k>" and NUL, with room */
#define GF_DP_MAX_DEVICES 1024
#define GF_DP_MAX_EDITS 32 /* env, mounts, device nodes, CDI names each */
#define GF_DP_STR_MAX                                                          \
  1024 /* every string in an allocation answer (16                             \
          uuids in one variable fit) */

/* One device as kubelet sees it.  numa_node < 0: no topology hint. */
typedef struct gf_dp_device {
  char id[GF_DP_ID_MAX];
  bool healthy;
  int32_t numa_node;
} gf_dp_device;

/* What one container receives (ContainerAllocateResponse). */
typedef struct gf_dp_env {
  char key[GF_DP_STR_MAX], value[GF_DP_STR_MAX];
} gf_dp_env;
typedef struct gf_dp_mount {
  char container_path[GF_DP_STR_MAX], host_path[GF_DP_STR_MAX];
  bool read_only;
} gf_dp_mount;
typedef struct gf_dp_devnode {
  char container_path[GF_DP_STR_MAX], host_path[GF_DP_STR_MAX];
  char permissions[8]; /* "rw", "rwm" */
} gf_dp_devnode;
typedef struct gf_dp_container_answer {
  uint32_t nenv, nmounts, ndevnodes, ncdi, nannotations;
  gf_dp_env env[GF_DP_MAX_EDITS];
  gf_dp_mount mounts[GF_DP_MAX_EDITS];
  gf_dp_devnode devnodes[GF_DP_MAX_EDITS];
  char cdi[GF_DP_MAX_EDITS][GF_DP_STR_MAX]; /* fully qualified CDI names */
  gf_dp_env annotations[GF_DP_MAX_EDITS];
} gf_dp_container_answer;

/* Answers Allocate for one container that kubelet gave the device ids
 * ids[0..nids).  Returns 0 with *out filled, or a GF_E* code with a
 * sentence in d that kubelet shows the user (the pod fails admission with
 * it); the other containers and calls are not disturbed.  Runs on a worker
 * thread, possibly beside other calls of it: must be thread-safe. */
typedef int (*gf_dp_allocate_fn)(void *user, const char *const *ids,
                                 size_t nids, gf_dp_container_answer *out,
                                 gf_diag *d);

/* Chooses the devices kubelet should give one container
 * (GetPreferredAllocation): `size` of the offered ids avail[0..navail),
 * every id of must[0..nmust) among them.  Writes the choice into out[]
 * (room for size; pointers into avail or must) and returns how many it
 * wrote.  Returning anything but `size` distinct offered ids that include
 * every must id (0, say, when it has nothing to go on) leaves the choice to
 * the plugin's own rule.  Runs on the server's loop: must not wait. */
typedef size_t (*gf_dp_prefer_fn)(void *user, const char *const *avail,
                                  size_t navail, const char *const *must,
                                  size_t nmust, size_t size, const char **out);

/* Called once by gf__dp_stop, from the stopping thread: allocate callbacks
 * still running (waiting for a pod) should return now, with an error;
 * their callers are told the plugin stopped.  Must be thread-safe. */
typedef void (*gf_dp_cancel_fn)(void *user);

/* A sentence about something that went wrong off the caller's path
 * (registration refused or kubelet absent, the socket made again); called
 * on the plugin's threads, never twice in a row with the same text. */
typedef void (*gf_dp_log_fn)(void *user, const char *msg);

typedef struct gf_dp_opts {
  const char *plugin_dir;     /* default "/var/lib/kubelet/device-plugins" */
  const char *endpoint;       /* our socket's file name in plugin_dir;
                                 default "gpufrac.sock" */
  const char *kubelet_socket; /* default plugin_dir + "/kubelet.sock" */
  const char *resource;       /* default GF_DP_RESOURCE */
  gf_dp_allocate_fn allocate;
  gf_dp_cancel_fn cancel; /* NULL: allocate never waits long */
  gf_dp_prefer_fn prefer; /* NULL: the plugin's own rule only */
  void *user;
  bool preferred_allocation; /* advertise GetPreferredAllocation */
  gf_dp_log_fn log;          /* NULL: silent; gets `user` too */
  /* A connection that has not sent the HTTP/2 preface within
   * preface_timeout_ms, or that the plugin owes nothing (no ListAndWatch,
   * no Allocate in progress) and that has not completed a request within
   * idle_timeout_ms, is closed; when all 64 connections are taken, a new
   * one closes the one silent longest of those instead of being turned
   * away (docs/node.md, "Slow and idle clients").  0: 10 s and 60 s. */
  int preface_timeout_ms, idle_timeout_ms;
} gf_dp_opts;

typedef struct gf_dp gf_dp;

/* Starts serving on plugin_dir/endpoint (removing a stale socket), then
 * registers with kubelet, and keeps watching kubelet_socket to register
 * again when kubelet restarts.  A kubelet that is not there yet is not an
 * error: registration is retried.  GF_EIO (cannot listen) with a sentence;
 * GF_EINVAL (no allocate callback, a path too long for a unix socket, a
 * bad device list). */
int gf__dp_start(gf_dp **out, const gf_dp_opts *o, const gf_dp_device *devs,
                 size_t ndevs, gf_diag *d);

/* Replaces the device list; every open ListAndWatch stream gets it.
 * GF_ELIMIT (more than GF_DP_MAX_DEVICES), GF_EINVAL (an id empty, not
 * NUL-ended within GF_DP_ID_MAX, or twice); the old list stays then. */
int gf__dp_set_devices(gf_dp *dp, const gf_dp_device *devs, size_t ndevs);

/* How many times the plugin has registered successfully (tests, metrics). */
uint64_t gf__dp_registrations(const gf_dp *dp);

/* Stops serving, closes every stream, removes our socket; never frees.
 * Idempotent; NULL is fine.  Call it from one thread. */
void gf__dp_stop(gf_dp *dp);

/* Stops (if not stopped yet) and frees dp.  NULL is fine. */
void gf__dp_free(gf_dp *dp);

#endif
