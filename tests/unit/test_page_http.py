"""The live page's HTTP server and JSON API, fed with the detector's own health snapshots of a
simulated job with a hang (the real detector core, in-process; no Kafka, no history)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.sinks.page.server import PageServer
from commwatch.streams.detect import Detector

S = 1_000_000_000
HANG_RANK = 5


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    """One health snapshot per second of event time of an 8-rank job whose rank 5 hangs at 4 s."""
    from commwatch.settings import Settings

    settings = Settings.load(env={}, data_dir=str(tmp_path_factory.mktemp("d")))
    sim = simulate(JobSpec(job="j a#1", tp=2, pp=2, dp=2, duration_s=12, step_s=0.5),
                   [parse_fault(f"hang:rank={HANG_RANK},at=4s")])
    det = Detector(settings)
    out, next_at = [], None
    for msg in sim.messages():
        det.feed(msg)
        det.tick(msg.ts_ns)
        next_at = next_at or msg.ts_ns
        if msg.ts_ns >= next_at:
            out.append(det.health("j a#1"))
            next_at += S
    last = out[-1]["ts_ns"]
    for k in range(1, 8):  # the job is silent now; time goes on
        det.tick(last + k * S)
        out.append(det.health("j a#1"))
    return out


@pytest.fixture
def page(settings, snapshots):
    srv = PageServer(settings.replace(page_port=0), live=False, history=False).start()
    for snap in snapshots:
        srv.state.feed_health(snap)
    yield srv
    srv.stop()


def get(srv: PageServer, path: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(srv.url.rstrip("/") + path, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def test_jobs_list_names_the_job_its_state_and_the_hang(page):
    status, ctype, body = get(page, "/api/jobs")
    assert status == 200 and ctype == "application/json"
    [job] = json.loads(body)
    assert job["job"] == "j a#1" and job["state"] == "hang" and job["ranks"] == 8
    assert job["rate_per_s"] and job["rate_per_s"] > 0
    hangs = [i for i in job["open_incidents"] if i["kind"] == "hang"]
    assert [i["culprit_ranks"] for i in hangs] == [[HANG_RANK]]
    assert job["stale"] is False and job["age_s"] is not None


def test_job_detail_has_health_incidents_and_the_wait_chain(page):
    status, _, body = get(page, "/api/jobs/j%20a%231")  # a job id is one percent-encoded segment
    assert status == 200
    d = json.loads(body)
    assert d["job"] == "j a#1" and d["health"]["wait_chain"]["roots"] == [HANG_RANK]
    assert any(e[1] == HANG_RANK for e in d["health"]["wait_chain"]["edges"])
    assert [i["culprit_ranks"] for i in d["incidents"] if i["kind"] == "hang"] == [[HANG_RANK]]
    assert d["history"] == {"available": False, "error": "not configured"}


def test_lateness_columns_come_incrementally(page, snapshots):
    d = json.loads(get(page, "/api/jobs/j%20a%231/lateness")[2])
    with_values = [s for s in snapshots if s["lateness"]["values_ms"]]
    assert len(d["columns"]) == len(with_values) > 5
    assert len(d["columns"][-1]["values_ms"]) == 8
    after = d["columns"][-3]["ts_ns"]
    assert len(json.loads(get(page, f"/api/jobs/j%20a%231/lateness?after={after}")[2])["columns"]) == 2
    assert get(page, "/api/jobs/j%20a%231/lateness?after=soon")[0] == 400


def test_unknown_paths_and_jobs_are_404(page):
    assert get(page, "/api/jobs/nope")[0] == 404
    assert get(page, "/api/jobs/nope/lateness")[0] == 404
    assert get(page, "/static/../server.py")[0] == 404
    assert get(page, "/etc/passwd")[0] == 404


def test_pages_and_static_files_are_served_plain(page):
    status, ctype, body = get(page, "/")
    assert status == 200 and ctype.startswith("text/html") and b'id="jobs"' in body
    for name in ("common.js", "index.js", "job.js", "heatmap.js", "page.css"):
        status, ctype, body = get(page, f"/static/{name}")
        assert status == 200 and body
        assert b"http://" not in body and b"https://" not in body  # nothing from a CDN
    status, _, body = get(page, "/jobs/j%20a%231")
    assert status == 200 and b'<span id="job-id" class="mono">j a#1</span>' in body


def test_a_job_id_is_escaped_in_the_page(page):
    _, _, body = get(page, "/jobs/%3Cscript%3Ealert(1)%3C%2Fscript%3E")
    assert b"<script>alert" not in body and b"&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_status_says_what_is_missing(page):
    d = json.loads(get(page, "/api/status")[2])
    assert d["live"]["connected"] is False and d["history"]["available"] is False and d["jobs"] == 1
