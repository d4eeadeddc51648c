/*
 * gpufrac/region.h - the shared accounting region of one container.
 *
 * Every process of a container that runs under the interposer maps the same
 * file (its path comes from the shim config the node agent writes).  The
 * region holds the container's limits per GPU, its compute bucket, and one
 * slot per process with that process's usage.  The node agent and
 * `gpufrac inspect region` read it.
 *
 * Crash consistency: a process's memory usage lives only in its own slot, and
 * the container's usage is the sum over slots.  A process that dies at any
 * instant (SIGKILL in the middle of an allocation included) leaves only its
 * own slot stale; the next reaper (any process of the container, or the node
 * agent) sees the owner gone, claims the slot with a compare-and-swap, and
 * zeroes it.  Nothing ever waits on a lock another process may hold, so a
 * death cannot deadlock the others.  Reservation is lock-free: add to one's
 * slot, sum the slots, undo if over the limit (sequentially consistent
 * atomics, so two racing reservations never both pass a full limit).  A
 * reservation is `pending` while it is decided and moves to `used` when it
 * succeeds, so the usage anyone reads never includes a refused request.
 *
 * Layout rules: fixed-width fields only, magic + major/minor version, every
 * offset pinned by _Static_assert; slots never move; a reader refuses an
 * unknown major version.  Minor versions only append, into reserved bytes
 * that older writers leave zero, and zero must mean "absent" in every new
 * field, so a reader of any minor reads a region of any other minor of the
 * same major (docs/shim.md, "The shared region", lists what each minor
 * added).
 *
 * Minor 1 adds: `capacity` (what the bucket's rate derives from), a rate
 * that may be published after creation (0 = not known yet: the interposer
 * derives it from the device at cuInit), and utilisation feedback - the
 * node agent writes the container's observed utilisation (gf_region_observe)
 * and the bucket's refill is scaled by a bounded correction factor
 * (gf_region_correction, applied in gf_region_wait).
 */
#ifndef GPUFRAC_REGION_H
#define GPUFRAC_REGION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/diag.h"

#define GF_REGION_MAGIC 0x4e4f494745524647ull /* "GFREGION" little-endian */
#define GF_REGION_MAJOR 1u
#define GF_REGION_MINOR 1u
#define GF_REGION_DEVICES 16
#define GF_REGION_SLOTS 128
#define GF_REGION_UUID 48

/* One process.  A multiple of 64 bytes so slots do not share cache lines.
 * `pending` holds reservations being decided: they count against the limit
 * but are not usage yet, so observers never see a refused request. */
typedef struct gf_region_slot {
  _Atomic int32_t pid; /* 0 free, > 0 owner, -1 being reaped */
  uint32_t reserved0;
  _Atomic uint64_t start; /* owner's start time (clock ticks), 0 = unknown */
  _Atomic uint64_t used[GF_REGION_DEVICES];    /* device memory bytes */
  _Atomic uint64_t pending[GF_REGION_DEVICES]; /* reservations in flight */
  _Atomic uint64_t waits;        /* launches that waited for compute tokens */
  _Atomic uint64_t throttled_ns; /* time spent waiting for tokens */
  uint8_t reserved1[32];
} gf_region_slot;

typedef struct gf_region {
  uint64_t magic;
  uint32_t major, minor;
  uint32_t size;        /* sizeof(gf_region) when written */
  uint32_t ndevices;    /* devices with a limit entry */
  uint32_t compute_pct; /* 1..100; 100 = no throttling */
  uint32_t reserved0;
  uint64_t limit[GF_REGION_DEVICES]; /* bytes per device; 0 = unlimited */
  char uuid[GF_REGION_DEVICES][GF_REGION_UUID]; /* "" = by index only */
  /* Compute bucket: tokens are kernel blocks; refilled at rate x the
   * correction per second up to burst. */
  _Atomic int64_t tokens;
  _Atomic uint64_t refill_ns; /* monotonic time of the last refill */
  _Atomic uint64_t rate;      /* tokens per second; 0 = not known yet */
  _Atomic uint64_t burst;     /* bucket size */
  _Atomic uint32_t hwm;       /* slots [0, hwm) may be in use */
  uint32_t reserved1;
  _Atomic uint64_t reaped; /* slots reclaimed from dead processes */
  /* Minor 1.  Utilisation feedback: the node agent writes util_bp, the
   * container's observed share of one GPU's time in basis points (10000 =
   * a whole GPU; averaged over its GPUs when it has several), then
   * increments util_seq.  The bucket applies each new sample once
   * (util_seen) to corr, the refill's correction in thousandths (0 = 1.0:
   * never corrected, or a minor-0 region). */
  _Atomic uint32_t util_bp;
  _Atomic uint32_t corr;
  _Atomic uint64_t util_seq;
  _Atomic uint64_t util_seen;
  _Atomic uint64_t capacity; /* blocks/s of a whole GPU; 0 = not known */
  uint8_t reserved2[16];
  gf_region_slot slots[GF_REGION_SLOTS];
} gf_region;

