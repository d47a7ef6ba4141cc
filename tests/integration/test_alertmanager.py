"""`commwatch notify` against a real Prometheus Alertmanager on loopback (Debian's
`prometheus-alertmanager`, installed by `.ci/install-test-tools`), behind basic auth,
configured by the example `deploy/alertmanager/commwatch.yml` with its receivers pointed at
a recording webhook and its timings shortened.

- an open P1 stays active in Alertmanager long after Alertmanager's resolve timeout, and
  is resolved (and the receiver told so) when the incident resolves;
- a job's P0 hang inhibits that job's P2, not another job's; two incidents of one job and
  kind arrive in one grouped notification;
- the auth header comes from the secret setting: without it Alertmanager refuses.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from commwatch import kafka, messages
from commwatch.embedded import free_port
from commwatch.sinks.notify.cli import serve
from commwatch.sinks.notify.delivery import Dispatcher
from commwatch.sinks.notify.destinations import from_settings

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "alertmanager" / "commwatch.yml"
USER, PASSWORD = "commwatch", "cw-test-secret"
# bcrypt of PASSWORD (Alertmanager's web config stores only the hash)
PASSWORD_HASH = "$2b$04$kQvz2fVcPIwi8/iX/HdtkeNzr.ZoQlLbEIpebRTBqwhu3vwNMXc62"
AUTH = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
RESOLVE_TIMEOUT_S = 2


def binary() -> str | None:
    return shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


class Receiver:
    """Alertmanager's webhook receiver: records each notification (its alerts' status)."""

    def __init__(self):
        self.notifications: list[dict] = []
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                rec.notifications.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def statuses(self, incident: str) -> list[str]:
        return [a["status"] for n in self.notifications for a in n["alerts"] if a["labels"]["incident"] == incident]


class Alertmanager:
    def __init__(self, tmp: Path, receiver: Receiver):
        config = yaml.safe_load(EXAMPLE.read_text())
        config["global"]["resolve_timeout"] = f"{RESOLVE_TIMEOUT_S}s"
        config["route"].update(group_wait="1s", group_interval="1s", repeat_interval="1h")
        for route in config["route"]["routes"]:
            route["repeat_interval"] = "1h"
        for r in config["receivers"]:
            for hook in r["webhook_configs"]:
                hook["url"] = receiver.url
        (tmp / "am.yml").write_text(yaml.safe_dump(config))
        (tmp / "web.yml").write_text(yaml.safe_dump({"basic_auth_users": {USER: PASSWORD_HASH}}))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / "alertmanager.log", "wb")
        self.proc = subprocess.Popen(
            [binary(), f"--config.file={tmp / 'am.yml'}", f"--web.config.file={tmp / 'web.yml'}",
             f"--storage.path={tmp / 'am-data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--cluster.listen-address=", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.get("/-/ready", raw=True) == 200:
                    break
            except OSError:
                pass
            assert self.proc.poll() is None, (tmp / "alertmanager.log").read_text()
            assert time.monotonic() < deadline, "Alertmanager did not get ready"
            time.sleep(0.2)

    def get(self, path: str, raw: bool = False):
        req = urllib.request.Request(self.url + path, headers={"Authorization": AUTH})
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status if raw else json.loads(r.read())

    def alerts(self) -> dict[str, dict]:
        """Alerts Alertmanager holds as not resolved, by incident."""
        return {a["labels"]["incident"]: a for a in self.get("/api/v2/alerts")}

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture
def am(tmp_path):
    if binary() is None:
        pytest.skip("no Alertmanager binary (Debian package prometheus-alertmanager; "
                    "`.ci/install-test-tools` installs it as root)")
    receiver = Receiver()
    manager = Alertmanager(tmp_path, receiver)
    yield manager, receiver
    manager.stop()
    receiver.server.shutdown()


def incident(n: int, job: str = "j1", kind: str = "hang", severity: str = "P0", status: str = "open") -> dict:
    now = time.time_ns()
    return {"v": 1, "job": job, "incident": f"{job}-{kind}-{n}", "kind": kind, "severity": severity,
            "status": status, "ts_ns": now, "opened_ns": now - 10**9, "culprit_ranks": [n],
            "culprit_nodes": ["node-0"], "comm": "", "summary": f"rank {n}: {kind}", "evidence": {}}


def publish(s, *events: dict) -> None:
    sender = kafka.Sender(s, s.kafka_bootstrap)
    for ev in events:
        sender.send(s.topics.alerts, ev["job"], messages.dumps(ev))
    assert sender.flush(10) == 0


def wait(cond, timeout_s: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Notifier:
    """`commwatch notify` in a thread, delivering to the Alertmanager under test."""

    def __init__(self, s):
        self.stop_event = threading.Event()
        self.dispatcher = Dispatcher(from_settings(s), attempts=2, backoff_s=0.1, timeout_s=3.0)
        group = "notify-" + s.topic_prefix
        self.thread = threading.Thread(target=serve, args=(s, self.stop_event, group, self.dispatcher))
        self.thread.start()

    def stop(self):
        self.stop_event.set()
        self.thread.join(30)


def settings_for(kafka_settings, manager, resend_s: float = 1.0):
    return kafka_settings.replace(notify_alertmanager_url=manager.url, notify_alertmanager_resend_s=resend_s,
                                  notify_alertmanager_headers=f"Authorization: {AUTH}", notify_group_s=0.2)


def test_an_open_p1_outlives_the_resolve_timeout_and_resolves_with_the_incident(kafka_settings, am):
    manager, receiver = am
    s = settings_for(kafka_settings, manager)
    notifier = Notifier(s)
    try:
        publish(s, incident(1, kind="slow_rank", severity="P1"))
        wait(lambda: "j1-slow_rank-1" in manager.alerts(), what="the P1 in Alertmanager")
        opened = time.monotonic()
        # several resolve timeouts and several re-send holds (3 s) later, still active
        time.sleep(4 * RESOLVE_TIMEOUT_S + 3)
        alert = manager.alerts().get("j1-slow_rank-1")
        assert alert is not None and alert["status"]["state"] == "active", alert
        assert receiver.statuses("j1-slow_rank-1")[:1] == ["firing"]
        assert "resolved" not in receiver.statuses("j1-slow_rank-1")
        publish(s, incident(1, kind="slow_rank", severity="P1", status="resolved"))
        wait(lambda: "j1-slow_rank-1" not in manager.alerts(), what="the P1 resolved in Alertmanager")
        wait(lambda: "resolved" in receiver.statuses("j1-slow_rank-1"), what="the receiver told it resolved")
        print(f"P1 active {time.monotonic() - opened:.1f} s with resolve_timeout {RESOLVE_TIMEOUT_S} s, "
              "resolved when the incident resolved")
    finally:
        notifier.stop()


def test_a_p0_hang_inhibits_its_jobs_p2_and_one_job_and_kind_is_one_notification(kafka_settings, am):
    manager, receiver = am
    s = settings_for(kafka_settings, manager)
    notifier = Notifier(s)
    try:
        publish(s, incident(1, job="ja", kind="hang", severity="P0"),
                incident(2, job="ja", kind="slow_rank", severity="P2"),
                incident(3, job="jb", kind="slow_rank", severity="P2"),
                incident(4, job="jc", kind="slow_rank", severity="P1"),
                incident(5, job="jc", kind="slow_rank", severity="P1"))
        alerts = wait(lambda: a if len(a := manager.alerts()) == 5 else None, what="five alerts")
        state = {k: (v["status"]["state"], v["status"]["inhibitedBy"]) for k, v in alerts.items()}
        assert state["ja-slow_rank-2"][0] == "suppressed" and state["ja-slow_rank-2"][1], state
        assert state["jb-slow_rank-3"] == ("active", []), state
        assert state["ja-hang-1"] == ("active", []), state
        grouped = wait(lambda: [n for n in receiver.notifications if n["groupLabels"].get("job") == "jc"],
                       what="the jc notification")
        assert sorted(a["labels"]["incident"] for a in grouped[0]["alerts"]) == ["jc-slow_rank-4", "jc-slow_rank-5"]
        # the inhibited P2 stays suppressed while the hang lasts (re-sends included)
        time.sleep(3)
        assert manager.alerts()["ja-slow_rank-2"]["status"]["state"] == "suppressed"
    finally:
        notifier.stop()


def test_without_the_auth_header_alertmanager_refuses(kafka_settings, am):
    manager, _receiver = am
    s = settings_for(kafka_settings, manager).replace(notify_alertmanager_headers="")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(manager.url + "/api/v2/alerts", timeout=5)
    assert err.value.code == 401
    notifier = Notifier(s)
    try:
        publish(s, incident(9, severity="P1", kind="slow_rank"))
        wait(lambda: notifier.dispatcher.couriers[0].stats.failed >= 1, what="a refused delivery")
        assert notifier.dispatcher.couriers[0].stats.sent == 0
        assert manager.alerts() == {}
    finally:
        notifier.stop()
