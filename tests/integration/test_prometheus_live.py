"""A real Prometheus server scrapes a live `commwatch worker` (fed a simulated job that hangs)
and a live `commwatch agent`, loads the rule file, and answers every PromQL query of the
Grafana dashboards: each must return data for the job."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from debian_tools import require
from test_worker_live import send_job, start_worker, worker_env

from commwatch.embedded import free_port
from commwatch.kafka import Sender, ensure_topics
from commwatch.producers.simulate.spec import DEFAULT_START_NS
from commwatch.settings import Settings
from commwatch.streams.app import stream_topics

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "deploy" / "grafana").glob("*.json"))
RULES = ROOT / "deploy" / "prometheus" / "commwatch-rules.yaml"
JOB = "jprom"
HANG_RANK = 6


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every Prometheus panel target and variable of the dashboards."""
    out = []
    for path in DASHBOARDS:
        d = json.loads(path.read_text())
        for var in d["templating"]["list"]:
            if var["type"] == "query" and var["datasource"]["type"] == "prometheus":
                out.append((f"{path.name}: variable {var['name']}", var["definition"]))
        for panel in d["panels"] + [p for row in d["panels"] for p in row.get("panels", [])]:
            for t in panel.get("targets", []):
                if "expr" in t:
                    out.append((f"{path.name}: {panel['title']} {t['refId']}", t["expr"]))
    return out


def expand(expr: str) -> str:
    """What Grafana sends for the job, with a 1-minute rate window."""
    expr = expr.replace("$__rate_interval", "1m").replace("${job}", JOB).replace("$job", JOB)
    assert "$" not in expr, f"a variable the test does not know: {expr}"
    return expr


def start_agent(s: Settings, d: Path) -> tuple[subprocess.Popen, int]:
    log = d / "agent.log"
    (d / "rings").mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "commwatch.cli", "agent", "--ring-dir", str(d / "rings"),
                             "--job", "agent-idle", "--node", "node-a"], env=worker_env(s),
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = re.search(rb"metrics on http://[^:]+:(\d+)/metrics", log.read_bytes())
        if m:
            return proc, int(m.group(1))
        assert proc.poll() is None, log.read_text()
        time.sleep(0.1)
    raise AssertionError("agent printed no metrics address:\n" + log.read_text())


class Prometheus:
    def __init__(self, d: Path, targets: dict[str, int]):
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{
                "job_name": "commwatch",
                "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": {"component": comp, "node": "node-a"}}
                                   for comp, port in targets.items()],
            }],
        }
        (d / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = d / "prometheus.log"
        self.proc = subprocess.Popen(
            [require("prometheus"), f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2)
                return
            except OSError:
                time.sleep(0.3)
        raise AssertionError("prometheus not ready:\n" + self.log.read_text()[-3000:])

    def api(self, path: str, **params: str) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
        with urllib.request.urlopen(url, timeout=20) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def prometheus(broker, tmp_path_factory):
    require("prometheus")
    d = tmp_path_factory.mktemp("prom")
    s = Settings.load(env={}, kafka_bootstrap=broker.bootstrap, topic_prefix="p" + uuid.uuid4().hex[:8],
                      data_dir=str(d), kafka_partitions=2, metrics_port=0)
    ensure_topics(s, broker.bootstrap, stream_topics(s))
    worker, worker_port = start_worker(s, d / "worker.log")
    agent, agent_port = start_agent(s, d)
    prom = Prometheus(d, {"worker": worker_port, "agent": agent_port})
    try:
        sender = Sender(s, s.kafka_bootstrap)
        sender.send(s.topics.calls, f"{JOB}/00000000000000ab", b"\x00not a call batch")  # one dead letter
        assert sender.flush(10) == 0
        send_job(s, JOB, DEFAULT_START_NS, f"hang:rank={HANG_RANK},at=8s")
        yield prom
    finally:
        prom.stop()
        for proc in (agent, worker):
            proc.terminate()
            proc.wait(timeout=30)


def wait_for(what: str, fn, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while True:
        got = fn()
        if got:
            return got
        assert time.monotonic() < deadline, f"no {what} in {timeout_s} s"
        time.sleep(1.0)


def test_the_scraped_job_health_names_the_hang(prometheus):
    got = wait_for("open hang of the job in Prometheus", lambda: prometheus.query(
        f'commwatch_job_incidents_open{{job_name="{JOB}",kind="hang"}}'))
    assert got[0]["metric"]["severity"] == "P0" and got[0]["metric"]["component"] == "worker"
    state = prometheus.query(f'commwatch_job_state{{job_name="{JOB}"}} == 1')
    assert [r["metric"]["state"] for r in state] == ["hang"]
    # the hang's root is among the latest ranks only if it was late before it stopped; the wait is seen
    assert float(prometheus.query(f'commwatch_job_hang_wait_seconds{{job_name="{JOB}"}}')[0]["value"][1]) > 0
    labels = prometheus.api("labels", **{"match[]": "{__name__=~'commwatch_job_.*'}"})
    assert not {"rank", "node_name", "exported_job"} & set(labels), labels


@pytest.mark.parametrize("where,expr", dashboard_queries(), ids=[w for w, _ in dashboard_queries()])
def test_every_dashboard_query_returns_data_for_the_job(prometheus, where, expr):
    wait_for("open hang", lambda: prometheus.query(f'commwatch_job_incidents_open{{job_name="{JOB}"}}'))
    m = re.fullmatch(r"label_values\((\w+), *(\w+)\)", expr)
    if m:  # a variable: the label's values among the metric's series
        got = wait_for(f"values of {where}", lambda: prometheus.api(f"label/{m.group(2)}/values",
                                                                     **{"match[]": m.group(1)}), 60)
        assert JOB in got, got
        return
    result = wait_for(f"data for {where}: {expand(expr)}", lambda: prometheus.query(expand(expr)), 60)
    if "$job" in expr or "${job}" in expr:
        assert all(r["metric"].get("job_name", JOB) == JOB for r in result), result


def test_every_rule_evaluates_and_the_p0_alert_names_the_job(prometheus):
    def firing():
        return [a for a in prometheus.api("alerts")["alerts"]
                if a["labels"]["alertname"] == "CommwatchP0IncidentOpen" and a["state"] == "firing"]

    alerts = wait_for("firing CommwatchP0IncidentOpen", firing)
    assert [(a["labels"]["job_name"], a["labels"]["kind"]) for a in alerts] == [(JOB, "hang")]
    rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
    assert len(rules) == sum(len(g["rules"]) for g in yaml.safe_load(RULES.read_text())["groups"])
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