_Static_assert(sizeof(gf_region_slot) == 320, "slot size is ABI");
_Static_assert(offsetof(gf_region_slot, used) == 16, "slot layout is ABI");
_Static_assert(offsetof(gf_region_slot, pending) == 144, "slot layout is ABI");
_Static_assert(offsetof(gf_region_slot, waits) == 272, "slot layout is ABI");
_Static_assert(offsetof(gf_region, limit) == 32, "region layout is ABI");
_Static_assert(offsetof(gf_region, uuid) == 160, "region layout is ABI");
_Static_assert(offsetof(gf_region, tokens) == 928, "region layout is ABI");
_Static_assert(offsetof(gf_region, rate) == 944, "region layout is ABI");
_Static_assert(offsetof(gf_region, burst) == 952, "region layout is ABI");
_Static_assert(offsetof(gf_region, reaped) == 968, "region layout is ABI");
_Static_assert(offsetof(gf_region, util_bp) == 976, "minor 1 layout is ABI");
_Static_assert(offsetof(gf_region, corr) == 980, "minor 1 layout is ABI");
_Static_assert(offsetof(gf_region, util_seq) == 984, "minor 1 layout is ABI");
_Static_assert(offsetof(gf_region, util_seen) == 992, "minor 1 layout is ABI");
_Static_assert(offsetof(gf_region, capacity) == 1000, "minor 1 layout is ABI");
_Static_assert(sizeof(_Atomic uint64_t) == 8 && sizeof(_Atomic uint32_t) == 4,
               "atomics have their plain types' size");
_Static_assert(offsetof(gf_region, slots) % 64 == 0, "slots are aligned");
_Static_assert(offsetof(gf_region, slots) == 1024, "region layout is ABI");
_Static_assert(sizeof(gf_region) == 1024 + 320 * GF_REGION_SLOTS,
               "region size is ABI");

/* Limits a region is created with. */
typedef struct gf_region_limits {
  uint32_t ndevices;
  uint64_t limit[GF_REGION_DEVICES];
  char uuid[GF_REGION_DEVICES][GF_REGION_UUID];
  uint32_t compute_pct;
  uint64_t rate, burst; /* rate 0 with compute < 100: published later */
  uint64_t capacity;    /* what rate derives from (informational) */
} gf_region_limits;

/* Maps the region at path, creating and initialising it from `init` when
 * the file is new or empty (init may be NULL to refuse creating).  Several
 * processes may race to create: one initialises under an flock, the others
 * wait for it.  With init NULL (readers: inspect, the node agent's metrics)
 * no lock is taken, so a process holding the file cannot stall the reader.
 * Refuses a bad magic, an unknown major version or a short file (GF_ESYNTAX /
 * GF_ESTATE) with the reason in d.  *out stays mapped until gf_region_unmap. */
int gf_region_map(const char *path, const gf_region_limits *init,
                  gf_region **out, gf_diag *d);
void gf_region_unmap(gf_region *r);

/* Claims a free slot for the calling process; returns its index or
 * GF_ELIMIT when all are taken (after reaping dead owners). */
int gf_region_attach(gf_region *r);
/* Frees the slots of the calling process's earlier images: slots with its
 * pid and its start time, which only an image that exec replaced can have
 * left (the image calling this holds none yet).  Returns how many. */
int gf_region_reset_image(gf_region *r);
/* Frees slot i (the caller's own, at exit). */
void gf_region_detach(gf_region *r, int i);

/* Bytes in use on device dev, summed over slots. */
uint64_t gf_region_used(const gf_region *r, uint32_t dev);

/* Adds bytes to slot i's usage on dev if the container stays within
 * `limit` (0 = unlimited); returns true when reserved.  On false nothing
 * changed.  The limit is the caller's trusted copy (the interposer's, from
 * its read-only config): the region's own limit field is writable by every
 * process of the container and is only informational. */
bool gf_region_reserve(gf_region *r, int i, uint32_t dev, uint64_t bytes,
                       uint64_t limit);
/* Gives back bytes reserved by slot i on dev. */
void gf_region_unreserve(gf_region *r, int i, uint32_t dev, uint64_t bytes);

/* The two above without their checks, inline for the interposer's
 * allocation path (a call, the bounds checks and the registers saved
 * around the reap were 40 of the 76 instructions reservation and release
 * cost an alloc+free pair; docs/benchmarks.md).  The caller has checked
 * that slot s is its own and dev < GF_REGION_DEVICES.
 *
 * gf_region_try_reserve is one attempt at gf_region_reserve with a limit
 * (not 0): the bytes go to s's pending, the slots are summed (pending
 * before used, in two statements: a reservation moves its bytes to used
 * first and then out of pending, so a reader that took used first could
 * miss bytes moving between them, and two processes could both pass the
 * limit; read this way they are counted twice at worst, which only
 * refuses), then they move to used (used first, so racers always see
 * them) or out of pending.  No reap: on false nothing changed, and
 * gf_region_reserve (which reaps dead processes and tries again) is the
 * caller's next step. */
