"""Drill: `commwatch sink` killed with SIGKILL mid-stream and started again.

Property: every incident is in ClickHouse exactly once (`FINAL`), with its latest status.
The sink here runs in embedded mode (no DSN): it is the owner of the embedded ClickHouse
directory, so this is also the drill of that owner killed and restarted: the directory
opens again in the restarted process and nothing written before the kill is lost (the
sink and the query run as their own processes: the embedded database has one owner at a
time). It fails if offsets are committed before the rows are written (rows lost) or if
rows are not replaced by incident (duplicates)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from test_sink import incident_events, produce

from commwatch import messages, topics
from commwatch.embedded import free_port

pytestmark = pytest.mark.integration


def _rows(port: int) -> float:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return -1.0
    m = re.search(r'^commwatch_sink_rows_total\{table="incidents"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def _start(env: dict, port: int) -> subprocess.Popen:
    env = {**env, "COMMWATCH_METRICS_PORT": str(port)}
    return subprocess.Popen([sys.executable, "-m", "commwatch.cli", "sink"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait(pred, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return False


def test_sink_killed_mid_stream_loses_and_repeats_nothing(kafka_settings, tmp_path):
    s = kafka_settings
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_")}
    env.update(COMMWATCH_KAFKA_BOOTSTRAP=s.kafka_bootstrap, COMMWATCH_TOPIC_PREFIX=s.topic_prefix,
               COMMWATCH_DATA_DIR=str(tmp_path), COMMWATCH_SINK_FLUSH_ROWS="40", COMMWATCH_SINK_FLUSH_S="0.2",
               COMMWATCH_KAFKA_PARTITIONS="2")
    events = incident_events("jk", 300)
    half = len(events) // 2
    produce(s, [(topics.ALERTS, "jk", messages.dumps(e)) for e in events[:half]])

    port = free_port()
    first = _start(env, port)
    try:
        assert _wait(lambda: _rows(port) >= 80, 60), "the first sink never wrote"
    finally:
        first.send_signal(signal.SIGKILL)  # no flush, no commit, no goodbye
        first.wait(10)
    produce(s, [(topics.ALERTS, "jk", messages.dumps(e)) for e in events[half:]])

    port = free_port()
    second = _start(env, port)
    try:
        seen = {"rows": -1.0, "since": time.monotonic()}

        def settled() -> bool:  # rows stopped moving for 3 s after some were written
            rows = _rows(port)
            if rows != seen["rows"]:
                seen.update(rows=rows, since=time.monotonic())
            return rows > 0 and time.monotonic() - seen["since"] > 3

        assert _wait(settled, 90), "the restarted sink never settled"
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(20)

    query = ("SELECT count(), uniqExact(incident), countIf(status = 'resolved') "
             "FROM commwatch.incidents FINAL WHERE job = 'jk'")
    out = subprocess.run([sys.executable, "-m", "commwatch.cli", "sql", "--format", "json", query],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout)
    row = row[0] if isinstance(row, list) else row
    assert list(row.values()) == [300, 300, 300], row
