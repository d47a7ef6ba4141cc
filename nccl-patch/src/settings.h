/* commwatch probe settings, read once from the environment at first init. */
#ifndef COMMWATCH_SETTINGS_H_
#define COMMWATCH_SETTINGS_H_

#include <stddef.h>
#include <stdint.h>

#define CW_DEFAULT_RING_DIR      "/dev/shm/commwatch"
#define CW_DEFAULT_JOB_ID        "default"
#define CW_DEFAULT_RING_CAPACITY 65536u
#define CW_MIN_RING_CAPACITY     64u
#define CW_MAX_RING_CAPACITY     (1u << 24)
#define CW_DEFAULT_MAX_INFLIGHT  4096u
#define CW_MIN_MAX_INFLIGHT      64u
#define CW_MAX_MAX_INFLIGHT      (1u << 20)
#define CW_RING_DIR_MAX          512
#define CW_DEFAULT_TIMEOUT_MS    300000u /* 5 minutes */
#define CW_MIN_TIMEOUT_MS        10u
#define CW_MAX_TIMEOUT_MS        86400000u
#define CW_DEFAULT_GRACE_MS      10u
#define CW_MIN_GRACE_MS          1u
#define CW_MAX_GRACE_MS          10000u
#define CW_DEFAULT_DEVICE_ENTRY_MS 1000u
#define CW_MIN_DEVICE_ENTRY_MS   10u
#define CW_MAX_DEVICE_ENTRY_MS   600000u

struct cw_settings {
  char ring_dir[CW_RING_DIR_MAX]; /* COMMWATCH_RING_DIR */
  char job_id[64];                /* COMMWATCH_JOB_ID, 1..63 of [A-Za-z0-9._-] */
  uint64_t ring_capacity;         /* COMMWATCH_RING_CAPACITY, power of two */
  uint32_t max_inflight;          /* COMMWATCH_MAX_INFLIGHT, power of two */
  int gpu_timing;                 /* COMMWATCH_GPU_TIMING, 0 or 1 */
  int use_tsc;                    /* COMMWATCH_CLOCK: 1 auto (TSC where the kernel uses it), 0 realtime */
  uint32_t timeout_ms;            /* COMMWATCH_COMPLETION_TIMEOUT_MS */
  uint32_t grace_ms;              /* COMMWATCH_CHANNEL_GRACE_MS */
  uint32_t device_entry_ms;       /* COMMWATCH_DEVICE_ENTRY_MS: a kernel running this long uncompleted gets a device entry */
  int32_t rank;                   /* RANK | OMPI_COMM_WORLD_RANK | SLURM_PROCID | -1 */
  const char* rank_source;        /* name of the variable the rank came from, or "none" */
};

/* Fills *s from the environment. Returns 0, or -1 with a message in err.
 * Non-fatal remarks (an unparsable RANK that was skipped) go to warn. */
int cw_settings_load(struct cw_settings* s, char* err, size_t err_len,
                     char* warn, size_t warn_len);

#endif /* COMMWATCH_SETTINGS_H_ */
