"""The ClickHouse schema as versioned, idempotent migrations.

`migrate(client, settings)` creates the database and applies every migration not yet
recorded in `<db>.schema_migrations`; each statement is itself idempotent (`IF NOT
EXISTS`), so a migration interrupted half-way is simply applied again. It runs from
`commwatch db migrate` and when `commwatch sink` starts.

Tables (all partitioned by day, replacing engines so that a batch written twice after a
crash or a retry reads once with `FINAL`):

- `incidents`: the latest state of every incident (wire contract section 3).
- `calls`: one row per completed call record. `comm` is 16 lowercase hex digits here as in
  every table, wire key and output (migration 2 converted the decimal UInt64 of version 1).
- `windows`: per-rank window statistics published by the live workers.
- `steps`, `hw`, `topology`: iteration timing, hardware samples, rank placement.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Callable

from commwatch.settings import Settings
from commwatch.wire import OP_NAMES

log = logging.getLogger(__name__)

DEDUP = "SETTINGS non_replicated_deduplication_window = 1000"
OP_ENUM = "Enum8(" + ", ".join(f"'{name}' = {i}" for i, name in enumerate(OP_NAMES)) + ")"
TS = "DateTime64(3, 'UTC')"
NS = "DateTime64(9, 'UTC')"


@dataclass(frozen=True)
class Migration:
    """Idempotent statements, or `apply(client, db, settings)` for a step that must look first."""

    version: int
    name: str
    statements: tuple[str, ...] = ()
    apply: Callable[[Any, str, Settings], None] | None = None


CALLS_COLUMNS = "job, comm, seq, rank, op, peer, bytes, start, end, start_corrected"


def calls_table(db: str, name: str, ttl_calls: int) -> str:
    """The `calls` table as of migration 2: `comm` as 16 lowercase hex digits, like every
    other table, the wire keys and every output."""
    return f"""CREATE TABLE IF NOT EXISTS {db}.{name} (
            job LowCardinality(String),
            comm LowCardinality(String),
            seq UInt64 CODEC(Delta, ZSTD),
            rank Int32,
            op {OP_ENUM},
            peer Int32 CODEC(ZSTD),
            bytes UInt64 CODEC(T64, ZSTD),
            start {NS} CODEC(Delta, ZSTD),
            end {NS} CODEC(Delta, ZSTD),
            start_corrected {NS} CODEC(Delta, ZSTD)
        ) ENGINE = ReplacingMergeTree
        PARTITION BY toDate(start)
        ORDER BY (job, comm, seq, rank, op, peer)
        TTL toDateTime(start) + INTERVAL {ttl_calls} DAY
        {DEDUP}"""


def column_type(client: Any, db: str, table: str, column: str) -> str | None:
    rows = client.query("SELECT type FROM system.columns WHERE database = {db:String} AND table = {t:String} "
                        "AND name = {c:String}", parameters={"db": db, "t": table, "c": column}).result_rows
    return rows[0][0] if rows else None


def calls_comm_hex(client: Any, db: str, settings: Settings) -> None:
    """Migration 2: `calls.comm` from UInt64 (shown in decimal) to 16 lowercase hex digits.

    `comm` is in the sort key, so the table is rebuilt: a copy with the new type is filled
    from the old one and the two are exchanged. Safe to run again after an interruption:
    a half-filled copy is dropped and refilled while `calls` still has the old type, and a
    copy left behind after the exchange (the old data) is dropped."""
    if column_type(client, db, "calls", "comm") == "UInt64":
        client.command(f"DROP TABLE IF EXISTS {db}.calls_hex")
        client.command(calls_table(db, "calls_hex", settings.clickhouse_ttl_calls_days))
        client.command(f"INSERT INTO {db}.calls_hex ({CALLS_COLUMNS}) "
                       f"SELECT job, leftPad(lower(hex(comm)), 16, '0'), seq, rank, op, peer, bytes, start, end, "
                       f"start_corrected FROM {db}.calls")
        client.command(f"EXCHANGE TABLES {db}.calls AND {db}.calls_hex")
    client.command(f"DROP TABLE IF EXISTS {db}.calls_hex")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", (
        f"""CREATE TABLE IF NOT EXISTS {{db}}.incidents (
            v UInt8,
            job LowCardinality(String),
            incident String,
            kind LowCardinality(String),
            severity LowCardinality(String),
            status LowCardinality(String),
            ts_ns Int64 CODEC(Delta, ZSTD),
            opened_ns Int64 CODEC(Delta, ZSTD),
            opened_at {TS},
            updated_at {TS},
            resolved_at Nullable({TS}),
            culprit_ranks Array(Int32),
            culprit_nodes Array(LowCardinality(String)),
            comm String,
            summary String CODEC(ZSTD),
            evidence String CODEC(ZSTD)
        ) ENGINE = ReplacingMergeTree(updated_at)
        PARTITION BY toDate(opened_at)
        ORDER BY (job, incident)
        TTL toDateTime(opened_at) + INTERVAL {{ttl}} DAY
        {DEDUP}""",
        f"""CREATE TABLE IF NOT EXISTS {{db}}.calls (
            job LowCardinality(String),
            comm UInt64,
            seq UInt64 CODEC(Delta, ZSTD),
            rank Int32,
            op {OP_ENUM},
            peer Int32 CODEC(ZSTD),
            bytes UInt64 CODEC(T64, ZSTD),
            start {NS} CODEC(Delta, ZSTD),
            end {NS} CODEC(Delta, ZSTD),
            start_corrected {NS} CODEC(Delta, ZSTD)
        ) ENGINE = ReplacingMergeTree
        PARTITION BY toDate(start)
        ORDER BY (job, comm, seq, rank, op, peer)
        TTL toDateTime(start) + INTERVAL {{ttl_calls}} DAY
        {DEDUP}""",
        f"""CREATE TABLE IF NOT EXISTS {{db}}.windows (
            job LowCardinality(String),
            comm String,
            rank Int32,
            window_end {TS} CODEC(Delta, ZSTD),
            instances UInt32,
            mean_lag_ms Float32,
            last_share Float32,
            clock_offset_ms Float32,
            extra String CODEC(ZSTD)
        ) ENGINE = ReplacingMergeTree
        PARTITION BY toDate(window_end)
        ORDER BY (job, comm, rank, window_end)
        TTL toDateTime(window_end) + INTERVAL {{ttl}} DAY
        {DEDUP}""",
        f"""CREATE TABLE IF NOT EXISTS {{db}}.steps (
            job LowCardinality(String),
            rank Int32,
            iteration Int64 CODEC(Delta, ZSTD),
            start {NS} CODEC(Delta, ZSTD),
            end {NS} CODEC(Delta, ZSTD),
            duration_ms Float32,
            phases Map(LowCardinality(String), Float32)
        ) ENGINE = ReplacingMergeTree
        PARTITION BY toDate(start)
        ORDER BY (job, rank, iteration)
        TTL toDateTime(start) + INTERVAL {{ttl}} DAY
        {DEDUP}""",
        f"""CREATE TABLE IF NOT EXISTS {{db}}.hw (
            job LowCardinality(String),
            node LowCardinality(String),
            ts {TS} CODEC(Delta, ZSTD),
            rank Int32,
            gpu LowCardinality(String),
            sm_clock_mhz Nullable(Float32),
            mem_clock_mhz Nullable(Float32),
            power_w Nullable(Float32),
            temp_c Nullable(Float32),
            util_pct Nullable(Float32),
            throttle_reasons UInt64,
            ecc_dbe UInt32,
            xid UInt32,
            nvlink_errors UInt64,
            ib String CODEC(ZSTD)
        ) ENGINE = ReplacingMergeTree
        PARTITION BY toDate(ts)
        ORDER BY (job, node, rank, ts)
        TTL toDateTime(ts) + INTERVAL {{ttl}} DAY
        {DEDUP}""",
        f"""CREATE TABLE IF NOT EXISTS {{db}}.topology (
            job LowCardinality(String),
            rank Int32,
            ts {TS},
            world_size UInt32,
            node LowCardinality(String),
            local_rank Int32,
            gpu String,
            coords Map(LowCardinality(String), Int32)
        ) ENGINE = ReplacingMergeTree(ts)
        PARTITION BY toDate(ts)
        ORDER BY (job, rank)
        TTL toDateTime(ts) + INTERVAL {{ttl}} DAY
        {DEDUP}""",
    )),
    Migration(2, "calls.comm as 16 hex digits", apply=calls_comm_hex),
)

TABLES = ("incidents", "calls", "windows", "steps", "hw", "topology")


def check_database_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        from commwatch.settings import SettingsError

        raise SettingsError(f"COMMWATCH_CLICKHOUSE_DATABASE: {name!r} is not a plain identifier")
    return name


def applied_versions(client: Any, db: str) -> set[int]:
    rows = client.query(f"SELECT version FROM {db}.schema_migrations").result_rows
    return {int(r[0]) for r in rows}


def migrate(client: Any, settings: Settings, target: int | None = None) -> list[int]:
    """Apply pending migrations (up to version `target`, default: all); returns the
    versions applied now (empty: up to date)."""
    db = check_database_name(settings.clickhouse_database)
    client.command(f"CREATE DATABASE IF NOT EXISTS {db}")
    client.command(
        f"CREATE TABLE IF NOT EXISTS {db}.schema_migrations "
        f"(version UInt32, name String, applied_at {TS} DEFAULT now64(3)) "
        "ENGINE = ReplacingMergeTree ORDER BY version"
    )
    done = applied_versions(client, db)
    applied = []
    for m in MIGRATIONS:
        if m.version in done or (target is not None and m.version > target):
            continue
        for stmt in m.statements:
            client.command(stmt.format(db=db, ttl=settings.clickhouse_ttl_days,
                                       ttl_calls=settings.clickhouse_ttl_calls_days))
        if m.apply is not None:
            m.apply(client, db, settings)
        client.insert(f"{db}.schema_migrations", [[m.version, m.name]], column_names=["version", "name"])
        log.info("applied migration %d (%s) to %s", m.version, m.name, db)
        applied.append(m.version)
    return applied
