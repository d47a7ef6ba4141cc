"""Prometheus metrics of the node agent (no per-rank labels: per-rank detail is in Kafka)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

RECORDS = Counter("commwatch_agent_records_total", "call records read from rings and published")
RECORDS_LOST = Counter("commwatch_agent_records_lost_total",
                       "records overwritten in a ring before the agent read them")
WRITER_DROPPED = Gauge("commwatch_agent_writer_dropped_records", "records the ring writers could not write")
BATCHES = Counter("commwatch_agent_batches_total", "cw.calls.v1 batches queued")
MESSAGES = Counter("commwatch_agent_messages_total", "messages queued for Kafka", ["topic"])
DROPPED = Counter("commwatch_agent_messages_dropped_total",
                  "messages dropped because the buffer was full (Kafka unreachable)")
BUFFER = Gauge("commwatch_agent_buffer_bytes", "bytes waiting in the agent's buffer")
RINGS = Gauge("commwatch_agent_rings", "rings being tailed")
RINGS_DEAD = Gauge("commwatch_agent_rings_dead", "rings whose writer is gone, being reported as exited")
RINGS_REMOVED = Counter("commwatch_agent_rings_removed_total", "files of gone writers removed by the agent")
RINGS_REFUSED = Counter("commwatch_agent_rings_refused_total",
                        "ring files refused (not owned by the agent, outside the ring dir, malformed)")
HW_SAMPLES = Counter("commwatch_agent_hw_samples_total", "hardware samples published")
HW_ERRORS = Counter("commwatch_agent_hw_errors_total", "hardware readings that failed")
HW_TIMEOUTS = Counter("commwatch_agent_nvml_timeouts_total", "NVML calls that did not return in time")
