"""`commwatch trace` writes a valid Chrome trace-event file, aligned by clock offsets."""

from __future__ import annotations

import json

import pytest

from commwatch import cli

from test_clickhouse_queries import SLOW_RANK, populate

pytestmark = pytest.mark.integration


def test_trace_follows_the_trace_event_format(ch_client, ch_settings, tmp_path, capsys):
    t0 = populate(ch_client, ch_settings, job="jt")
    out = tmp_path / "trace.json"
    argv = ["--clickhouse-dsn", ch_settings.clickhouse_dsn, "--set",
            f"clickhouse_database={ch_settings.clickhouse_database}", "trace", "--job", "jt", "--out", str(out)]
    assert cli.main(argv) == 0
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    calls = [e for e in events if e["ph"] == "X"]
    assert len(calls) == 320
    for e in events:
        assert {"ph", "name", "pid", "tid"} <= set(e)
    for e in calls:
        assert isinstance(e["ts"], float | int) and isinstance(e["dur"], float | int)
        assert abs(e["ts"] - t0 / 1000) < 120e6  # microseconds since the epoch, not ns
        assert e["dur"] == pytest.approx(6000 - 4000 * (e["tid"] == SLOW_RANK), abs=1)
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert tracks == {r: f"rank {r}" for r in range(8)}
    # node 1's clock runs 20 ms ahead; after alignment a collective ends together on every rank
    ends = {}
    for e in calls:
        ends.setdefault(e["args"]["seq"], []).append(e["ts"] + e["dur"])
    assert max(max(v) - min(v) for v in ends.values()) < 1.0
    instants = [e for e in events if e["ph"] == "i"]
    assert {e["name"] for e in instants} == {"P0 hang", "P2 slow_rank", "resolved slow_rank"}
    assert all(e["s"] == "g" for e in instants)
    assert "320 calls on 8 ranks, 2 incidents" in capsys.readouterr().out
    argv_window = argv + ["--from", str(t0 + 100_000_000), "--to", str(t0 + 200_000_000)]
    assert cli.main(argv_window) == 0
    part = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]
    assert 8 * 8 <= len(part) <= 8 * 11
    assert all(t0 / 1000 + 60e3 <= e["ts"] <= t0 / 1000 + 230e3 for e in part)
