"""The live page during a live run, in a real browser: a `commwatch worker` and `commwatch page`
on the embedded broker, a simulated job paced to the wall clock (`commwatch simulate
--realtime`) with a slow rank and then a hang; headless Chromium (Debian's `chromium`) loads
the job page and the list of jobs, and writes a screenshot."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from debian_tools import require
from test_worker_live import start_worker, worker_env

from commwatch.kafka import ensure_topics
from commwatch.settings import Settings
from commwatch.sinks.page.server import PageServer
from commwatch.streams.app import stream_topics

pytestmark = pytest.mark.integration
JOB = "jpage"
SLOW_RANK, HANG_RANK = 3, 11


def start_page(s: Settings, log: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "commwatch.cli", "page", "--port", "0"], env=worker_env(s),
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = re.search(rb"live page: (http://\S+)", log.read_bytes())
        if m:
            return proc, m.group(1).decode()
        assert proc.poll() is None, log.read_text()
        time.sleep(0.1)
    raise AssertionError("the page printed no address:\n" + log.read_text())


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def open_hang(detail: dict) -> dict | None:
    return next((i for i in detail["incidents"] if i["kind"] == "hang" and i["status"] != "resolved"), None)


@pytest.fixture(scope="module")
def live_page(broker, tmp_path_factory):
    d = tmp_path_factory.mktemp("page")
    s = Settings.load(env={}, kafka_bootstrap=broker.bootstrap, topic_prefix="g" + uuid.uuid4().hex[:8],
                      data_dir=str(d), kafka_partitions=2, metrics_port=0)
    ensure_topics(s, broker.bootstrap, stream_topics(s))
    procs = []
    try:
        worker, _ = start_worker(s, d / "worker.log")
        procs.append(worker)
        page, url = start_page(s, d / "page.log")
        procs.append(page)
        sim = subprocess.Popen(
            [sys.executable, "-m", "commwatch.cli", "simulate", "--kafka", "--realtime", "--job", JOB,
             "--ranks", "16", "--tp", "2", "--pp", "2", "--dp", "4", "--duration", "60", "--step-s", "0.5",
             "--fault", f"slow:rank={SLOW_RANK},factor=1.6,at=3s", "--fault", f"hang:rank={HANG_RANK},at=14s"],
            env=worker_env(s), stdout=open(d / "simulate.log", "ab"), stderr=subprocess.STDOUT)
        procs.append(sim)
        deadline = time.monotonic() + 150
        detail = None
        while time.monotonic() < deadline:
            try:
                detail = get_json(f"{url}api/jobs/{JOB}")
            except urllib.error.HTTPError:
                detail = None
            if detail and open_hang(detail) and detail["health"]["state"] == "hang":
                break
            assert all(p.poll() in (None, 0) for p in procs), (d / "page.log").read_text()
            time.sleep(0.5)
        else:
            raise AssertionError(f"no open hang on the page's API in 150 s: {detail}")
        yield s, url, d
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
            p.wait(timeout=30)


def chromium(url: str, out: Path, *extra: str) -> str:
    """Load `url` in headless Chromium, let its scripts run, return the DOM (or write a screenshot)."""
    argv = [require("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--hide-scrollbars", f"--user-data-dir={out / 'profile'}",
            "--window-size=1400,2000", "--virtual-time-budget=6000", *extra, url]
    got = subprocess.run(argv, capture_output=True, timeout=120, cwd=out)
    assert got.returncode == 0, got.stderr.decode(errors="replace")[-3000:]
    return got.stdout.decode()


def rendered(url: str, out: Path, ready, tries: int = 10) -> str:
    """The DOM once `ready(dom)` holds (the page fills itself in from the API)."""
    dom = ""
    for _ in range(tries):
        dom = chromium(url, out, "--dump-dom")
        if ready(dom):
            return dom
        time.sleep(1)
    raise AssertionError(f"{url} never rendered what was expected:\n{dom[-5000:]}")


def hang_row(dom: str) -> str | None:
    m = re.search(r'<tr data-incident="[^"]*" data-kind="hang" data-status="open">(.*?)</tr>', dom, re.S)
    return m.group(1) if m else None


def test_job_page_shows_the_job_the_hangs_culprit_and_the_heatmap(live_page, tmp_path):
    s, url, d = live_page
    dom = rendered(f"{url}jobs/{JOB}", tmp_path,
                   lambda dom: hang_row(dom) is not None and 'data-columns="0"' not in dom)
    assert f'<span id="job-id" class="mono">{JOB}</span>' in dom
    assert re.search(r'<span class="state hang" id="state">hang</span>', dom)
    culprits = re.search(r'class="culprits culprit-ranks">([^<]*)<', hang_row(dom)).group(1)
    assert culprits == str(HANG_RANK)
    # the wait-for chain ends at the culprit
    assert '<section id="wait-chain-section">' in dom  # no longer hidden
    assert f'data-root="{HANG_RANK}"' in dom
    # the heatmap: columns of 16 ranks drawn
    canvas = re.search(r'<canvas id="heatmap"[^>]*>', dom).group(0)
    assert int(re.search(r'data-columns="(\d+)"', canvas).group(1)) > 0
    assert re.search(r'data-bins="16"', canvas)
    # the communicators and the history's absence (no sink here) are said
    assert re.search(r'<tr data-comm="[0-9a-f]{16}"', dom)
    assert "History unavailable" in dom
    shot = tmp_path / "job-page.png"
    chromium(f"{url}jobs/{JOB}", tmp_path, f"--screenshot={shot}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"screenshot: {shot}")


def test_jobs_list_shows_the_job_and_its_hang(live_page, tmp_path):
    _s, url, _d = live_page
    dom = rendered(url, tmp_path, lambda dom: f'data-job="{JOB}"' in dom)
    row = re.search(rf'<tr class="[^"]*" data-job="{JOB}">(.*?)</tr>', dom, re.S).group(1)
    assert f'href="/jobs/{JOB}"' in row and ">hang" in row
    assert re.search(rf"hang · culprit ranks <span class=\"culprits\">{HANG_RANK}</span>", row)


def test_api_of_the_live_page(live_page):
    _s, url, _d = live_page
    [job] = [j for j in get_json(f"{url}api/jobs") if j["job"] == JOB]
    assert job["state"] == "hang" and job["ranks"] == 16 and not job["stale"]
    assert [i["culprit_ranks"] for i in job["open_incidents"] if i["kind"] == "hang"] == [[HANG_RANK]]
    detail = get_json(f"{url}api/jobs/{JOB}")
    assert open_hang(detail)["culprit_ranks"] == [HANG_RANK] and open_hang(detail)["culprit_nodes"]
    assert detail["health"]["wait_chain"]["roots"] == [HANG_RANK]
    status = get_json(f"{url}api/status")
    assert status["live"]["connected"] and status["live"]["messages"] > 0
    assert status["history"]["available"] is False and status["history"]["error"]


def test_a_page_started_later_shows_the_backlog_then_goes_live(live_page):
    s, _url, _d = live_page
    srv = PageServer(s.replace(page_port=0), history=False).start()
    try:
        assert srv.feed.ready.wait(30)
        deadline = time.monotonic() + 30
        while srv.state.job(JOB) is None or not srv.state.lateness(JOB)["columns"]:
            assert time.monotonic() < deadline, "the backlog did not arrive"
            time.sleep(0.2)
        columns = len(srv.state.lateness(JOB)["columns"])
        assert columns > 5  # minutes of heatmap at once, not one column
        while srv.state.job(JOB)["stale"]:  # until a snapshot written after it started
            assert time.monotonic() < deadline, "no live snapshot after the backlog"
            time.sleep(0.2)
        assert srv.state.job(JOB)["age_s"] is not None
    finally:
        srv.stop()


def test_an_unreachable_broker_is_said_and_the_page_still_answers(settings):
    from commwatch.embedded import free_port

    srv = PageServer(settings.replace(page_port=0, kafka_bootstrap=f"127.0.0.1:{free_port()}"), history=False).start()
    try:
        deadline = time.monotonic() + 60
        while srv.feed.error is None:
            assert time.monotonic() < deadline, "the feed never said the broker is away"
            time.sleep(0.5)
        status = get_json(f"{srv.url}api/status")
        assert status["live"]["connected"] is False and status["live"]["error"]
        assert get_json(f"{srv.url}api/jobs") == []
    finally:
        srv.stop()


def test_a_job_wide_pause_is_shown_on_the_job_page(settings, tmp_path):
    """How long a job-wide pause has lasted (health `step.paused_s`: every rank idle, nobody
    inside a call; the detector's side in `test_detect_hang`) is among the job's figures while
    it lasts, and absent otherwise."""
    from commwatch.streams.detect import health

    srv = PageServer(settings.replace(page_port=0), live=False, history=False).start()
    try:
        snap = {**health.empty("jp", time.time_ns()), "state": "running", "ranks": 8, "world_size": 8}
        snap["step"] = {**snap["step"], "iteration": 40, "median_s": 1.0, "paused_s": 23.4}
        srv.state.feed_health(snap)
        dom = rendered(f"{srv.url}jobs/jp", tmp_path, lambda dom: "<dt>iteration</dt>" in dom)
        assert "<dt>paused</dt><dd>23 s, no rank in a call</dd>" in dom
        srv.state.feed_health({**snap, "ts_ns": snap["ts_ns"] + 1, "step": {**snap["step"], "paused_s": None}})
        dom = rendered(f"{srv.url}jobs/jp", tmp_path, lambda dom: "<dt>iteration</dt>" in dom)
        assert "<dt>paused</dt>" not in dom
    finally:
        srv.stop()
