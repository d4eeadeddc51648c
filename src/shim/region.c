/*
 * The shared accounting region (gpufrac/region.h).  Used by the interposer
 * inside containers and by gpufrac itself (inspect, run), so it depends on
 * libc only and allocates nothing.
 */
#include "gpufrac/region.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpufrac/error.h"

/* Start time of process pid in clock ticks since boot (field 22 of
 * /proc/PID/stat), 0 when it cannot be read. */
static uint64_t proc_start(int pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  /* The command name may contain spaces and ')': skip to the last ')'. */
  char *p = strrchr(buf, ')');
  if (!p)
    return 0;
  int field = 2;
  for (; *p && field < 22; p++)
    if (*p == ' ')
      field++;
  uint64_t v = 0;
  for (; *p >= '0' && *p <= '9'; p++)
    v = v * 10 + (uint64_t)(*p - '0');
  return v;
}

static bool owner_alive(int32_t pid, uint64_t start) {
  if (pid <= 0)
    return false;
  if (kill(pid, 0) != 0 && errno == ESRCH)
    return false;
  if (start == 0)
    return true; /* still attaching, or unknown: do not guess */
  uint64_t now = proc_start(pid);
  return now == 0 || now == start; /* 0: cannot tell, keep it */
}

static int check_header(const gf_region *r, size_t file_size, gf_diag *d) {
  if (r->magic != GF_REGION_MAGIC)
    return gf_diag_set(d, GF_ESYNTAX, "not a gpufrac region (bad magic)");
  if (r->major != GF_REGION_MAJOR)
    return gf_diag_set(d, GF_ESTATE,
                       "region version %u.%u, this build reads %u.x", r->major,
                       r->minor, GF_REGION_MAJOR);
  if (file_size < sizeof(gf_region) || r->size < sizeof(gf_region))
    return gf_diag_set(d, GF_ESTATE, "region file too short (%zu bytes)",
                       file_size);
  if (r->ndevices > GF_REGION_DEVICES || r->compute_pct > 100 ||
      atomic_load(&r->hwm) > GF_REGION_SLOTS)
    return gf_diag_set(d, GF_ESYNTAX, "region header out of range");
  return 0;
}

static void init_header(gf_region *r, const gf_region_limits *l) {
  memset(r, 0, sizeof(*r));
  r->major = GF_REGION_MAJOR;
  r->minor = GF_REGION_MINOR;
  r->size = (uint32_t)sizeof(*r);
  r->ndevices =
      l->ndevices > GF_REGION_DEVICES ? GF_REGION_DEVICES : l->ndevices;
  memcpy(r->limit, l->limit, sizeof(r->limit));
  memcpy(r->uuid, l->uuid, sizeof(r->uuid));
  for (int i = 0; i < GF_REGION_DEVICES; i++)
    r->uuid[i][GF_REGION_UUID - 1] = '\0';
  r->compute_pct =
      l->compute_pct == 0 || l->compute_pct > 100 ? 100 : l->compute_pct;
  atomic_store(&r->rate, l->rate);
  atomic_store(&r->burst, l->burst ? l->burst : l->rate / 10 + 1);
  atomic_store(&r->capacity, l->capacity);
  atomic_store(&r->tokens, (int64_t)atomic_load(&r->burst));
  /* The magic last: readers that see it see a complete header. */
  atomic_thread_fence(memory_order_release);
  r->magic = GF_REGION_MAGIC;
}

