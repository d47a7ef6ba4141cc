"""Drill: `commwatch notify` killed with SIGKILL mid-stream and started again, delivering to
a real Alertmanager (see test_alertmanager.py).

Property: after the restart Alertmanager holds every open incident exactly once, active,
and none of the resolved ones; the open incidents notified before the kill stay active
past several re-send holds and resolve timeouts (the restarted notifier learned them from
what it had committed and keeps re-sending them), and the receiver is told of every
resolution, before or after the kill.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from test_alertmanager import AUTH, RESOLVE_TIMEOUT_S, Alertmanager, Receiver, binary, incident, publish, wait

pytestmark = pytest.mark.integration

RESEND_S = 1.0


def start(s, tmp_path, name: str, am_url: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_")}
    env.update(COMMWATCH_KAFKA_BOOTSTRAP=s.kafka_bootstrap, COMMWATCH_TOPIC_PREFIX=s.topic_prefix,
               COMMWATCH_DATA_DIR=str(tmp_path), COMMWATCH_NOTIFY_ALERTMANAGER_URL=am_url,
               COMMWATCH_NOTIFY_ALERTMANAGER_HEADERS=f"Authorization: {AUTH}",
               COMMWATCH_NOTIFY_ALERTMANAGER_RESEND_S=str(RESEND_S), COMMWATCH_NOTIFY_GROUP_S="0.2",
               COMMWATCH_METRICS_PORT="0", COMMWATCH_KAFKA_PARTITIONS="2")
    log = open(tmp_path / f"{name}.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "commwatch.cli", "notify"], env=env, stdout=log,
                            stderr=subprocess.STDOUT)


def test_notifier_killed_mid_stream_loses_and_repeats_nothing(kafka_settings, tmp_path):
    if binary() is None:
        pytest.skip("no Alertmanager binary (Debian package prometheus-alertmanager)")
    s = kafka_settings
    receiver = Receiver()
    manager = Alertmanager(tmp_path, receiver)
    first = second = None
    try:
        early = [incident(i, job=f"j{i % 4}", kind="slow_rank", severity="P1") for i in range(12)]
        publish(s, *early)
        first = start(s, tmp_path, "notify1", manager.url)
        wait(lambda: len(manager.alerts()) == 12, what="the first notifier's alerts")
        publish(s, *[dict(e, status="resolved", ts_ns=time.time_ns()) for e in early[:4]])
        wait(lambda: len(manager.alerts()) == 8, what="four resolutions")
        time.sleep(1.0)  # let it commit what it delivered
        late = [incident(i, job=f"j{i % 4}", kind="slow_rank", severity="P1") for i in range(12, 20)]
        publish(s, *late[:4])
        first.send_signal(signal.SIGKILL)  # mid-stream: no drain, no commit, no goodbye
        first.wait(10)
        publish(s, *late[4:], *[dict(e, status="resolved", ts_ns=time.time_ns()) for e in early[4:6] + late[:1]])
        second = start(s, tmp_path, "notify2", manager.url)
        want_open = {e["incident"] for e in early[6:] + late[1:]}
        resolved = {e["incident"] for e in early[:6] + late[:1]}
        wait(lambda: set(manager.alerts()) == want_open, timeout_s=60, what="the open incidents, exactly")
        # several holds (3 re-send periods) and resolve timeouts later, all still there and active
        time.sleep(max(4 * 3 * RESEND_S, 3 * RESOLVE_TIMEOUT_S))
        alerts = manager.alerts()
        assert set(alerts) == want_open
        assert all(a["status"]["state"] == "active" for a in alerts.values()), alerts
        told = {i for i in resolved if "resolved" in receiver.statuses(i)}
        wait(lambda: {i for i in resolved if "resolved" in receiver.statuses(i)} == resolved,
             what=f"every resolution told to the receiver (so far {sorted(told)})")
        assert second.poll() is None
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(20)
        manager.stop()
        receiver.server.shutdown()
