"""`commwatch bench sink`: rows/s into ClickHouse (embedded chdb by default).

Measures the sink's own path without Kafka: wire batches are decoded, buffered in a
`SinkBatch` and flushed through `ClickHouseWriter` into a scratch database that is
dropped afterwards. Raw calls go as Native blocks; incidents as row inserts.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

import numpy as np

from commwatch import messages, topics, wire
from commwatch.capture import Message
from commwatch.embedded import clickhouse_client
from commwatch.settings import Settings
from commwatch.sinks.clickhouse.batch import SinkBatch
from commwatch.sinks.clickhouse.schema import migrate
from commwatch.sinks.clickhouse.writer import ClickHouseWriter

RANKS_PER_MESSAGE = 8
CALLS_PER_MESSAGE = 512  # records per wire batch, as a node agent sends them


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", type=int, default=2_000_000, help="raw call rows to write (default: %(default)s)")
    p.add_argument("--batch", default="10000,100000", help="rows per flush, comma-separated (default: %(default)s)")
    p.add_argument("--incidents", type=int, default=50_000, help="incident rows (default: %(default)s)")
    p.add_argument("--json", action="store_true")


def call_messages(n_rows: int, job: str = "bench") -> list[Message]:
    out = []
    t0 = time.time_ns()
    comm = 0x9F2C4D1E00A1B2C3
    per = CALLS_PER_MESSAGE
    for i in range(0, n_rows, per):
        n = min(per, n_rows - i)
        r = wire.empty(n)
        idx = np.arange(i, i + n)
        r["kind"], r["op"], r["flags"] = wire.KIND_CALL, wire.OP_ALLREDUCE, wire.FLAG_COMPLETED
        r["rank"] = idx % RANKS_PER_MESSAGE
        r["comm"], r["seq"] = comm, idx // RANKS_PER_MESSAGE
        r["t_start_ns"] = t0 + (idx // RANKS_PER_MESSAGE) * 5_000_000 + r["rank"] * 1000
        r["t_end_ns"] = r["t_start_ns"] + 2_000_000
        r["bytes"] = 1 << 24
        out.append(Message(topics.CALLS, topics.comm_key(job, comm), 0, wire.encode_batch(r)))
    return out


def incident_messages(n: int) -> list[Message]:
    now = time.time_ns()
    return [Message(topics.ALERTS, "bench", 0, messages.dumps({
        "v": 1, "job": "bench", "incident": f"bench-slow_rank-{i}", "kind": "slow_rank", "severity": "P2",
        "status": "open", "ts_ns": now + i, "opened_ns": now + i, "culprit_ranks": [i % 1024],
        "culprit_nodes": [f"node-{i % 128:03d}"], "comm": "9f2c4d1e00a1b2c3", "summary": "rank slow",
        "evidence": {"lag_ms": 12.5}})) for i in range(n)]


def write(target: ClickHouseWriter, msgs: list[Message], batch_rows: int) -> tuple[int, float]:
    start = time.perf_counter()
    batch, rows = SinkBatch(), 0
    for off, m in enumerate(msgs):
        batch.note(m.topic, 0, off)
        batch.add(m)
        if batch.n_rows >= batch_rows:
            rows += batch.flush(target)
    rows += batch.flush(target) if batch.spans else 0
    return rows, time.perf_counter() - start


def run(args: argparse.Namespace, settings: Settings) -> int:
    db = "bench_" + uuid.uuid4().hex[:8]
    settings = settings.replace(clickhouse_database=db)
    client = clickhouse_client(settings)
    migrate(client, settings)
    target = ClickHouseWriter(client, db)
    results = []
    try:
        calls = call_messages(args.rows)
        for size in (int(s) for s in args.batch.split(",")):
            client.command(f"TRUNCATE TABLE {db}.calls")
            rows, secs = write(target, calls, size)
            results.append({"table": "calls", "batch_rows": size, "rows": rows, "seconds": round(secs, 3),
                            "rows_per_s": round(rows / secs)})
        incidents = incident_messages(args.incidents)
        rows, secs = write(target, incidents, settings.sink_flush_rows)
        results.append({"table": "incidents", "batch_rows": settings.sink_flush_rows, "rows": rows,
                        "seconds": round(secs, 3), "rows_per_s": round(rows / secs)})
        stored = client.query(f"SELECT count() FROM {db}.calls FINAL").result_rows[0][0]
    finally:
        client.command(f"DROP DATABASE IF EXISTS {db}")
    print(f"{'table':10} {'batch':>8} {'rows':>10} {'seconds':>8} {'rows/s':>12}")
    for r in results:
        print(f"{r['table']:10} {r['batch_rows']:>8} {r['rows']:>10} {r['seconds']:>8} {r['rows_per_s']:>12,}")
    print(f"(calls stored after the last run, FINAL: {stored}; target {settings.clickhouse_url.split('@')[-1]})")
    if args.json:
        print(json.dumps({"bench": "sink", "results": results}))
    return 0