int gf_region_map(const char *path, const gf_region_limits *init,
                  gf_region **out, gf_diag *d) {
  int flags = O_RDWR | O_CLOEXEC | (init ? O_CREAT : 0);
  int fd = open(path, flags, 0660);
  if (fd < 0)
    return gf_diag_set(d, GF_EIO, "%s: %s", path, strerror(errno));
  int rc = 0;
  /* One creator initialises; the lock dies with its holder.  A reader that
   * may not create (init NULL) never waits on it: a region still being
   * created reads as empty or with no magic, which is reported. */
  if (init && flock(fd, LOCK_EX) != 0) {
    rc = gf_diag_set(d, GF_EIO, "%s: lock: %s", path, strerror(errno));
    goto out;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    rc = gf_diag_set(d, GF_EIO, "%s: %s", path, strerror(errno));
    goto unlock;
  }
  bool fresh = st.st_size == 0;
  if (fresh) {
    if (!init) {
      rc = gf_diag_set(d, GF_ESTATE, "%s: empty region file", path);
      goto unlock;
    }
    if (ftruncate(fd, (off_t)sizeof(gf_region)) != 0) {
      rc = gf_diag_set(d, GF_EIO, "%s: %s", path, strerror(errno));
      goto unlock;
    }
    st.st_size = (off_t)sizeof(gf_region);
  }
  if ((size_t)st.st_size < sizeof(gf_region)) {
    rc = gf_diag_set(d, GF_ESTATE, "%s: region file too short (%lld bytes)",
                     path, (long long)st.st_size);
    goto unlock;
  }
  void *m =
      mmap(NULL, sizeof(gf_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    rc = gf_diag_set(d, GF_EIO, "%s: mmap: %s", path, strerror(errno));
    goto unlock;
  }
  gf_region *r = m;
  if (fresh)
    init_header(r, init);
  rc = check_header(r, (size_t)st.st_size, d);
  if (rc) {
    gf_diag_prefix(d, "%s", path);
    munmap(m, sizeof(gf_region));
    goto unlock;
  }
  *out = r;
unlock:
  if (init)
    flock(fd, LOCK_UN);
out:
  close(fd);
  return rc;
}

void gf_region_unmap(gf_region *r) {
  if (r)
    munmap(r, sizeof(*r));
}

int gf_region_attach(gf_region *r) {
  int32_t me = (int32_t)getpid();
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < GF_REGION_SLOTS; i++) {
      gf_region_slot *s = &r->slots[i];
      int32_t expect = 0;
      if (!atomic_compare_exchange_strong(&s->pid, &expect, me))
        continue;
      for (int dev = 0; dev < GF_REGION_DEVICES; dev++) {
        atomic_store(&s->used[dev], 0);
        atomic_store(&s->pending[dev], 0);
      }
      atomic_store(&s->waits, 0);
      atomic_store(&s->throttled_ns, 0);
      atomic_store(&s->start, proc_start(me));
      uint32_t hwm = atomic_load(&r->hwm);
      while (hwm < (uint32_t)i + 1 &&
             !atomic_compare_exchange_weak(&r->hwm, &hwm, (uint32_t)i + 1))
        ;
      return i;
    }
    if (gf_region_reap(r) == 0)
      break;
  }
  return GF_ELIMIT;
}

int gf_region_reset_image(gf_region *r) {
  int32_t me = (int32_t)getpid();
  uint64_t start = 0;
  int n = 0;
  uint32_t hwm = atomic_load(&r->hwm);
  if (hwm > GF_REGION_SLOTS)
    hwm = GF_REGION_SLOTS;
  for (uint32_t i = 0; i < hwm; i++) {
    gf_region_slot *s = &r->slots[i];
    int32_t pid = atomic_load(&s->pid);
    if (pid != me)
      continue;
    if (!start)
      start = proc_start(me);
    /* The same pid and the same start time: this very process, under an
     * image that exec replaced (its memory went with it).  Claimed by
     * compare-and-swap, as a reap does, so a reaper racing us is not
     * confused. */
    if (!start || atomic_load(&s->start) != start ||
        !atomic_compare_exchange_strong(&s->pid, &pid, -1))
      continue;
    for (int dev = 0; dev < GF_REGION_DEVICES; dev++) {
      atomic_store(&s->used[dev], 0);
      atomic_store(&s->pending[dev], 0);
    }
    atomic_store(&s->start, 0);
    atomic_store(&s->pid, 0);
    n++;
  }
  return n;
}

void gf_region_detach(gf_region *r, int i) {
  if (i < 0 || i >= GF_REGION_SLOTS)
    return;
  gf_region_slot *s = &r->slots[i];
  for (int dev = 0; dev < GF_REGION_DEVICES; dev++) {
    atomic_store(&s->used[dev], 0);
    atomic_store(&s->pending[dev], 0);
  }
  atomic_store(&s->start, 0);
  atomic_store(&s->pid, 0);
}

