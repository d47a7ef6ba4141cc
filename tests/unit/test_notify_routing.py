"""Routing of incident events to notifications: filters, state changes, grouping, P0 repeat."""

from __future__ import annotations

import pytest

from commwatch.settings import Settings, SettingsError
from commwatch.sinks.notify.destinations import (_rfc3339, alertmanager_payload, feishu_payload, from_settings,
                                                 parse_headers, slack_payload)
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
    now = 2_000_000_000 * 10**9  # 2033-05-18T03:33:20Z
    a = alertmanager_payload(n, hold_s=180, now_ns=now)
    assert a[0]["labels"] == {"alertname": "commwatch_hang", "severity": "P0", "job": "j1", "kind": "hang",
                              "incident": "j1-hang-1"}
    assert a[0]["startsAt"].endswith("Z")
    assert a[0]["endsAt"] == "2033-05-18T03:36:20.000Z"  # open: held three re-send periods ahead
    # resolved: ends at its resolution, never later than now (an event clock ahead of the wall's)
    assert a[1]["endsAt"] == "2033-05-18T03:33:20.000Z"
    later = alertmanager_payload(n, hold_s=180, now_ns=now + 10**12)
    assert later[1]["endsAt"] == _rfc3339(n.events[1]["ts_ns"])


def test_refresh_resends_open_incidents_only_to_destinations_that_need_it():
    r = Router(group_s=0.0, repeat_p0_s=1e9, refresh_s=10.0)
    r.offer(inc(severity="P1"), 0.0)
    r.offer(inc(n=2, severity="P2"), 0.0)
    r.offer(inc(n=3), 0.0)
    r.offer(inc(n=3, status="resolved"), 1.0)
    first = r.due(1.0)
    assert [n.refresh for n in first] == [False, True]  # the group, then the first refresh
    assert r.due(5.0) == []
    again = r.due(11.0)
    assert len(again) == 1 and again[0].refresh
    assert sorted(e["incident"] for e in again[0].events) == ["j1-hang-1", "j1-hang-2"]  # not the resolved one
    assert {e["event"] for e in again[0].events} == {"refresh"}


def test_a_restarted_router_remembers_without_sending():
    r = Router(group_s=0.0)
    r.remember(inc(), 0.0)
    assert not r.offer(inc(), 1.0)  # the same state: already notified before the restart
    assert r.offer(inc(status="resolved"), 2.0)
    assert [e["event"] for n in r.due(2.0) for e in n.events] == ["resolved"]


def test_headers_are_parsed_and_a_bad_one_names_the_key_not_the_value():
    assert parse_headers("K", "Authorization: Bearer abc; X-Org: 7") == (("Authorization", "Bearer abc"),
                                                                        ("X-Org", "7"))
    with pytest.raises(SettingsError) as err:
        parse_headers("COMMWATCH_NOTIFY_WEBHOOK_HEADERS", "Bearer s3cret-token")
    assert "COMMWATCH_NOTIFY_WEBHOOK_HEADERS" in str(err.value) and "s3cret" not in str(err.value)
    s = Settings.load(env={"COMMWATCH_NOTIFY_ALERTMANAGER_URL": "http://am:9093",
                           "COMMWATCH_NOTIFY_ALERTMANAGER_HEADERS": "Authorization: Basic czNjcmV0"})
    assert "czNjcmV0" not in repr(s) and "czNjcmV0" not in repr(from_settings(s))
    assert from_settings(s)[0].headers == (("Authorization", "Basic czNjcmV0"),)
