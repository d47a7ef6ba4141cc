"""The alert ledger (no repeats after a restart), the demo's health view, and window
reports on their way to the sink (one message per window, a row per rank)."""

from __future__ import annotations

import json

import pytest

from commwatch import messages, topics
from commwatch.wire import WireError
from commwatch.streams.health_view import HealthView
from commwatch.streams.ledger import AlertLedger


def event(iid: str, status: str, **extra) -> dict:
    return {"v": 1, "job": "j", "incident": iid, "kind": "hang", "severity": "P0", "status": status,
            "ts_ns": 1, "opened_ns": 1, "culprit_ranks": [5], "culprit_nodes": ["node-00"],
            "summary": "rank 5 never entered", "evidence": {}, **extra}


def test_ledger_drops_what_a_restarted_detector_repeats():
    before_restart = AlertLedger()
    published = [e for e in (event("a", "open"), event("b", "open"), event("b", "resolved"))
                 if before_restart.admit(e)]
    assert len(published) == 3
    after = AlertLedger()
    for e in published:  # what load() reads back from cw.alerts.v1
        after.note(e)
    assert after.open_count() == 1
    assert not after.admit(event("a", "open"))  # re-detected, still open: not repeated
    assert after.admit(event("a", "update"))  # a change is news
    assert not after.admit(event("b", "resolved"))
    assert after.admit(event("a", "resolved"))  # the resolution is not lost
    assert after.admit(event("c", "open"))
    assert after.suppressed == 2


def test_view_shows_progress_and_open_incidents_with_culprits():
    v = HealthView("j", {"00000000000000aa": "dp0", "00000000000000bb": "dp1"})
    v.feed(topics.TOPOLOGY, {"job": "j", "ts_ns": 0, "rank": 5, "world_size": 8, "node": "node-00"})
    v.feed(topics.PROGRESS, {"job": "other", "comm": "00000000000000aa", "ts_ns": 1, "ranks": []})
    for comm, done in (("00000000000000aa", (10, 12)), ("00000000000000bb", (11, 11))):
        v.feed(topics.PROGRESS, {"job": "j", "node": "node-00", "ts_ns": 2_000_000_000, "comm": comm,
                                 "ranks": [{"rank": r, "started": d, "completed": d} for r, d in zip((5, 6), done)]})
    assert v.feed(topics.ALERTS, event("a", "open"))
    assert not v.feed(topics.ALERTS, event("a", "open"))
    text = v.render()
    assert "ranks 2/8" in text and "t=   2.0 s" in text
    assert "dp  2 group(s)  completed seq 10..11  (slowest dp0 at 10)" in text
    assert "open incidents: 1" in text and "culprit ranks 5 nodes node-00" in text
    assert v.feed(topics.ALERTS, event("a", "resolved"))
    assert "open incidents: 0" in v.render()


def test_a_window_report_is_one_message_the_sink_turns_into_a_row_per_rank(settings):
    from commwatch.decode import decode_message
    from commwatch.producers.simulate import JobSpec, simulate
    from commwatch.sinks.clickhouse.rows import decode_window
    from commwatch.streams.detect import CommStage
    from commwatch.streams.window_message import window_message

    stage = CommStage(settings)
    reports, ticked = [], 0
    for m in simulate(JobSpec(job="j", tp=2, dp=2, duration_s=3, step_s=0.5)).messages():
        if m.topic in (topics.CALLS, topics.PROGRESS):
            reports += stage.feed(m, decode_message(m), m.ts_ns)
        if m.ts_ns - ticked >= 500_000_000:
            ticked = m.ts_ns
            reports += stage.tick(lambda job, t=m.ts_ns: t)
    windows = [r for r in reports if r["type"] == "window" and "inside" in r]
    assert windows, sorted({r["type"] for r in reports})
    w = windows[0]
    rows = decode_window(messages.dumps(window_message(w)), "j")
    assert [r["rank"] for r in rows] == w["ranks"] and len(rows) >= 2
    for i, row in enumerate(rows):
        assert row["window_end_ns"] == w["ts_ns"] and row["instances"] == w["instances"]
        assert (row["mean_lag_ms"], row["clock_offset_ms"], row["inside"]) == (w["lag_ms"][i], w["offset_ms"][i],
                                                                            w["inside"][i])
    assert window_message({"type": "wait", "job": "j", "ts_ns": 1}) is None


@pytest.mark.parametrize("change, reason", [
    ({"v": 1}, "bad_version"),
    ({"ranks": [1, "2"]}, "bad_field"),
    ({"mean_lag_ms": [0.5]}, "bad_field"),  # one value for two ranks
    ({"last_share": [0.5, "0.5"]}, "bad_field"),
    ({"clock_offset_ms": [0.5, True]}, "bad_field"),
    ({"job": "other"}, "job_mismatch"),
    ({"window_end_ns": -1}, "bad_time"),
])
def test_a_malformed_window_message_is_refused_naming_its_fault(change, reason):
    from commwatch.sinks.clickhouse.rows import decode_window

    good = {"v": 2, "job": "j", "comm": "00000000000000aa", "window_end_ns": 9, "instances": 4, "ranks": [1, 2],
            "mean_lag_ms": [0.1, 0.2], "last_share": [0.5, 0.5]}
    assert len(decode_window(json.dumps(good).encode(), "j")) == 2
    with pytest.raises(WireError) as err:
        decode_window(json.dumps({**good, **change}).encode(), "j")
    assert err.value.reason == reason
