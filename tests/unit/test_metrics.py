"""Stream metrics: names follow the convention, incidents move the gauges, serving works."""

from __future__ import annotations

import re
import urllib.request

from commwatch.metrics import StreamMetrics, detection_delay_s, serve

NAME = re.compile(r"^commwatch_[a-z]+(_[a-z]+)+$")
FORBIDDEN_LABELS = {"rank", "node", "job", "gpu", "comm"}


def inc(iid: str, kind: str, status: str, severity: str = "P0", **extra) -> dict:
    return {"v": 1, "job": "j", "incident": iid, "kind": kind, "severity": severity, "status": status,
            "ts_ns": 10 * 10**9, "opened_ns": 10 * 10**9, "culprit_ranks": [3], "culprit_nodes": [],
            "summary": "", "evidence": {}, **extra}


def open_count(m: StreamMetrics, kind: str, severity: str) -> float | None:
    return m.registry.get_sample_value("commwatch_incidents_open", {"kind": kind, "severity": severity})


def test_every_name_follows_the_convention():
    m = StreamMetrics()
    families = list(m.registry.collect())
    assert len(families) >= 10
    for fam in families:
        assert NAME.match(fam.name), fam.name
        for sample in fam.samples:
            assert not FORBIDDEN_LABELS & set(sample.labels), (fam.name, sample.labels)
    m.messages.labels(topic="cw.calls.v1").inc()
    counters = [fam for fam in m.registry.collect() if fam.type == "counter"]
    assert counters
    for fam in counters:
        assert all(s.name.endswith(("_total", "_created")) for s in fam.samples), fam.name
    exposed = {s.name for fam in m.registry.collect() for s in fam.samples}
    assert "commwatch_stream_deadletter_total" not in exposed  # no sample before a reason is seen
    m.deadletter.labels(reason="bad_magic").inc()
    exposed = {s.name for fam in m.registry.collect() for s in fam.samples}
    assert "commwatch_stream_deadletter_total" in exposed


def test_open_incidents_follow_open_update_resolve():
    m = StreamMetrics()
    m.incident(inc("a", "hang", "open", evidence={"waited_s": 7.5}))
    m.incident(inc("b", "hang", "open"))
    assert open_count(m, "hang", "P0") == 2
    m.incident(inc("a", "hang", "update"))
    assert open_count(m, "hang", "P0") == 2
    m.incident(inc("a", "hang", "resolved"))
    assert open_count(m, "hang", "P0") == 1
    m.incident(inc("b", "hang", "update", severity="P1"))  # a severity change moves it
    assert open_count(m, "hang", "P0") == 0 and open_count(m, "hang", "P1") == 1
    assert m.registry.get_sample_value("commwatch_detection_delay_seconds_count", {"kind": "hang"}) == 1
    assert m.registry.get_sample_value("commwatch_detection_delay_seconds_sum", {"kind": "hang"}) == 7.5
    assert m.registry.get_sample_value("commwatch_stream_alerts_total", {"kind": "hang", "status": "open"}) == 2


def test_an_incident_found_open_already_counts_open_but_not_as_an_alert():
    """A worker that took over another's partitions (or restarted) finds a hang open already:
    it publishes nothing for it, yet carries it from now on (its updates, its resolution)."""
    m = StreamMetrics()
    m.incident(inc("a", "hang", "open", evidence={"waited_s": 7.5}), published=False)
    assert open_count(m, "hang", "P0") == 1
    assert m.registry.get_sample_value("commwatch_stream_alerts_total", {"kind": "hang", "status": "open"}) is None
    assert not m.registry.get_sample_value("commwatch_detection_delay_seconds_count", {"kind": "hang"})
    m.incident(inc("a", "hang", "resolved"))
    assert open_count(m, "hang", "P0") == 0


def test_detection_delay_prefers_the_onset():
    assert detection_delay_s({"opened_ns": 12 * 10**9, "evidence": {"onset_ns": 2 * 10**9, "waited_s": 1}}) == 10
    assert detection_delay_s({"opened_ns": 1, "evidence": {"silent_s": 3.0}}) == 3.0
    assert detection_delay_s({"opened_ns": 1, "evidence": {"waited_s": True}}) is None


def test_serve_on_a_free_loopback_port():
    m = StreamMetrics()
    m.messages.labels(topic="cw.calls.v1").inc(3)
    server, port = serve(m.registry, "127.0.0.1", 0)
    try:
        assert port > 0
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'commwatch_stream_messages_total{topic="cw.calls.v1"} 3.0' in body
    finally:
        server.shutdown()


def test_detector_drops_become_a_counter_by_reason():
    from commwatch.settings import Settings
    from commwatch.streams.detect import Detector

    m = StreamMetrics()
    m.count_drops({"records": 3})
    m.count_drops({"records": 3})
    m.count_drops({"records": 10, "other": 2})
    m.count_drops({"records": 4})  # state forgotten: the count starts again from there
    m.count_drops({"records": 6})
    get = m.registry.get_sample_value
    assert get("commwatch_stream_dropped_total", {"reason": "records"}) == 12
    assert get("commwatch_stream_dropped_total", {"reason": "other"}) == 2
    # the detector's own counts feed it
    m.count_drops(Detector(Settings.load(env={})).drops())
