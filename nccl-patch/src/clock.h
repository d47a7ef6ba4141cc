/*
 * CLOCK_REALTIME in nanoseconds, cheaply, for the event path.
 *
 * On x86-64 with an invariant TSC that the kernel itself uses as its clock
 * source, time is read with rdtsc and mapped to CLOCK_REALTIME through an
 * anchor (tsc0, ns0) and a rate, both taken from clock_gettime. The sweeper
 * thread re-anchors every few hundred milliseconds, so the mapping follows NTP
 * slewing and steps of the real-time clock. Anywhere else it is clock_gettime.
 * Readers never block: the anchor is published under a sequence counter.
 */
#ifndef COMMWATCH_CLOCK_H_
#define COMMWATCH_CLOCK_H_

#include <stdint.h>
#include <time.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

enum { CW_CLOCK_REALTIME = 0, CW_CLOCK_TSC = 1 };

struct cw_clock {
  uint64_t seq;    /* (atomic) odd while the anchor is rewritten */
  uint64_t tsc0;   /* (atomic) TSC at the anchor */
  int64_t ns0;     /* (atomic) CLOCK_REALTIME at the anchor */
  uint64_t mult;   /* (atomic) ns per TSC tick, << 32 */
  int source;      /* CW_CLOCK_*; fixed while events flow */
  uint64_t last_tsc; /* re-anchoring state (one writer) */
  int64_t last_ns;
};

extern struct cw_clock cw_clk;

static inline int64_t cw_realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t cw_now(void) {
#if defined(__x86_64__)
  if (__builtin_expect(cw_clk.source == CW_CLOCK_TSC, 1)) {
    for (;;) {
      uint64_t s = __atomic_load_n(&cw_clk.seq, __ATOMIC_ACQUIRE);
      uint64_t t0 = __atomic_load_n(&cw_clk.tsc0, __ATOMIC_RELAXED);
      int64_t n0 = __atomic_load_n(&cw_clk.ns0, __ATOMIC_RELAXED);
      uint64_t m = __atomic_load_n(&cw_clk.mult, __ATOMIC_RELAXED);
      __atomic_thread_fence(__ATOMIC_ACQUIRE);
      if ((s & 1) == 0 && s == __atomic_load_n(&cw_clk.seq, __ATOMIC_RELAXED)) {
        int64_t d = (int64_t)(__rdtsc() - t0); /* may be slightly negative across cores */
        return n0 + (int64_t)(((__int128)d * (__int128)m) >> 32);
      }
    }
  }
#endif
  return cw_realtime_ns();
}

/* Chooses the source (want_tsc: 0 forces clock_gettime) and anchors it; init path. */
void cw_clock_setup(int want_tsc);
/* Re-anchors to CLOCK_REALTIME; one caller at a time (the sweeper, or setup). */
void cw_clock_anchor(void);
const char* cw_clock_name(void);

#endif /* COMMWATCH_CLOCK_H_ */
