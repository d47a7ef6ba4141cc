/*
 * Completion of operations: the record written when an operation is done or
 * given up, and the sweeper's passes over the pool (probe.h, README "Completion").
 */
#include "probe.h"

#define CW_GPU_WINDOW 256u /* clock-offset samples per estimation window, a power of two */

static inline void atomic_max_i64(int64_t* p, int64_t v) {
  int64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v > cur && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

/* GPU globaltimer -> CLOCK_REALTIME. The host sees a GPU stamp only after it was
 * taken, so (host now - stamp) >= true offset; the minimum over a window of
 * samples estimates the offset, and each new window follows clock drift. */
void cw_gpu_clock_sample(struct cw_ctx* ctx, uint64_t gpu_ns, int64_t now) {
  int64_t d = now - (int64_t)gpu_ns;
  uint32_t n = __atomic_fetch_add(&ctx->gpu_samples, 1, __ATOMIC_RELAXED);
  if (d < __atomic_load_n(&ctx->gpu_off_win, __ATOMIC_RELAXED))
    __atomic_store_n(&ctx->gpu_off_win, d, __ATOMIC_RELAXED);
  if (n < CW_GPU_WINDOW && d < __atomic_load_n(&ctx->gpu_off, __ATOMIC_RELAXED))
    __atomic_store_n(&ctx->gpu_off, d, __ATOMIC_RELAXED);
  if (((n + 1) & (CW_GPU_WINDOW - 1)) == 0) {
    __atomic_store_n(&ctx->gpu_off, __atomic_load_n(&ctx->gpu_off_win, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&ctx->gpu_off_win, INT64_MAX, __ATOMIC_RELAXED);
  }
}

/* The fields every record of an operation repeats from its entry. */
static void op_record(const struct cw_op* o, const struct cw_ctx* ctx, struct cw_record* r) {
  r->kind = CW_KIND_CALL;
  r->op = o->op;
  r->flags = o->flags;
  r->rank = cw.set.rank;
  r->comm = ctx->comm;
  r->seq = o->seq;
  r->t_start_ns = o->t_start;
  r->t_end_ns = 0;
  r->bytes = o->bytes;
  r->comm_rank = ctx->comm_rank;
  r->peer = o->peer;
  r->nranks = ctx->nranks;
  r->aux = o->aux;
}

void cw_op_finish(struct cw_op* o, uint64_t ctl, int how, int64_t now) {
  struct cw_ctx* ctx = o->ctx;
  struct cw_record r;
  op_record(o, ctx, &r);
  if (how == CW_FINISH_OBSERVED) {
    uint64_t g0 = __atomic_load_n(&o->gpu_start, __ATOMIC_RELAXED);
    uint64_t g1 = __atomic_load_n(&o->gpu_stop, __ATOMIC_RELAXED);
    int64_t off = __atomic_load_n(&ctx->gpu_off, __ATOMIC_RELAXED);
    if (g0 != 0 && g0 != UINT64_MAX && g1 >= g0 && off != INT64_MAX) {
      r.flags |= CW_FLAG_COMPLETED | CW_FLAG_GPU_TIMED;
      r.t_start_ns = (int64_t)g0 + off;
      r.t_end_ns = (int64_t)g1 + off;
    } else { /* the channels carried no GPU stamps: host times of what was seen */
      int64_t t_end = __atomic_load_n(&o->t_last_ch, __ATOMIC_RELAXED);
      r.flags |= CW_FLAG_COMPLETED | CW_FLAG_ENQUEUED;
      r.t_end_ns = t_end > r.t_start_ns ? t_end : r.t_start_ns;
    }
    atomic_max_i64(&ctx->gpu_done_tstart, o->t_start);
  } else {
    r.flags |= CW_FLAG_ENQUEUED | CW_FLAG_COMPLETION_LOST;
  }
  cw_ring_put(&cw.ring, &r, now);
  __atomic_store_n(&o->ctl, (uint64_t)(CW_CTL_GEN(ctl) + 1u) << 32, __ATOMIC_RELEASE); /* free */
}

int cw_op_lose(struct cw_op* o, uint32_t gen, int64_t now) {
  uint64_t v = __atomic_load_n(&o->ctl, __ATOMIC_ACQUIRE);
  for (;;) {
    if ((v & (CW_CTL_LIVE | CW_CTL_READY)) != (CW_CTL_LIVE | CW_CTL_READY) || (v & CW_CTL_DONE) ||
        CW_CTL_GEN(v) != gen)
      return 0;
    if (__atomic_compare_exchange_n(&o->ctl, &v, v | CW_CTL_DONE, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      break;
  }
  cw_op_finish(o, v | CW_CTL_DONE, CW_FINISH_LOST, now);
  return 1;
}

/* The grace has passed with no new channel event: complete as observed. */
static int grace_over(struct cw_op* o, uint64_t v, int64_t now) {
  int64_t waited = now - __atomic_load_n(&o->t_last_ch, __ATOMIC_RELAXED);
  if (waited < 0) { /* CLOCK_REALTIME stepped back: the grace starts again */
    __atomic_store_n(&o->t_last_ch, now, __ATOMIC_RELAXED);
    return 0;
  }
  if (waited < cw.grace_ns) return 0;
  if (!__atomic_compare_exchange_n(&o->ctl, &v, v | CW_CTL_DONE, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_RELAXED))
    return 1; /* something happened meanwhile; whoever changed it decides */
  cw_op_finish(o, v | CW_CTL_DONE, CW_FINISH_OBSERVED, now);
  return 1;
}

static inline int looked_at(uint64_t v) {
  return (v & (CW_CTL_LIVE | CW_CTL_READY | CW_CTL_DONE)) == (CW_CTL_LIVE | CW_CTL_READY);
}

void cw_sweep_attention(int64_t now) {
  if (!__atomic_exchange_n(&cw.attention_pending, 0, __ATOMIC_ACQ_REL)) return;
  for (uint32_t w = 0; w < cw.attention_words; w++) {
    uint64_t bits = __atomic_exchange_n(&cw.attention[w], 0, __ATOMIC_ACQ_REL);
    while (bits != 0) {
      uint32_t slot = w * 64u + (uint32_t)__builtin_ctzll(bits);
      struct cw_op* o = &cw.ops[slot];
      uint64_t v = __atomic_load_n(&o->ctl, __ATOMIC_ACQUIRE);
      bits &= bits - 1;
      if (looked_at(v) && cw_awaiting_grace(v) && !grace_over(o, v, now)) cw_attention(slot);
    }
  }
}

/* Device entry: an operation whose kernel started on the GPU and has run for the
 * device-entry time without completing is written once more as an entry, with the
 * GPU's start time (GPU_TIMED, COMPLETED clear; wire spec 1: a GPU-timed start is
 * when the operation started on the device). Its rank is inside the call on the
 * device, not only queued behind another kernel: what tells the rank a peer waits
 * for from the rank waiting. Calls that complete sooner (all normal ones) get no
 * third record. The completion may be claimed between the check below and the
 * write; the entry then follows its completion in the ring, which changes no
 * counter (consumers take the highest seq entered and completed). */
static void device_entry(struct cw_op* o, uint64_t v, int64_t now) {
  const uint64_t tag = ((uint64_t)CW_CTL_GEN(v) << 1) | 1u;
  const struct cw_ctx* ctx;
  struct cw_record r;
  uint64_t g0, v2;
  int64_t off;
  if (o->dev_entry_tag == tag || CW_CTL_STARTED(v) == 0 || CW_CTL_STOPPED(v) >= CW_CTL_STARTED(v)) return;
  g0 = __atomic_load_n(&o->gpu_start, __ATOMIC_RELAXED);
  ctx = __atomic_load_n(&o->ctx, __ATOMIC_RELAXED);
  off = __atomic_load_n(&ctx->gpu_off, __ATOMIC_RELAXED);
  /* waited on the host clock since its latest channel event (the GPU stamp's offset
   * is an estimate; the host clock is the one `now` is on) */
  if (g0 == 0 || g0 == UINT64_MAX || off == INT64_MAX ||
      now - __atomic_load_n(&o->t_last_ch, __ATOMIC_RELAXED) < cw.device_entry_ns)
    return;
  op_record(o, ctx, &r);
  r.flags = (uint16_t)(o->flags | CW_FLAG_GPU_TIMED);
  r.t_start_ns = (int64_t)g0 + off;
  v2 = __atomic_load_n(&o->ctl, __ATOMIC_ACQUIRE);
  if (CW_CTL_GEN(v2) != CW_CTL_GEN(v) || (v2 & CW_CTL_DONE)) return; /* completed or reused meanwhile */
  o->dev_entry_tag = tag;
  cw_ring_put(&cw.ring, &r, now);
}

void cw_sweep_scan(int64_t now) {
  for (uint32_t i = 0; i <= cw.ops_mask; i++) {
    struct cw_op* o = &cw.ops[i];
    uint64_t v = __atomic_load_n(&o->ctl, __ATOMIC_ACQUIRE);
    if (!looked_at(v)) continue;
    /* The slot may change hands under our feet: what is read here is checked
     * again (generation) by whoever acts on it. */
    const struct cw_ctx* ctx = __atomic_load_n(&o->ctx, __ATOMIC_RELAXED);
    if (now - __atomic_load_n(&o->t_start, __ATOMIC_RELAXED) >= cw.timeout_ns) {
      /* never observed: give up, it is no wait */
      cw_op_lose(o, CW_CTL_GEN(v), now);
      continue;
    }
    device_entry(o, v, now);
    if ((v & CW_CTL_TASK_STOPPED) == 0) continue;
    if (o->seen_stop_gen != CW_CTL_GEN(v) || o->t_seen_stop == 0) {
      /* The time now, not the scan's start: the operation may have started
       * after the scan did, and an operation started before its stop is no
       * successor. */
      o->seen_stop_gen = CW_CTL_GEN(v);
      o->t_seen_stop = cw_now();
    }
    if (cw_awaiting_grace(v)) {
      grace_over(o, v, now); /* in case its attention bit was consumed early */
      continue;
    }
    /* Succession: NCCL runs a communicator's kernels one after another. An
     * operation of the same communicator that the host started after this one's
     * task stop is a later kernel; once it has finished on the GPU, this one has
     * too, and the channel events it is missing will not come. */
    if (__atomic_load_n(&ctx->gpu_done_tstart, __ATOMIC_RELAXED) > o->t_seen_stop &&
        now - __atomic_load_n(&o->t_last_ch, __ATOMIC_RELAXED) >= cw.grace_ns)
      cw_op_lose(o, CW_CTL_GEN(v), now);
  }
}

uint32_t cw_abort_ctx(const struct cw_ctx* ctx, int64_t now) {
  uint32_t n = 0;
  for (uint32_t i = 0; i <= cw.ops_mask; i++) {
    struct cw_op* o = &cw.ops[i];
    uint64_t v = __atomic_load_n(&o->ctl, __ATOMIC_ACQUIRE);
    if (looked_at(v) && __atomic_load_n(&o->ctx, __ATOMIC_RELAXED) == ctx)
      n += (uint32_t)cw_op_lose(o, CW_CTL_GEN(v), now);
  }
  return n;
}

uint32_t cw_abort_all(int64_t now) {
  uint32_t n = 0;
  for (uint32_t i = 0; i <= cw.ops_mask; i++) {
    uint64_t v = __atomic_load_n(&cw.ops[i].ctl, __ATOMIC_ACQUIRE);
    n += (uint32_t)cw_op_lose(&cw.ops[i], CW_CTL_GEN(v), now);
  }
  return n;
}
