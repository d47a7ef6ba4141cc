/*
 * The sweeper: one background thread for what no NCCL event triggers. Every
 * tick (half the channel grace, 1..50 ms) it completes operations whose grace
 * has passed; every scan period (a quarter of the completion timeout, at most
 * 250 ms) it re-anchors the clock, scans the pool for succession and
 * timeouts, and helps commit_index along. It never runs on NCCL's threads.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "probe.h"

static pthread_mutex_t sw_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sw_cond;
static pthread_t sw_thread;
static int sw_running;
static int sw_stop;

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static int64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void* sweeper_main(void* arg) {
  const int64_t tick = clamp(cw.grace_ns / 2, 1000000, 50000000);
  const int64_t scan_period = clamp(cw.timeout_ns / 4, tick, 250000000);
  int64_t next_scan = 0;
  (void)arg;

  pthread_mutex_lock(&sw_lock);
  while (!sw_stop) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += (long)tick;
    until.tv_sec += until.tv_nsec / 1000000000;
    until.tv_nsec %= 1000000000;
    while (!sw_stop && pthread_cond_timedwait(&sw_cond, &sw_lock, &until) != ETIMEDOUT) {
    }
    if (sw_stop) break;
    pthread_mutex_unlock(&sw_lock);

    cw_sweep_attention(cw_now());
    if (monotonic_ns() >= next_scan) { /* scheduled on a clock that never steps */
      cw_clock_anchor();
      cw_sweep_scan(cw_now());
      cw_ring_advance(&cw.ring);
      next_scan = monotonic_ns() + scan_period;
    }
    pthread_mutex_lock(&sw_lock);
  }
  pthread_mutex_unlock(&sw_lock);
  return NULL;
}

int cw_sweeper_start(char* err, size_t err_len) {
  pthread_condattr_t attr;
  int rc;
  if (sw_running) return 0;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&sw_cond, &attr);
  pthread_condattr_destroy(&attr);
  sw_stop = 0;
  rc = pthread_create(&sw_thread, NULL, sweeper_main, NULL);
  if (rc != 0) {
    pthread_cond_destroy(&sw_cond);
    snprintf(err, err_len, "cannot start the sweeper thread: %s", strerror(rc));
    return -1;
  }
  pthread_setname_np(sw_thread, "commwatch-sweep");
  sw_running = 1;
  return 0;
}

void cw_sweeper_stop(void) {
  if (!sw_running) return;
  pthread_mutex_lock(&sw_lock);
  sw_stop = 1;
  pthread_cond_signal(&sw_cond);
  pthread_mutex_unlock(&sw_lock);
  pthread_join(sw_thread, NULL);
  pthread_cond_destroy(&sw_cond);
  sw_running = 0;
}

/* After fork the child has no sweeper thread, whatever the parent had. */
void cw_sweeper_forget(void) {
  sw_running = 0;
  pthread_mutex_init(&sw_lock, NULL);
}
