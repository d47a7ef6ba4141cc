"""Secrets never leak: `commwatch worker`, `sink` and `notify` run with secret settings at
log level DEBUG, do real work (a hang is detected, incidents are stored, a delivery to an
unreachable Slack URL and webhook fails and is retried), and neither their output nor their metrics
pages hold any secret. `commwatch config` masks them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from test_worker_live import is_hang_of, send_job, wait_for

from commwatch import topics
from commwatch.embedded import free_port
from commwatch.kafka import ensure_topics
from commwatch.producers.simulate.spec import DEFAULT_START_NS
from commwatch.settings import Settings
from commwatch.streams.app import stream_topics

pytestmark = pytest.mark.integration

TOKEN = "xoxb-" + uuid.uuid4().hex  # a Slack-like token, inside the webhook URL's path
SECRETS = {
    "COMMWATCH_CLICKHOUSE_PASSWORD": "chpw-" + uuid.uuid4().hex,
    "COMMWATCH_KAFKA_SSL_KEY_PASSWORD": "sslpw-" + uuid.uuid4().hex,  # ignored under PLAINTEXT
    "COMMWATCH_NOTIFY_SLACK_URL": f"http://127.0.0.1:{free_port()}/services/T0/B0/{TOKEN}",
    "COMMWATCH_NOTIFY_WEBHOOK_URL": f"http://user:hookpw-{uuid.uuid4().hex}@127.0.0.1:{free_port()}/hook",
}


def needles() -> list[str]:
    """Every secret value, and the distinctive secret part of each URL."""
    out = list(SECRETS.values()) + [TOKEN]
    out += [re.search(r"hookpw-[0-9a-f]+", SECRETS["COMMWATCH_NOTIFY_WEBHOOK_URL"]).group(0)]
    return out


def env_for(s: Settings, data_dir) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_")}
    env.update(SECRETS)
    env.update({"COMMWATCH_KAFKA_BOOTSTRAP": s.kafka_bootstrap, "COMMWATCH_TOPIC_PREFIX": s.topic_prefix,
                "COMMWATCH_DATA_DIR": str(data_dir), "COMMWATCH_KAFKA_PARTITIONS": str(s.kafka_partitions),
                "COMMWATCH_METRICS_PORT": "0", "COMMWATCH_LOG_LEVEL": "DEBUG",
                "COMMWATCH_CLICKHOUSE_DSN": f"chdb://{data_dir}/chdb", "COMMWATCH_NOTIFY_GROUP_S": "0"})
    return env


def start(command: str, env: dict[str, str], log) -> tuple[subprocess.Popen, int]:
    out = open(log, "ab")
    proc = subprocess.Popen([sys.executable, "-m", "commwatch.cli", command], env=env, stdout=out,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = re.search(rb"metrics on http://[^:]+:(\d+)/metrics", log.read_bytes())
        if m:
            return proc, int(m.group(1))
        assert proc.poll() is None, log.read_text()
        time.sleep(0.1)
    raise AssertionError(f"{command} printed no metrics address:\n{log.read_text()}")


def test_config_masks_every_secret():
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_")}
    env.update(SECRETS)
    out = subprocess.run([sys.executable, "-m", "commwatch.cli", "--log-level", "DEBUG", "config"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    for key in SECRETS:
        assert re.search(rf"^{key}=\S", text, re.M), f"{key} not listed:\n{text}"
    for secret in needles():
        assert secret not in text
    assert secret_free(repr(Settings.load(env=SECRETS)))


def secret_free(text: str) -> bool:
    return not any(s in text for s in needles())


def test_worker_sink_and_notify_never_log_or_serve_secrets(broker, tmp_path):
    s = Settings.load(env={}, kafka_bootstrap=broker.bootstrap, topic_prefix="sec" + uuid.uuid4().hex[:8],
                      data_dir=str(tmp_path), kafka_partitions=2)
    ensure_topics(s, broker.bootstrap, stream_topics(s))
    procs = {}
    try:
        for name in ("worker", "sink", "notify"):
            d = tmp_path / name
            d.mkdir()
            procs[name] = start(name, env_for(s, d), tmp_path / f"{name}.log")
        send_job(s, "jsec", DEFAULT_START_NS, "hang:rank=4,at=8s")
        wait_for(s, topics.ALERTS, is_hang_of("jsec", 4), timeout_s=60)
        # the notifier tried both destinations (nothing listens there): failed attempts counted
        deadline = time.monotonic() + 40
        while True:
            pages = {name: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
                     for name, (_proc, port) in procs.items()}
            tried = re.findall(r'^commwatch_notify_(?:retries|failed)_total\{destination="(\w+)"\} [1-9]',
                               pages["notify"], re.M)
            if {"slack", "webhook"} <= set(tried) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        for proc, _port in procs.values():
            proc.terminate()
        for proc, _port in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in procs}
    assert "DEBUG" in logs["worker"], "the worker did not log at DEBUG: the test would prove nothing"
    assert {"slack", "webhook"} <= set(tried), "the notifier never tried to deliver:\n" + pages["notify"]
    for name, text in {**logs, **{f"{n} metrics": p for n, p in pages.items()}}.items():
        leaked = [sec for sec in needles() if sec in text]
        assert not leaked, f"{name} shows secrets {leaked}"
