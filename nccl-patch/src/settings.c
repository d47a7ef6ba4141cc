/* Environment parsing and validation for the commwatch probe (init path only). */
#include "settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_u64(const char* text, uint64_t* out) {
  char* end = NULL;
  if (text[0] < '0' || text[0] > '9') return -1;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') return -1;
  *out = (uint64_t)v;
  return 0;
}

static int is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

static int load_pow2(const char* name, uint64_t def, uint64_t lo, uint64_t hi,
                     uint64_t* out, char* err, size_t err_len) {
  const char* text = getenv(name);
  uint64_t v = def;
  if (text != NULL && text[0] != '\0') {
    if (parse_u64(text, &v) != 0 || !is_pow2(v) || v < lo || v > hi) {
      snprintf(err, err_len,
               "%s='%s' is invalid: expected a power of two between %llu and %llu (default %llu)",
               name, text, (unsigned long long)lo, (unsigned long long)hi,
               (unsigned long long)def);
      return -1;
    }
  }
  *out = v;
  return 0;
}

static int load_range(const char* name, uint32_t def, uint32_t lo, uint32_t hi, uint32_t* out,
                      char* err, size_t err_len) {
  const char* text = getenv(name);
  uint64_t v = def;
  if (text != NULL && text[0] != '\0') {
    if (parse_u64(text, &v) != 0 || v < lo || v > hi) {
      snprintf(err, err_len, "%s='%s' is invalid: expected an integer between %u and %u (default %u)",
               name, text, lo, hi, def);
      return -1;
    }
  }
  *out = (uint32_t)v;
  return 0;
}

static int valid_job_id(const char* id) {
  size_t n = strlen(id);
  if (n == 0 || n > 63) return 0;
  if (strcmp(id, ".") == 0 || strcmp(id, "..") == 0) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = id[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-';
    if (!ok) return 0;
  }
  return 1;
}

static void load_rank(struct cw_settings* s, char* warn, size_t warn_len) {
  static const char* const sources[] = {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"};
  s->rank = -1;
  s->rank_source = "none";
  for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++) {
    const char* text = getenv(sources[i]);
    uint64_t v = 0;
    if (text == NULL || text[0] == '\0') continue;
    if (parse_u64(text, &v) == 0 && v <= INT32_MAX) {
      s->rank = (int32_t)v;
      s->rank_source = sources[i];
      return;
    }
    snprintf(warn, warn_len, "%s='%s' is not a non-negative integer; ignored", sources[i], text);
  }
}

int cw_settings_load(struct cw_settings* s, char* err, size_t err_len,
                     char* warn, size_t warn_len) {
  const char* text;
  uint64_t v = 0;

  memset(s, 0, sizeof(*s));
  err[0] = '\0';
  warn[0] = '\0';

  text = getenv("COMMWATCH_RING_DIR");
  if (text == NULL || text[0] == '\0') text = CW_DEFAULT_RING_DIR;
  if (text[0] != '/' || strlen(text) >= CW_RING_DIR_MAX - 80) {
    snprintf(err, err_len,
             "COMMWATCH_RING_DIR='%s' is invalid: expected an absolute path shorter than %d bytes"
             " (default %s)", text, CW_RING_DIR_MAX - 80, CW_DEFAULT_RING_DIR);
    return -1;
  }
  strcpy(s->ring_dir, text);

  text = getenv("COMMWATCH_JOB_ID");
  if (text == NULL || text[0] == '\0') text = CW_DEFAULT_JOB_ID;
  if (!valid_job_id(text)) {
    snprintf(err, err_len,
             "COMMWATCH_JOB_ID='%s' is invalid: expected 1 to 63 characters of [A-Za-z0-9._-]"
             " (default %s)", text, CW_DEFAULT_JOB_ID);
    return -1;
  }
  strcpy(s->job_id, text);

  if (load_pow2("COMMWATCH_RING_CAPACITY", CW_DEFAULT_RING_CAPACITY, CW_MIN_RING_CAPACITY,
                CW_MAX_RING_CAPACITY, &s->ring_capacity, err, err_len) != 0)
    return -1;
  if (load_pow2("COMMWATCH_MAX_INFLIGHT", CW_DEFAULT_MAX_INFLIGHT, CW_MIN_MAX_INFLIGHT,
                CW_MAX_MAX_INFLIGHT, &v, err, err_len) != 0)
    return -1;
  s->max_inflight = (uint32_t)v;

  s->gpu_timing = 1;
  text = getenv("COMMWATCH_GPU_TIMING");
  if (text != NULL && text[0] != '\0') {
    if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0) {
      snprintf(err, err_len, "COMMWATCH_GPU_TIMING='%s' is invalid: expected 0 or 1 (default 1)",
               text);
      return -1;
    }
    s->gpu_timing = text[0] == '1';
  }

  s->use_tsc = 1;
  text = getenv("COMMWATCH_CLOCK");
  if (text != NULL && text[0] != '\0') {
    if (strcmp(text, "auto") != 0 && strcmp(text, "realtime") != 0) {
      snprintf(err, err_len, "COMMWATCH_CLOCK='%s' is invalid: expected auto or realtime (default auto)",
               text);
      return -1;
    }
    s->use_tsc = strcmp(text, "auto") == 0;
  }

  if (load_range("COMMWATCH_COMPLETION_TIMEOUT_MS", CW_DEFAULT_TIMEOUT_MS, CW_MIN_TIMEOUT_MS,
                 CW_MAX_TIMEOUT_MS, &s->timeout_ms, err, err_len) != 0)
    return -1;
  if (load_range("COMMWATCH_CHANNEL_GRACE_MS", CW_DEFAULT_GRACE_MS, CW_MIN_GRACE_MS,
                 CW_MAX_GRACE_MS, &s->grace_ms, err, err_len) != 0)
    return -1;
  if (load_range("COMMWATCH_DEVICE_ENTRY_MS", CW_DEFAULT_DEVICE_ENTRY_MS, CW_MIN_DEVICE_ENTRY_MS,
                 CW_MAX_DEVICE_ENTRY_MS, &s->device_entry_ms, err, err_len) != 0)
    return -1;

  load_rank(s, warn, warn_len);
  return 0;
}
