"""Schema migrations, the named queries, docs/queries.md and `commwatch sql` on real chdb."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from commwatch import cli, messages, topics, wire
from commwatch.capture import Message
from commwatch.sinks.clickhouse.batch import SinkBatch
from commwatch.sinks.clickhouse.queries import NAMED
from commwatch.sinks.clickhouse.schema import TABLES, migrate
from commwatch.sinks.clickhouse.writer import ClickHouseWriter

pytestmark = pytest.mark.integration
DOCS = Path(__file__).resolve().parents[2] / "docs" / "queries.md"
COMM = 0x9F2C4D1E00A1B2C3
SLOW_RANK = 5


def incident(job, n, kind, status, culprits, ts_ns, opened_ns, severity="P0"):
    return {"v": 1, "job": job, "incident": f"{job}-{kind}-{n}", "kind": kind, "severity": severity,
            "status": status, "ts_ns": ts_ns, "opened_ns": opened_ns, "culprit_ranks": culprits,
            "culprit_nodes": [f"node-{r // 4}" for r in culprits], "comm": f"{COMM:016x}",
            "summary": f"{kind} on ranks {culprits}", "evidence": {"onset_ns": opened_ns - 3_000_000_000}}


def populate(client, settings, job="j42", skew_ns=None):
    """8 ranks, 40 AllReduces where rank 5 enters 4 ms late, one hang, one resolved slow rank."""
    migrate(client, settings)
    t0 = time.time_ns() - 60_000_000_000
    skew_ns = skew_ns or {r: (r // 4) * 20_000_000 for r in range(8)}  # node 1 clock 20 ms ahead
    batch = SinkBatch()
    for node in range(2):
        r = wire.empty(8 * 40 // 2)
        idx = np.arange(len(r))
        ranks = node * 4 + idx % 4
        seq = idx // 4
        r["kind"], r["op"], r["flags"] = wire.KIND_CALL, wire.OP_ALLREDUCE, wire.FLAG_COMPLETED
        r["rank"], r["comm"], r["seq"], r["bytes"] = ranks, COMM, seq, 1 << 20
        start = t0 + seq * 10_000_000 + np.where(ranks == SLOW_RANK, 4_000_000, 0)
        end = t0 + seq * 10_000_000 + 6_000_000
        shift = np.array([skew_ns[int(x)] for x in ranks])
        r["t_start_ns"], r["t_end_ns"] = start + shift, end + shift
        batch.add(Message(topics.CALLS, topics.comm_key(job, COMM), 0, wire.encode_batch(r)))
    events = [incident(job, 1, "hang", "open", [3], t0 + 30e9, t0 + 30e9),
              incident(job, 2, "slow_rank", "open", [SLOW_RANK], t0 + 10e9, t0 + 10e9, "P2"),
              incident(job, 2, "slow_rank", "resolved", [SLOW_RANK], t0 + 50e9, t0 + 10e9, "P2")]
    for e in events:
        e["ts_ns"], e["opened_ns"] = int(e["ts_ns"]), int(e["opened_ns"])
        batch.add(Message(topics.ALERTS, job, 0, messages.dumps(e)))
    for rank in range(8):
        batch.add(Message(topics.TOPOLOGY, job, 0, messages.dumps({
            "v": 1, "job": job, "ts_ns": t0, "rank": rank, "world_size": 8, "node": f"node-{rank // 4}",
            "local_rank": rank % 4, "coords": {"tp": rank % 4, "dp": rank // 4}})))
        for it in range(3):
            batch.add(Message(topics.STEPS, job, 0, messages.dumps({
                "v": 1, "job": job, "rank": rank, "iteration": it, "t_start_ns": t0 + it * 10**9,
                "t_end_ns": t0 + it * 10**9 + (500 + 100 * (rank == SLOW_RANK)) * 10**6})))
    batch.add(Message(topics.HW, job, 0, messages.dumps({
        "v": 1, "job": job, "node": "node-1", "ts_ns": t0, "rank": SLOW_RANK, "gpu": "GPU-x",
        "sm_clock_mhz": 900, "throttle_reasons": 8})))
    batch.add(Message(topics.WINDOWS, job, 0, json.dumps({
        "v": 2, "job": job, "comm": f"{COMM:016x}", "window_end_ns": t0 + 20 * 10**9, "instances": 64,
        "ranks": [SLOW_RANK - 1, SLOW_RANK], "mean_lag_ms": [0.1, 4.0], "last_share": [0.0, 1.0],
        "clock_offset_ms": [0.0, 20.0], "inside": [0.3, 0.1]}).encode()))
    batch.note("x", 0, 0)
    batch.flush(ClickHouseWriter(client, settings.clickhouse_database))
    client.database = settings.clickhouse_database
    return t0


def test_migrate_is_idempotent_and_incidents_follow_the_contract(ch_client, ch_settings):
    assert migrate(ch_client, ch_settings) == [1, 2]
    assert migrate(ch_client, ch_settings) == []
    db = ch_settings.clickhouse_database
    tables = {r[0] for r in ch_client.query(f"SHOW TABLES FROM {db}").result_rows}
    assert set(TABLES) <= tables
    cols = dict(ch_client.query(f"SELECT name, type FROM system.columns WHERE database = '{db}' "
                                "AND table = 'incidents'").result_rows)
    for name in ("v", "job", "incident", "kind", "severity", "status", "ts_ns", "opened_ns", "comm",
                 "summary", "evidence"):
        assert name in cols
    assert cols["opened_at"] == "DateTime64(3, 'UTC')" and cols["updated_at"] == "DateTime64(3, 'UTC')"
    assert cols["culprit_ranks"] == "Array(Int32)" and "String" in cols["culprit_nodes"]
    engine = ch_client.query(f"SELECT engine_full FROM system.tables WHERE database = '{db}' "
                             "AND name = 'calls'").result_rows[0][0]
    assert "TTL" in engine and "14" in engine and "toDate(start)" in engine


def test_named_queries_answer_the_common_questions(ch_client, ch_settings):
    populate(ch_client, ch_settings)
    q = lambda name, **p: ch_client.query(NAMED[name].sql, parameters=p).result_rows  # noqa: E731
    incs = q("incidents", job="j42")
    assert [(r[0], r[3]) for r in incs] == [("j42-slow_rank-2", "resolved"), ("j42-hang-1", "open")]
    assert q("culprit-nodes", days=1)[0][:2] == ("node-0", 1) or {r[0] for r in q("culprit-nodes", days=1)} == {
        "node-0", "node-1"}
    assert {r[1] for r in q("culprit-ranks", days=1)} == {3, SLOW_RANK}
    mttd = {r[0]: r for r in q("mttd", days=1)}
    assert mttd["hang"][3] == pytest.approx(3.0)
    slow = q("slowest-ranks", job="j42")
    assert slow[0][0] == SLOW_RANK and slow[0][2] == pytest.approx(4.0, abs=0.01)
    offsets = dict((r[0], r[2]) for r in q("clock-offsets", job="j42"))
    assert offsets[6] - offsets[1] == pytest.approx(20.0, abs=0.01)
    assert q("steps", job="j42")[0][0] == SLOW_RANK
    assert q("hw-faults", job="j42")[0][0] == "node-1"
    assert ("j42-hang-1", "hang", 3, "node-0") == q("culprit-placement", job="j42")[0][:4]
    assert q("window-lag", job="j42")[0][1] == SLOW_RANK
    assert [r[1] for r in q("open")] == ["j42-hang-1"]


def doc_queries() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", DOCS.read_text(), re.S)


def test_every_documented_query_runs_and_matches_the_named_ones(ch_client, ch_settings):
    populate(ch_client, ch_settings)
    blocks = doc_queries()
    assert len(blocks) >= 10
    assert {q.sql.strip() for q in NAMED.values()} <= {b.strip() for b in blocks}
    for sql in blocks:
        params = {k: v for k, v in (("job", "j42"), ("days", 7)) if "{" + k + ":" in sql}
        rows = ch_client.query(sql, parameters=params).result_rows
        assert rows, sql


def test_sql_and_incidents_commands_print_tables(ch_client, ch_settings, capsys):
    populate(ch_client, ch_settings)
    base = ["--clickhouse-dsn", ch_settings.clickhouse_dsn, "--set",
            f"clickhouse_database={ch_settings.clickhouse_database}"]
    assert cli.main(base + ["sql", "SELECT job, count() AS n FROM incidents FINAL GROUP BY job",
                            "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"job": "j42", "n": 2}
    assert cli.main(base + ["sql", "SELECT 1 AS a, 'x' AS b", "--format", "tsv"]) == 0
    assert capsys.readouterr().out == "a\tb\n1\tx\n"
    assert cli.main(base + ["incidents", "--job", "j42"]) == 0
    out = capsys.readouterr().out
    assert "j42-hang-1" in out and "[3]" in out and "(2 rows)" in out
    assert cli.main(base + ["sql", "SELECT nonsense FROM nowhere"]) == 1
    assert cli.main(base + ["query", "slowest-ranks"]) == 2
