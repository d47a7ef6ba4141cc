"""The live page's state: bounded per job, newest snapshot wins, backlog is not 'live',
incidents merge by their latest event."""

from __future__ import annotations

from commwatch.sinks.page import state as st
from commwatch.sinks.page.state import LiveState, merge_incidents


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def snap(job: str, ts: int, values=(0.0, 1.0), bin_: int = 1, **extra) -> dict:
    return {"job": job, "ts_ns": ts, "state": "running", "ranks": len(values), "world_size": len(values),
            "nodes": ["n0"], "step": {"iteration": 3, "median_s": 0.5, "rate_per_s": 2.0, "slowdown": None},
            "lateness": {"bin": bin_, "values_ms": list(values)}, "incidents": [], **extra}


def event(job: str, iid: str, status: str, ts: int, opened: int = 1) -> dict:
    return {"v": 1, "job": job, "incident": iid, "kind": "hang", "severity": "P0", "status": status, "ts_ns": ts,
            "opened_ns": opened, "culprit_ranks": [5], "culprit_nodes": ["n1"], "summary": "", "evidence": {"x": 1}}


def test_columns_are_bounded_and_reset_when_the_bin_changes():
    s = LiveState()
    for t in range(st.MAX_COLUMNS + 50):
        s.feed_health(snap("j", t + 1, values=(float(t), None)))
    cols = s.lateness("j")["columns"]
    assert len(cols) == st.MAX_COLUMNS
    assert cols[-1] == {"ts_ns": st.MAX_COLUMNS + 50, "values_ms": [float(st.MAX_COLUMNS + 49), None]}
    assert [c["ts_ns"] for c in s.lateness("j", after_ns=st.MAX_COLUMNS + 48)["columns"]] == [
        st.MAX_COLUMNS + 49, st.MAX_COLUMNS + 50]
    s.feed_health(snap("j", 10_000, values=(1.0,), bin_=16))  # the job grew: bins of 16 ranks
    late = s.lateness("j")
    assert late["bin"] == 16 and len(late["columns"]) == 1


def test_an_older_snapshot_does_not_replace_a_newer_one():
    s = LiveState()
    s.feed_health(snap("j", 20, state="hang"))
    s.feed_health(snap("j", 10, state="running"))
    s.feed_health(snap("j", 20, state="hang"))  # read again after a reconnect: no second column
    assert s.job("j")["health"]["state"] == "hang"
    assert len(s.lateness("j")["columns"]) == 1


def test_backlog_is_shown_but_not_live_until_a_fresh_snapshot():
    clock = Clock()
    s = LiveState(monotonic=clock)
    s.feed_health(snap("j", 5), live=False)
    [j] = s.jobs()
    assert j["age_s"] is None and j["stale"] is True and j["rate_per_s"] == 2.0
    s.feed_health(snap("j", 6))
    clock.t += 2
    [j] = s.jobs()
    assert j["age_s"] == 2.0 and j["stale"] is False
    clock.t += st.STALE_S
    assert s.jobs()[0]["stale"] is True
    clock.t += st.FORGET_S
    s.forget_idle()
    assert s.jobs() == [] and s.job("j") is None


def test_garbage_is_refused_and_counted():
    s = LiveState()
    assert not s.feed_health(["not", "a", "snapshot"])
    assert not s.feed_health({"job": "", "ts_ns": 1})
    assert not s.feed_health({"job": "j", "ts_ns": "soon"})
    assert s.refused == 3 and s.jobs() == []
    assert s.feed_health(snap("j", 1, lateness=None))  # no heatmap column, still a snapshot
    assert s.lateness("j")["columns"] == []


def test_jobs_are_bounded():
    clock = Clock()
    s = LiveState(monotonic=clock)
    for n in range(st.MAX_JOBS + 5):
        clock.t += 1
        s.feed_health(snap(f"j{n}", 1))
    names = {j["job"] for j in s.jobs()}
    assert len(names) == st.MAX_JOBS and "j0" not in names and f"j{st.MAX_JOBS + 4}" in names


def test_incident_events_keep_the_latest_and_drop_evidence():
    s = LiveState()
    s.feed_incident(event("j", "a", "open", 10))
    s.feed_incident(event("j", "a", "resolved", 30))
    s.feed_incident(event("j", "a", "update", 20))  # late, older: ignored
    [inc] = s.job("j")["incidents"]
    assert inc["status"] == "resolved" and "evidence" not in inc and inc["culprit_ranks"] == [5]
    for n in range(st.MAX_INCIDENTS + 10):
        s.feed_incident(event("j", f"i{n}", "open", 100 + n))
    kept = {i["incident"] for i in s.job("j")["incidents"]}
    assert len(kept) == st.MAX_INCIDENTS and "a" not in kept  # resolved ones go first


def test_merge_prefers_the_latest_event_and_puts_open_ones_first():
    past = [dict(event("j", "a", "resolved", 50, opened=5)), dict(event("j", "b", "open", 40, opened=4))]
    live = [dict(event("j", "b", "resolved", 45, opened=4)), dict(event("j", "c", "open", 60, opened=6))]
    merged = merge_incidents(past, live)
    assert [(i["incident"], i["status"]) for i in merged] == [("c", "open"), ("a", "resolved"), ("b", "resolved")]
