"""The live page's history: incidents of a job from a real (embedded) ClickHouse, merged with
what the stream says; and a page that goes on when ClickHouse is unreachable."""

from __future__ import annotations

import json
import urllib.request

import pytest
from test_clickhouse_queries import populate

from commwatch.embedded import free_port
from commwatch.sinks.page.history import History
from commwatch.sinks.page.server import Page
from commwatch.sinks.page.state import LiveState

pytestmark = pytest.mark.integration


def test_a_job_that_is_not_live_is_shown_from_the_history(ch_client, ch_settings):
    populate(ch_client, ch_settings, job="j42")
    page = Page(LiveState(), History(ch_settings))
    d = page.job("j42")
    assert d["health"] is None and d["stale"] is True
    assert d["history"] == {"available": True, "error": None}
    got = [(i["kind"], i["status"], i["culprit_ranks"], i["culprit_nodes"]) for i in d["incidents"]]
    assert got == [("hang", "open", [3], ["node-0"]), ("slow_rank", "resolved", [5], ["node-1"])]
    assert page.job("never-ran") is None


def test_the_stream_overrides_an_older_history_row(ch_client, ch_settings):
    populate(ch_client, ch_settings, job="j42")
    state = LiveState()
    page = Page(state, History(ch_settings))
    [hang] = [i for i in page.job("j42")["incidents"] if i["kind"] == "hang"]
    resolved = {**hang, "v": 1, "job": "j42", "status": "resolved", "ts_ns": hang["ts_ns"] + 10**9,
                "summary": "resolved", "evidence": {}}
    state.feed_incident(resolved)
    assert [i["status"] for i in page.job("j42")["incidents"]] == ["resolved", "resolved"]


def test_unreachable_history_is_said_and_the_live_state_still_served(settings):
    dead = settings.replace(clickhouse_dsn=f"http://127.0.0.1:{free_port()}")
    state = LiveState()
    state.feed_health({"job": "j1", "ts_ns": 5, "state": "running", "ranks": 4, "incidents": []})
    history = History(dead)
    page = Page(state, history)
    d = page.job("j1")
    assert d["health"]["state"] == "running" and d["incidents"] == []
    assert d["history"]["available"] is False and d["history"]["error"]
    assert history.failed_at is not None  # not asked again before RETRY_S


def test_history_over_http(ch_client, ch_settings):
    from commwatch.sinks.page.server import PageServer

    populate(ch_client, ch_settings, job="j42")
    srv = PageServer(ch_settings.replace(page_port=0), live=False).start()
    try:
        with urllib.request.urlopen(f"{srv.url}api/jobs/j42", timeout=20) as r:
            d = json.loads(r.read())
        assert [i["culprit_ranks"] for i in d["incidents"]] == [[3], [5]]
        with urllib.request.urlopen(f"{srv.url}api/status", timeout=20) as r:
            assert json.loads(r.read())["history"]["available"] is True
    finally:
        srv.stop()
