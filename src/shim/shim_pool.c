/*
 * shim_pool.c: stream-ordered memory (cuMemAllocAsync,
 * cuMemAllocFromPoolAsync, their _ptsz variants, cuMemFreeAsync, pool trim
 * and destroy): pools charged by what they reserve, and frees queued on a
 * stream giving their charge back when the stream passes them.
 */
#define _GNU_SOURCE

#include "shim_int.h"

typedef gf_cu_result (*async_fn)(CUdeviceptr *, size_t, CUstream);
typedef gf_cu_result (*pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef gf_cu_result (*free_async_fn)(CUdeviceptr, CUstream);

static bool pool_query(CUmemoryPool pool, int attr, uint64_t *v) {
  cuuint64_t x = 0;
  if (!S.real.cuMemPoolGetAttribute ||
      S.real.cuMemPoolGetAttribute(pool, (CUmemPool_attribute)attr, &x) !=
          CUDA_SUCCESS)
    return false;
  *v = (uint64_t)x;
  return true;
}

/* The entry for pool (S.lock held): found, or added; -1 when full. */
static int pool_index(CUmemoryPool pool, uint32_t dev) {
  int n = atomic_load(&S.npools), free_i = -1;
  for (int i = 0; i < n; i++) {
    if (S.pools[i].pool == pool && !S.pools[i].destroyed)
      return i;
    if (!S.pools[i].pool && free_i < 0)
      free_i = i;
  }
  if (free_i < 0 && n < GF_SHIM_POOLS) {
    free_i = n;
    atomic_store(&S.npools, n + 1);
    gf__shim_view_gate();
  }
  if (free_i >= 0)
    S.pools[free_i] = (pool_acct){.pool = pool, .dev = dev};
  return free_i;
}

/* Brings a pool's charge to what it reserves now (S.lock held): growth is
 * paid from held charges first, then charged (forced past the limit when
 * it does not fit: the driver already holds it; *fits turns false); a
 * shrink (trim, or the driver releasing at a synchronisation) is given
 * back, and so are held charges no allocation in flight needs.  Returns
 * -1 when the reservation cannot be read. */
static int pool_settle(pool_acct *p, bool *fits) {
  uint64_t r;
  if (!pool_query(p->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r))
    return -1;
  if (r > p->seen) {
    uint64_t grow = r - p->seen, use = grow < p->held ? grow : p->held;
    if (grow > p->step)
      p->step = grow;
    p->held -= use;
    if (grow > use && !gf__shim_charge(p->dev, grow - use, false)) {
      gf__shim_charge(p->dev, grow - use, true);
      *fits = false;
    }
  } else if (r < p->seen) {
    unreserve(p->dev, p->seen - r);
  }
  p->seen = r;
  if (p->held > p->inflight) {
    unreserve(p->dev, p->held - p->inflight);
    p->held = p->inflight;
  }
  return 0;
}

/* Settles every pool of this process; true when that gave memory back. */
bool gf__shim_pools_settle_all(void) {
  uint64_t before = 0, after = 0;
  bool fits = true;
  pthread_mutex_lock(&S.lock);
  int n = atomic_load(&S.npools);
  for (int i = 0; i < n; i++) {
    pool_acct *p = &S.pools[i];
    if (!p->pool || p->destroyed)
      continue;
    before += p->seen + p->held;
    pool_settle(p, &fits);
    after += p->seen + p->held;
  }
  pthread_mutex_unlock(&S.lock);
  return after < before;
}

/* Drops a pool entry and its charge once it is destroyed and nothing from
 * it is live (S.lock held). */
static void pool_maybe_drop(pool_acct *p) {
  if (!p->destroyed || p->live || p->inflight)
    return;
  unreserve(p->dev, p->seen + p->held);
  memset(p, 0, sizeof(*p));
}

/* An allocation from a pool is forgotten (its memory stays in the pool).
 * When that was a destroyed pool's last, the pool's entry goes and its
 * charge is returned (bytes, on *dev), not given back: the caller does,
 * at once or when its stream passes the free. */
static uint64_t pool_unlive_take(uint32_t i, uint32_t *dev) {
  if (i >= GF_SHIM_POOLS)
    return 0;
  uint64_t drop = 0;
  pthread_mutex_lock(&S.lock);
  pool_acct *p = &S.pools[i];
  if (p->live)
    p->live--;
  if (p->destroyed && !p->live && !p->inflight) {
    drop = p->seen + p->held;
    *dev = p->dev;
    memset(p, 0, sizeof(*p));
  }
  pthread_mutex_unlock(&S.lock);
  return drop;
}

__attribute__((noinline)) void gf__shim_pool_unlive(uint32_t i) {
  uint32_t dev = 0;
  uint64_t drop = pool_unlive_take(i, &dev);
  if (drop)
    unreserve(dev, drop);
}

/* ---- frees queued on a stream ---------------------------------------------
 * cuMemFreeAsync returns before the free is done: the memory stays the
 * driver's until the stream reaches the free, so a charge given back at
 * the call would let the container pass its limit by whatever frees are
 * still queued.  A queued free's charge (an allocation charged by its
 * size, or a destroyed pool's last allocation) is given back by a host
 * function queued on the same stream right after the free: the driver
 * runs it once the stream has passed the free.  It does atomics only (no
 * lock, no driver call, as the driver requires of host functions).  Its
 * record comes from a fixed table; when that is full, or the driver cannot
 * queue a host function, the free waits for its stream
 * (cuStreamSynchronize) and gives back then.  A free captured into a
 * graph gives back at once: the allocations of a capture are charged when
 * captured, and graph memory is not accounted (docs/shim.md).  Pool
 * allocations' frees give nothing back (the pool keeps the memory, and is
 * charged what it reserves), so none of this runs on their path. */
#define GF_SHIM_QUEUED 1024
static struct queued {
  _Atomic int busy;
  int slot, acct;
  int32_t pid; /* the slot's owner when queued */
  uint64_t bytes;
} queued[GF_SHIM_QUEUED];
static _Atomic uint32_t queued_hint;

/* Pool allocations that may grow a pool by more than they hold (tails)
 * go one at a time, in this process (alloc_pooled). */
static pthread_mutex_t pool_tail = PTHREAD_MUTEX_INITIALIZER;

/* In a forked child: no host function of the parent's runs here, and no
 * tail is in flight. */
void gf__shim_queued_reset(void) {
  pthread_mutex_init(&pool_tail, NULL);
  for (int i = 0; i < GF_SHIM_QUEUED; i++)
    atomic_store(&queued[i].busy, 0);
}

/* The host function.  A slot given up meanwhile (the process exiting:
 * detach ran, and another process may own the slot now) is left alone. */
static void queued_run(void *arg) {
  struct queued *q = arg;
  if (atomic_load(&S.region->slots[q->slot].pid) == q->pid)
    gf_region_unreserve(S.region, q->slot, (uint32_t)q->acct, q->bytes);
  atomic_store_explicit(&q->busy, 0, memory_order_release);
}

static struct queued *queued_take(void) {
  uint32_t h = atomic_fetch_add_explicit(&queued_hint, 1, memory_order_relaxed);
  for (uint32_t k = 0; k < GF_SHIM_QUEUED; k++) {
    struct queued *q = &queued[(h + k) % GF_SHIM_QUEUED];
    int zero = 0;
    if (!atomic_load_explicit(&q->busy, memory_order_relaxed) &&
        atomic_compare_exchange_strong(&q->busy, &zero, 1))
      return q;
  }
  return NULL;
}

/* Gives bytes on CUDA device dev back when stream s passes this point. */
static void unreserve_queued(CUstream s, uint32_t dev, uint64_t bytes) {
  int a = acct_of(dev);
  int slot = atomic_load_explicit(&S.slot, memory_order_relaxed);
  if (!bytes || a < 0 || slot < 0)
    return; /* nothing was charged */
  CUstreamCaptureStatus cap = 0;
  if (S.real.cuStreamIsCapturing &&
      S.real.cuStreamIsCapturing(s, &cap) == CUDA_SUCCESS && cap != 0) {
    gf_region_unreserve(S.region, slot, (uint32_t)a, bytes);
    return;
  }
  struct queued *q = S.real.cuLaunchHostFunc ? queued_take() : NULL;
  if (q) {
    q->slot = slot;
    q->acct = a;
    q->pid = atomic_load(&S.region->slots[slot].pid);
    q->bytes = bytes;
    if (S.real.cuLaunchHostFunc(s, queued_run, q) == CUDA_SUCCESS)
      return;
    atomic_store_explicit(&q->busy, 0, memory_order_release);
  }
  if (S.real.cuStreamSynchronize)
    S.real.cuStreamSynchronize(s);
  gf_region_unreserve(S.region, slot, (uint32_t)a, bytes);
}

/* What an entry holds, given back when stream s passes its free. */
static void entry_release_queued(const entry *e, CUstream s) {
  if (e->bytes)
    unreserve_queued(s, e->dev, e->bytes);
  if (e->pool) {
    uint32_t dev = 0;
    uint64_t drop = pool_unlive_take(e->pool - 1, &dev);
    if (drop)
      unreserve_queued(s, dev, drop);
  }
}

static gf_cu_result call_alloc(async_fn fa, pool_fn fp, CUdeviceptr *dptr,
                               size_t bytes, CUmemoryPool pool, CUstream s) {
  return fp ? fp(dptr, bytes, pool, s) : fa(dptr, bytes, s);
}

/* Charged per allocation, given back at free: when the pool cannot be
 * seen (no pool query in the driver, or the pool table is full). */
static gf_cu_result alloc_plain(async_fn fa, pool_fn fp, uint32_t dev,
                                CUdeviceptr *dptr, size_t bytes,
                                CUmemoryPool pool, CUstream s) {
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = call_alloc(fa, fp, dptr, bytes, pool, s);
  return alloc_done(rc, &S.ptrs, rc == CUDA_SUCCESS ? (uint64_t)*dptr : 0, dev,
                    bytes);
}

/* Whether pool pl has bytes free inside it (reserved - used). */
static bool pool_room(CUmemoryPool pl, uint64_t bytes) {
  uint64_t r, u;
  return pool_query(pl, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r) &&
         pool_query(pl, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &u) && r >= u &&
         r - u >= bytes;
}

/* A tail's turn (pool_tail held): the pool is settled first, so a growth
 * another tail left uncovered is charged; then the allocation holds its
 * size, or, when that does not fit, nothing, where the pool has that much
 * free inside it (no growth).  False: refused. */
static bool tail_turn(pool_acct *p, CUmemoryPool pl, uint32_t dev,
                      uint64_t bytes, uint64_t *held) {
  bool fits = true;
  pthread_mutex_lock(&S.lock);
  pool_settle(p, &fits);
  pthread_mutex_unlock(&S.lock);
  if (reserve(dev, bytes)) {
    *held = bytes;
    return true;
  }
  *held = 0;
  return pool_room(pl, bytes);
}

/* cuMemAllocAsync (fa; the device's current pool) and
 * cuMemAllocFromPoolAsync (fp; an explicit pool).  The size asked is held
 * before the call (or nothing, when the limit is reached but the pool has
 * that much free inside it); after it the pool is settled to its
 * reservation.  If the pool grew past the limit anyway, the allocation is
 * freed again and the call fails with CUDA_ERROR_OUT_OF_MEMORY; the growth
 * stays charged until the pool gives it back. */
static gf_cu_result alloc_pooled(async_fn fa, pool_fn fp, free_async_fn ff,
                                 CUdeviceptr *dptr, size_t bytes,
                                 CUmemoryPool pool, CUstream s) {
  if (!dptr || !guarding())
    return call_alloc(fa, fp, dptr, bytes, pool, s);
  uint32_t dev = current_device();
  CUmemoryPool pl = fp ? pool : NULL;
  if (!fp && (!S.real.cuDeviceGetMemPool ||
              S.real.cuDeviceGetMemPool(&pl, (CUdevice)dev) != CUDA_SUCCESS))
    pl = NULL;
  int pi = -1;
  uint64_t probe;
  if (pl && pool_query(pl, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &probe)) {
    pthread_mutex_lock(&S.lock);
    pi = pool_index(pl, dev);
    pthread_mutex_unlock(&S.lock);
  }
  if (pi < 0)
    return alloc_plain(fa, fp, dev, dptr, bytes, pool, s);
  pool_acct *p = &S.pools[pi];
  pthread_mutex_lock(&S.lock);
  uint64_t step = p->step;
  pthread_mutex_unlock(&S.lock);
  /* Held: the size asked and one step of the pool's growth, which covers
   * whatever the driver reserves for it.  Where that does not fit (near
   * the limit) or the step is not known yet, the allocation is a "tail":
   * tails go one at a time and decide again once they have the turn
   * (tail_turn), so at most one growth is ever uncovered, and it is less
   * than one step (docs/shim.md, "Pools"). */
  uint64_t held;
  bool tail = false;
  if (step && bytes <= UINT64_MAX - step && reserve(dev, bytes + step)) {
    held = bytes + step;
  } else {
    tail = true;
    pthread_mutex_lock(&pool_tail);
    if (!tail_turn(p, pl, dev, bytes, &held)) {
      pthread_mutex_unlock(&pool_tail);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  pthread_mutex_lock(&S.lock);
  p->held += held;
  p->inflight += held;
  pthread_mutex_unlock(&S.lock);

  gf_cu_result rc = call_alloc(fa, fp, dptr, bytes, pool, s);

  bool fits = true;
  uint64_t own = 0; /* charged to the pointer itself */
  pthread_mutex_lock(&S.lock);
  p->inflight -= held;
  if (pool_settle(p, &fits) < 0) {
    /* The pool went out of sight: this allocation pays for itself. */
    uint64_t take = held < p->held ? held : p->held;
    p->held -= take;
    if (rc == CUDA_SUCCESS) {
      own = bytes;
      if (take < bytes)
        gf__shim_charge(dev, bytes - take, true);
    } else {
      unreserve(dev, take);
    }
  } else if (rc == CUDA_SUCCESS) {
    p->live++;
  }
  pthread_mutex_unlock(&S.lock);
  if (tail)
    pthread_mutex_unlock(&pool_tail);
  if (rc != CUDA_SUCCESS)
    return rc;
  entry e = {(uint64_t)*dptr, own, dev, own ? 0 : (uint32_t)pi + 1};
  if (!fits) {
    /* Freed before it is ever recorded: nobody else can hold a record of
     * this address, and none of ours outlives the free. */
    gf__shim_log(GF_SHIM_LOG_INFO,
                 "pool grew past the limit; allocation undone");
    if ((ff ? ff(e.key, s) : CUDA_ERROR_NOT_INITIALIZED) == CUDA_SUCCESS)
      entry_release_queued(&e, s);
    else
      track_entry(&S.ptrs, e); /* still held: still charged */
    *dptr = 0;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  track_entry(&S.ptrs, e);
  return rc;
}

EXPORT gf_cu_result cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes,
                                    CUstream s) {
  init();
  if (!S.real.cuMemAllocAsync)
    return CUDA_ERROR_NOT_INITIALIZED;
  return alloc_pooled(S.real.cuMemAllocAsync, NULL, S.real.cuMemFreeAsync, dptr,
                      bytes, NULL, s);
}

EXPORT gf_cu_result cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes,
                                         CUstream s) {
  init();
  if (!S.real.cuMemAllocAsync_ptsz)
    return CUDA_ERROR_NOT_INITIALIZED;
  return alloc_pooled(S.real.cuMemAllocAsync_ptsz, NULL,
                      S.real.cuMemFreeAsync_ptsz, dptr, bytes, NULL, s);
}

EXPORT gf_cu_result cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes,
                                            CUmemoryPool pool, CUstream s) {
  init();
  if (!S.real.cuMemAllocFromPoolAsync)
    return CUDA_ERROR_NOT_INITIALIZED;
  return alloc_pooled(NULL, S.real.cuMemAllocFromPoolAsync,
                      S.real.cuMemFreeAsync, dptr, bytes, pool, s);
}

EXPORT gf_cu_result cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr,
                                                 size_t bytes,
                                                 CUmemoryPool pool,
                                                 CUstream s) {
  init();
  if (!S.real.cuMemAllocFromPoolAsync_ptsz)
    return CUDA_ERROR_NOT_INITIALIZED;
  return alloc_pooled(NULL, S.real.cuMemAllocFromPoolAsync_ptsz,
                      S.real.cuMemFreeAsync_ptsz, dptr, bytes, pool, s);
}

