/* Source selection and anchoring of the event-path clock (see clock.h). */
#include "clock.h"

#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

struct cw_clock cw_clk;

#define CW_CLOCKSOURCE "/sys/devices/system/clocksource/clocksource0/current_clocksource"
#define CW_MAX_RATE_CHANGE 1000 /* ppm: a larger change means the real-time clock stepped */

#if defined(__x86_64__)
/* The TSC counts at a constant rate through P- and C-states, and the kernel
 * trusts it enough to keep time with it (it falls back to another clock
 * source when the TSC is unstable or unsynchronised across CPUs). */
static int tsc_usable(void) {
  unsigned a, b, c, d;
  char buf[32] = {0};
  FILE* f;
  if (__get_cpuid_max(0x80000000u, NULL) < 0x80000007u) return 0;
  __cpuid(0x80000007u, a, b, c, d);
  if ((d & (1u << 8)) == 0) return 0; /* invariant TSC */
  f = fopen(CW_CLOCKSOURCE, "r");
  if (f == NULL) return 0;
  if (fgets(buf, sizeof(buf), f) == NULL) buf[0] = '\0';
  fclose(f);
  return strcmp(buf, "tsc\n") == 0;
}

/* One (TSC, CLOCK_REALTIME) pair: the tightest of a few bracketed reads. */
static void sample(uint64_t* tsc, int64_t* ns) {
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < 5; i++) {
    uint64_t a = __rdtsc();
    int64_t n = cw_realtime_ns();
    uint64_t b = __rdtsc();
    if (b >= a && b - a < best) {
      best = b - a;
      *tsc = a + (b - a) / 2;
      *ns = n;
    }
  }
}

static void publish(uint64_t tsc, int64_t ns, uint64_t mult) {
  uint64_t s = __atomic_load_n(&cw_clk.seq, __ATOMIC_RELAXED);
  __atomic_store_n(&cw_clk.seq, s + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  __atomic_store_n(&cw_clk.tsc0, tsc, __ATOMIC_RELAXED);
  __atomic_store_n(&cw_clk.ns0, ns, __ATOMIC_RELAXED);
  __atomic_store_n(&cw_clk.mult, mult, __ATOMIC_RELAXED);
  __atomic_store_n(&cw_clk.seq, s + 2, __ATOMIC_RELEASE);
}

/* ns per tick << 32 between two samples, 0 if implausible (< 0.1 or > 20 GHz). */
static uint64_t rate(uint64_t t0, int64_t n0, uint64_t t1, int64_t n1) {
  if (t1 <= t0 || n1 <= n0) return 0;
  unsigned __int128 m = ((unsigned __int128)(uint64_t)(n1 - n0) << 32) / (t1 - t0);
  if (m < ((unsigned __int128)1 << 32) / 20 || m > ((unsigned __int128)10 << 32)) return 0;
  return (uint64_t)m;
}
#endif

void cw_clock_setup(int want_tsc) {
  memset(&cw_clk, 0, sizeof(cw_clk));
  cw_clk.source = CW_CLOCK_REALTIME;
#if defined(__x86_64__)
  if (want_tsc && tsc_usable()) {
    uint64_t t0 = 0, t1 = 0, m;
    int64_t n0 = 0, n1 = 0;
    struct timespec pause = {0, 2000000};
    sample(&t0, &n0);
    nanosleep(&pause, NULL);
    sample(&t1, &n1);
    m = rate(t0, n0, t1, n1);
    if (m != 0) {
      publish(t1, n1, m);
      cw_clk.last_tsc = t1;
      cw_clk.last_ns = n1;
      cw_clk.source = CW_CLOCK_TSC;
    }
  }
#else
  (void)want_tsc;
#endif
}

void cw_clock_anchor(void) {
#if defined(__x86_64__)
  uint64_t t = 0, m, old;
  int64_t n = 0;
  if (cw_clk.source != CW_CLOCK_TSC) return;
  sample(&t, &n);
  old = __atomic_load_n(&cw_clk.mult, __ATOMIC_RELAXED);
  m = rate(cw_clk.last_tsc, cw_clk.last_ns, t, n);
  /* Keep the old rate across a step of the real-time clock; follow slewing. */
  if (m == 0 || (m > old ? m - old : old - m) > old / 1000000 * CW_MAX_RATE_CHANGE) m = old;
  publish(t, n, m);
  cw_clk.last_tsc = t;
  cw_clk.last_ns = n;
#endif
}

const char* cw_clock_name(void) { return cw_clk.source == CW_CLOCK_TSC ? "tsc" : "clock_gettime"; }