uint64_t gf_region_used(const gf_region *r, uint32_t dev) {
  if (dev >= GF_REGION_DEVICES)
    return 0;
  uint32_t hwm = atomic_load(&r->hwm);
  if (hwm > GF_REGION_SLOTS)
    hwm = GF_REGION_SLOTS;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < hwm; i++)
    sum += atomic_load(&r->slots[i].used[dev]);
  return sum;
}

bool gf_region_reserve(gf_region *r, int i, uint32_t dev, uint64_t bytes,
                       uint64_t limit) {
  if (dev >= GF_REGION_DEVICES || i < 0 || i >= GF_REGION_SLOTS)
    return false;
  gf_region_slot *s = &r->slots[i];
  if (limit == 0) {
    atomic_fetch_add(&s->used[dev], bytes);
    return true;
  }
  if (gf_region_try_reserve(r, s, dev, bytes, limit))
    return true;
  /* Over the limit: memory of dead processes may be what is missing. */
  return gf_region_reap(r) > 0 &&
         gf_region_try_reserve(r, s, dev, bytes, limit);
}

void gf_region_unreserve(gf_region *r, int i, uint32_t dev, uint64_t bytes) {
  if (dev >= GF_REGION_DEVICES || i < 0 || i >= GF_REGION_SLOTS)
    return;
  gf_region_slot_unreserve(&r->slots[i], dev, bytes);
}

int gf_region_reap(gf_region *r) {
  int n = 0;
  uint32_t hwm = atomic_load(&r->hwm);
  if (hwm > GF_REGION_SLOTS)
    hwm = GF_REGION_SLOTS;
  for (uint32_t i = 0; i < hwm; i++) {
    gf_region_slot *s = &r->slots[i];
    int32_t pid = atomic_load(&s->pid);
    if (pid <= 0 || owner_alive(pid, atomic_load(&s->start)))
      continue;
    /* Claim the dead slot; one reaper wins. */
    if (!atomic_compare_exchange_strong(&s->pid, &pid, -1))
      continue;
    for (int dev = 0; dev < GF_REGION_DEVICES; dev++) {
      atomic_store(&s->used[dev], 0);
      atomic_store(&s->pending[dev], 0);
    }
    atomic_store(&s->start, 0);
    atomic_store(&s->pid, 0);
    atomic_fetch_add(&r->reaped, 1);
    n++;
  }
  return n;
}

uint32_t gf_region_correction(uint32_t corr, uint32_t target_bp,
                              uint32_t observed_bp, bool limited) {
  uint64_t k = corr ? corr : 1000;
  if (observed_bp == 0 || target_bp == 0 ||
      (observed_bp < target_bp && !limited))
    return (uint32_t)k;
  uint64_t ideal = k * target_bp / observed_bp;
  uint64_t next = (k + ideal) / 2;
  next = next < GF_REGION_CORR_MIN   ? GF_REGION_CORR_MIN
         : next > GF_REGION_CORR_MAX ? GF_REGION_CORR_MAX
                                     : next;
  return (uint32_t)next;
}

void gf_region_observe(gf_region *r, uint32_t util_bp) {
  atomic_store(&r->util_bp, util_bp > 10000 ? 10000 : util_bp);
  atomic_fetch_add(&r->util_seq, 1);
}

uint64_t gf_region_set_rate(gf_region *r, uint64_t capacity) {
  uint32_t pct = r->compute_pct ? r->compute_pct : 100;
  uint64_t rate = capacity / 100 * pct + capacity % 100 * pct / 100;
  uint64_t cur = atomic_load(&r->rate), zero = 0;
  if (cur || !rate)
    return cur;
  /* Claimed by the capacity field; burst and tokens before the rate, so
   * whoever sees the rate sees them.  A racing loser answers the rate it
   * computed (from the same devices, as a rule) while the winner
   * publishes. */
  if (!atomic_compare_exchange_strong(&r->capacity, &zero, capacity))
    return rate;
  atomic_store(&r->burst, rate / 20 + 1);
  atomic_store(&r->tokens, (int64_t)(rate / 20 + 1));
  atomic_store(&r->rate, rate);
  return rate;
}

/* Applies a new utilisation sample, if any, once (the process that claims
 * it by compare-and-swap); limited: this wait had to sleep. */