EXPORT gf_cu_result cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  init();
  if (!S.real.cuMemPoolTrimTo)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuMemPoolTrimTo(pool, keep);
  if (rc != CUDA_SUCCESS || !guarding())
    return rc;
  bool fits = true;
  pthread_mutex_lock(&S.lock);
  int n = atomic_load(&S.npools);
  for (int i = 0; i < n; i++)
    if (S.pools[i].pool == pool && !S.pools[i].destroyed)
      pool_settle(&S.pools[i], &fits);
  pthread_mutex_unlock(&S.lock);
  return rc;
}

/* The driver releases a destroyed pool's memory once no allocation from it
 * is outstanding; its charge goes then too. */
EXPORT gf_cu_result cuMemPoolDestroy(CUmemoryPool pool) {
  init();
  if (!S.real.cuMemPoolDestroy)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuMemPoolDestroy(pool);
  if (rc != CUDA_SUCCESS || !guarding())
    return rc;
  pthread_mutex_lock(&S.lock);
  int n = atomic_load(&S.npools);
  for (int i = 0; i < n; i++)
    if (S.pools[i].pool == pool && !S.pools[i].destroyed) {
      S.pools[i].destroyed = true;
      pool_maybe_drop(&S.pools[i]);
    }
  pthread_mutex_unlock(&S.lock);
  return rc;
}

/* A stream-ordered free: the record leaves the table before the driver
 * call (as forget_begin), its charge when the stream passes the free. */
static gf_cu_result free_async(free_async_fn ff, CUdeviceptr dptr, CUstream s) {
  forget f = forget_begin(&S.ptrs, dptr);
  gf_cu_result rc = ff(dptr, s);
  if (!f.had)
    return rc;
  if (rc == CUDA_SUCCESS)
    entry_release_queued(&f.e, s);
  else
    track_entry(f.t, f.e);
  return rc;
}

EXPORT gf_cu_result cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
  init();
  if (!S.real.cuMemFreeAsync)
    return CUDA_ERROR_NOT_INITIALIZED;
  return free_async(S.real.cuMemFreeAsync, dptr, s);
}

/* The NULL stream of a _ptsz call is the thread's own stream: named so for
 * the host function, queued through the legacy-stream entry point. */
EXPORT gf_cu_result cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  init();
  if (!S.real.cuMemFreeAsync_ptsz)
    return CUDA_ERROR_NOT_INITIALIZED;
  return free_async(S.real.cuMemFreeAsync_ptsz, dptr,
                    s ? s : CU_STREAM_PER_THREAD);
}
