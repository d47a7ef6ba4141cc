"""The history while a process owns the embedded ClickHouse: its loopback endpoint answers
clickhouse-connect clients and the CLI in other processes (real chdb, real HTTP).

This test process owns the session's chdb directory (chdb admits one process per
directory) and serves the endpoint over it, as the sink does in the stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from commwatch import discovery
from commwatch.embedded import endpoint_client
from commwatch.sinks.clickhouse.endpoint import QueryEndpoint
from commwatch.sinks.clickhouse.schema import migrate

pytestmark = pytest.mark.integration


@pytest.fixture
def endpoint(chdb_dir, ch_client, ch_settings):
    migrate(ch_client, ch_settings)
    ep = QueryEndpoint(str(chdb_dir)).start()
    yield ep
    ep.stop()


def cli_env(ch_settings) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_")}
    env.update(COMMWATCH_CLICKHOUSE_DSN=ch_settings.clickhouse_url, COMMWATCH_DATA_DIR=ch_settings.data_dir,
               COMMWATCH_CLICKHOUSE_DATABASE=ch_settings.clickhouse_database)
    return env


def cli(env: dict, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commwatch.cli", *argv], env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_client_queries_inserts_and_gets_errors_through_the_endpoint(endpoint, ch_client, ch_settings):
    db = ch_settings.clickhouse_database
    c = endpoint_client(endpoint.url, endpoint.token)
    c.database = db
    now_ns = time.time_ns()  # rows past their TTL would be dropped at insert
    incident = [1, "j1", "i1", "hang", "P0", "open", now_ns, now_ns, now_ns // 10**6, now_ns // 10**6, None, [3],
                ["n0"], "00000000000000ab", "s", "{}"]
    cols = ["v", "job", "incident", "kind", "severity", "status", "ts_ns", "opened_ns", "opened_at", "updated_at",
            "resolved_at", "culprit_ranks", "culprit_nodes", "comm", "summary", "evidence"]
    for _ in range(2):  # the same deduplication token twice: one row
        c.insert("incidents", [incident], column_names=cols, settings={"insert_deduplication_token": "t1"})
    rows = c.query("SELECT job, culprit_ranks, comm FROM incidents WHERE job = {job:String}",
                   parameters={"job": "j1"}).result_rows
    assert rows == [("j1", [3], "00000000000000ab")]
    assert ch_client.query(f"SELECT count() FROM {db}.incidents").result_rows == [(1,)]  # the same database
    with pytest.raises(DatabaseError, match="UNKNOWN_TABLE|Unknown table"):
        c.query("SELECT * FROM no_such_table")
    assert migrate(c, ch_settings) == []  # migrations run through it too
    with pytest.raises(DatabaseError, match="516"):
        endpoint_client(endpoint.url, "wrong-token")
    req = urllib.request.Request(endpoint.url + "/?query=SELECT%201")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=10)
    assert refused.value.code == 401


def test_the_cli_of_another_process_goes_through_the_owner(endpoint, chdb_dir, ch_client, ch_settings):
    db = ch_settings.clickhouse_database
    ch_client.command(f"INSERT INTO {db}.incidents (v, job, incident, kind, severity, status, ts_ns, opened_ns, "
                      "opened_at, updated_at, culprit_ranks, culprit_nodes, comm, summary, evidence) VALUES "
                      "(1, 'jq', 'i9', 'slow_rank', 'P1', 'open', 1, 1, now64(3), now64(3), [7], ['n7'], '', 'slow', "
                      "'{}')")
    env = cli_env(ch_settings)
    # no owner record: chdb refuses a second process, and the error names the setting
    refused = cli(env, "incidents", "--job", "jq")
    assert refused.returncode == 2 and "COMMWATCH_CLICKHOUSE_DSN" in refused.stderr
    assert "Traceback" not in refused.stderr
    discovery.write_owner(chdb_dir, endpoint.url, endpoint.token, "pytest")
    try:
        got = cli(env, "incidents", "--job", "jq", "--format", "json")
        assert got.returncode == 0, got.stderr
        rows = [json.loads(line) for line in got.stdout.splitlines()]
        assert [(r["incident"], r["culprit_ranks"], r["culprit_nodes"]) for r in rows] == [("i9", [7], ["n7"])]
        sql = cli(env, "sql", "SELECT count() AS n FROM incidents", "--format", "tsv")
        assert sql.returncode == 0 and sql.stdout.splitlines() == ["n", "1"]
        assert endpoint.queries > 0
        # the sink insists on owning the database: it is told who does
        sink = cli({**env, "COMMWATCH_KAFKA_BOOTSTRAP": "127.0.0.1:1"}, "--set", "metrics_port=0", "sink")
        assert sink.returncode == 2 and "owned by `pytest`" in sink.stderr and "Traceback" not in sink.stderr
    finally:
        discovery.remove_owner(chdb_dir)


def test_migration_2_turns_decimal_comms_into_hex_and_survives_a_rerun(ch_client, ch_settings):
    db = ch_settings.clickhouse_database
    assert migrate(ch_client, ch_settings, target=1) == [1]
    ch_client.command(f"INSERT INTO {db}.calls (job, comm, seq, rank, op, peer, bytes, start, end, start_corrected) "
                      "VALUES ('j', 255, 1, 0, 'AllReduce', -1, 8, now64(9), now64(9), now64(9)), "
                      f"('j', {0x9f2c4d1e00a1b2c3}, 1, 1, 'AllReduce', -1, 8, now64(9), now64(9), now64(9))")
    # an earlier run interrupted before the exchange left a half-filled copy
    ch_client.command(f"CREATE TABLE {db}.calls_hex (x UInt8) ENGINE = Memory")
    assert migrate(ch_client, ch_settings) == [2]
    rows = ch_client.query(f"SELECT comm, toTypeName(comm) FROM {db}.calls ORDER BY rank").result_rows
    assert rows == [("00000000000000ff", "LowCardinality(String)"), ("9f2c4d1e00a1b2c3", "LowCardinality(String)")]
    tables = {r[0] for r in ch_client.query(f"SHOW TABLES FROM {db}").result_rows}
    assert "calls_hex" not in tables
    assert migrate(ch_client, ch_settings) == []