static void feedback(gf_region *r, bool limited) {
  uint64_t seq = atomic_load(&r->util_seq), seen = atomic_load(&r->util_seen);
  if (seq == seen || !atomic_compare_exchange_strong(&r->util_seen, &seen, seq))
    return;
  uint32_t target = (r->compute_pct ? r->compute_pct : 100) * 100u;
  atomic_store(&r->corr,
               gf_region_correction(atomic_load(&r->corr), target,
                                    atomic_load(&r->util_bp), limited));
}

/* The bucket's four fields, wherever they are. */
typedef struct bucket_ref {
  _Atomic int64_t *tokens;
  _Atomic uint64_t *refill_ns, *rate, *burst;
} bucket_ref;

static uint64_t wait_on(gf_region *r, bucket_ref b, int slot,
                        uint64_t (*now_ns)(void), void (*sleep_ns)(uint64_t));

uint64_t gf_region_wait(gf_region *r, int slot, uint64_t (*now_ns)(void),
                        void (*sleep_ns)(uint64_t)) {
  bucket_ref b = {&r->tokens, &r->refill_ns, &r->rate, &r->burst};
  return wait_on(r, b, slot, now_ns, sleep_ns);
}

uint64_t gf_region_wait_bucket(gf_region *r, gf_region_bucket *k, int slot,
                               uint64_t (*now_ns)(void),
                               void (*sleep_ns)(uint64_t)) {
  bucket_ref b = {&k->tokens, &k->refill_ns, &k->rate, &k->burst};
  return wait_on(r, b, slot, now_ns, sleep_ns);
}

static uint64_t wait_on(gf_region *r, bucket_ref b, int slot,
                        uint64_t (*now_ns)(void), void (*sleep_ns)(uint64_t)) {
  uint64_t rate = atomic_load(b.rate);
  if (rate == 0)
    return 0;
  uint64_t burst = atomic_load(b.burst);
  /* Refill from elapsed time, then wait out any deficit. */
  uint64_t waited = 0;
  for (;;) {
    uint32_t c = atomic_load(&r->corr);
    /* Tokens per second x 1000 (the correction's unit); 128-bit products
     * below, so no elapsed time overflows. */
    unsigned __int128 rk = (unsigned __int128)rate * (c ? c : 1000);
    uint64_t now = now_ns();
    uint64_t last = atomic_load(b.refill_ns);
    unsigned __int128 add =
        last == 0 || now <= last ? burst : (now - last) * rk / 1000000000000ull;
    /* The refill time advances by what the whole tokens added account for,
     * not to now: the fraction of a token left over is not lost (with few
     * tokens per launch, losing it at every refill cost a container up to
     * a tenth of its share).  A full bucket forgets the rest. */
    uint64_t upto = now;
    if (last != 0 && now > last && add < burst)
      upto = last + (uint64_t)((add * 1000000000000ull + rk - 1) / rk);
    if (upto > now)
      upto = now;
    if (now > last && upto > last &&
        atomic_compare_exchange_strong(b.refill_ns, &last, upto)) {
      if (add > burst)
        add = burst;
      int64_t t = atomic_fetch_add(b.tokens, (int64_t)add) + (int64_t)add;
      /* Cap the bucket at its burst size. */
      while (t > (int64_t)burst &&
             !atomic_compare_exchange_weak(b.tokens, &t, (int64_t)burst))
        ;
    }
    int64_t t = atomic_load(b.tokens);
    feedback(r, t < 0);
    if (t >= 0)
      break;
    /* Wait for the deficit to refill (rounded up, so the refill after it
     * covers the deficit), at least 50 us, at most 10 ms. */
    c = atomic_load(&r->corr);
    rk = (unsigned __int128)rate * (c ? c : 1000);
    unsigned __int128 w =
        ((unsigned __int128)(-t) * 1000000000000ull + rk - 1) / rk;
    uint64_t wait = w < 50000 ? 50000 : w > 10000000 ? 10000000 : (uint64_t)w;
    sleep_ns(wait);
    waited += wait;
  }
  if (slot >= 0 && slot < GF_REGION_SLOTS)
    atomic_fetch_add_explicit(&r->slots[slot].throttled_ns, waited,
                              memory_order_relaxed);
  return waited;
}
