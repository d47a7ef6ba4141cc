"""Routing of incident events to notifications: filters, state changes, grouping, P0 repeat."""

from __future__ import annotations

from commwatch.sinks.notify.destinations import alertmanager_payload, feishu_payload, slack_payload
from commwatch.sinks.notify.routing import Notification, Router


def inc(n=1, status="open", severity="P0", kind="hang", ranks=(3,), job="j1"):
    return {"v": 1, "job": job, "incident": f"{job}-{kind}-{n}", "kind": kind, "severity": severity,
            "status": status, "ts_ns": 2_000_000_000_000_000_000, "opened_ns": 1_999_999_990_000_000_000,
            "culprit_ranks": list(ranks), "culprit_nodes": ["node-0"], "comm": "00", "summary": "rank 3 hung",
            "evidence": {}}


def events(notes):
    return [(n.job, [(e["incident"], e["event"]) for e in n.events]) for n in notes]


def test_one_notification_per_state_change():
    r = Router(group_s=0.0, repeat_p0_s=1e9)
    assert r.offer(inc(), 0.0)
    assert not r.offer(inc(status="update"), 0.1)  # nothing changed
    assert r.offer(inc(status="update", ranks=(3, 4)), 0.2)  # culprits changed
    assert events(r.due(0.2)) == [("j1", [("j1-hang-1", "update")])]
    assert r.offer(inc(status="resolved", ranks=(3, 4)), 0.3)
    assert not r.offer(inc(status="resolved", ranks=(3, 4)), 0.4)  # redelivered
    assert events(r.due(0.5)) == [("j1", [("j1-hang-1", "resolved")])]


def test_filters_by_severity_and_kind():
    r = Router(min_severity="P1", kinds=("hang", "slow_rank"), group_s=0.0)
    assert not r.offer(inc(severity="P2"), 0.0)
    assert not r.offer(inc(kind="node_lost"), 0.0)
    assert r.offer(inc(severity="P1", kind="slow_rank"), 0.0)
    assert r.dropped == 2


def test_storm_of_a_job_is_grouped_in_its_window():
    r = Router(group_s=5.0, repeat_p0_s=1e9)
    for i in range(20):
        r.offer(inc(n=i), i * 0.1)
    r.offer(inc(n=1, job="j2"), 1.0)
    assert r.due(4.9) == []
    notes = r.due(5.0)
    assert [(n.job, len(n.events)) for n in notes] == [("j1", 20)]
    assert [(n.job, len(n.events)) for n in r.due(6.0)] == [("j2", 1)]


def test_open_p0_repeats_until_resolved():
    r = Router(group_s=0.0, repeat_p0_s=60.0)
    r.offer(inc(), 0.0)
    r.offer(inc(n=2, severity="P1"), 0.0)
    r.due(0.0)
    assert r.due(59.0) == []
    assert events(r.due(60.0)) == [("j1", [("j1-hang-1", "repeat")])]
    assert r.due(100.0) == []
    r.offer(inc(status="resolved"), 110.0)
    assert events(r.due(200.0)) == [("j1", [("j1-hang-1", "resolved")])]
    assert r.due(1000.0) == []


def test_payload_shapes():
    n = Notification("j1", [dict(inc(), event="open"), dict(inc(n=2, status="resolved"), event="resolved")])
    assert set(slack_payload(n)) == {"text"} and "rank 3 hung" in slack_payload(n)["text"]
    f = feishu_payload(n)
    assert f["msg_type"] == "text" and "culprit ranks 3" in f["content"]["text"]
    a = alertmanager_payload(n)
    assert a[0]["labels"] == {"alertname": "commwatch_hang", "severity": "P0", "job": "j1", "kind": "hang",
                              "incident": "j1-hang-1"}
    assert a[0]["startsAt"].endswith("Z") and "endsAt" not in a[0]
    assert a[1]["endsAt"] == "2033-05-18T03:33:20.000Z"