static inline bool gf_region_try_reserve(gf_region *r, gf_region_slot *s,
                                         uint32_t dev, uint64_t bytes,
                                         uint64_t limit) {
  atomic_fetch_add(&s->pending[dev], bytes);
  uint32_t hwm = atomic_load(&r->hwm);
  if (hwm > GF_REGION_SLOTS)
    hwm = GF_REGION_SLOTS;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < hwm; i++) {
    uint64_t pending = atomic_load(&r->slots[i].pending[dev]);
    sum += pending + atomic_load(&r->slots[i].used[dev]);
  }
  if (sum <= limit) {
    atomic_fetch_add(&s->used[dev], bytes);
    atomic_fetch_sub(&s->pending[dev], bytes);
    return true;
  }
  atomic_fetch_sub(&s->pending[dev], bytes);
  return false;
}

/* gf_region_unreserve's body: never below zero, even if a caller
 * double-frees. */
static inline void gf_region_slot_unreserve(gf_region_slot *s, uint32_t dev,
                                            uint64_t bytes) {
  _Atomic uint64_t *mine = &s->used[dev];
  uint64_t cur = atomic_load(mine);
  while (
      !atomic_compare_exchange_weak(mine, &cur, cur >= bytes ? cur - bytes : 0))
    ;
}

/* Reclaims the slots of processes that no longer exist.  Returns how many
 * were reclaimed.  Safe to call from any process at any time. */
int gf_region_reap(gf_region *r);

/* Compute admission, slow path: after a debit left the bucket negative,
 * refills it from elapsed time (rate x correction) and sleeps until the
 * debt is paid; applies a new utilisation sample, if the agent wrote one,
 * to the correction.  Returns the nanoseconds waited (0 when the rate is
 * not known yet).  `now_ns` and `sleep_ns` supply the clock, so tests can
 * run it on a fake one. */
uint64_t gf_region_wait(gf_region *r, int slot, uint64_t (*now_ns)(void),
                        void (*sleep_ns)(uint64_t));

/* A compute bucket outside the region's header (the interposer's per-GPU
 * buckets, docs/shim.md "Compute"): the same four fields, refilled and
 * waited on by gf_region_wait_bucket exactly as the header's. */
typedef struct gf_region_bucket {
  _Atomic int64_t tokens;
  _Atomic uint64_t refill_ns; /* monotonic time of the last refill */
  _Atomic uint64_t rate;      /* tokens per second; 0 = not known yet */
  _Atomic uint64_t burst;     /* bucket size */
} gf_region_bucket;

/* gf_region_wait on bucket b instead of r's own; r gives the correction
 * and its feedback, and slot's throttled_ns. */
uint64_t gf_region_wait_bucket(gf_region *r, gf_region_bucket *b, int slot,
                               uint64_t (*now_ns)(void),
                               void (*sleep_ns)(uint64_t));

/* Publishes the bucket of a region created with rate 0: capacity (blocks
 * per second of a whole GPU) x compute_pct / 100, burst 1/20 s of it, the
 * bucket full.  The first caller wins (a rate already set stays); returns
 * the rate in force, or, racing the winner, the one this call computed. */
uint64_t gf_region_set_rate(gf_region *r, uint64_t capacity);

/* The node agent's side of utilisation feedback: records the container's
 * observed utilisation (basis points of one GPU, clamped to 10000) as a
 * new sample. */
void gf_region_observe(gf_region *r, uint32_t util_bp);

/* The control law, pure (docs/shim.md, "Compute"): the next correction
 * (thousandths) from the current one (0 = 1000), the target share and the
 * observed utilisation (basis points), and whether the bucket is what
 * limits the container (it had to wait).  Moves halfway to
 * corr x target / observed, clamped to [GF_REGION_CORR_MIN,
 * GF_REGION_CORR_MAX]; no sample (observed 0) changes nothing, and an
 * observation under the target raises it only when limited (a container
 * that asks for less than its share is not held back by the bucket). */
#define GF_REGION_CORR_MIN 500u
#define GF_REGION_CORR_MAX 2000u
uint32_t gf_region_correction(uint32_t corr, uint32_t target_bp,
                              uint32_t observed_bp, bool limited);

/* Compute admission: takes `cost` tokens, waiting for the bucket to refill
 * when it runs dry.  The fast path is one atomic subtraction: no system
 * call, no lock, no function call.  Call only when throttling is on
 * (compute_pct < 100 and rate > 0). */
static inline uint64_t gf_region_admit(gf_region *r, int slot, int64_t cost,
                                       uint64_t (*now_ns)(void),
                                       void (*sleep_ns)(uint64_t)) {
  if (atomic_fetch_sub_explicit(&r->tokens, cost, memory_order_relaxed) >= cost)
    return 0;
  return gf_region_wait(r, slot, now_ns, sleep_ns);
}

#endif
