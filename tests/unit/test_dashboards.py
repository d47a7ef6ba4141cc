"""Grafana dashboards (deploy/grafana) and Prometheus rules (deploy/prometheus) refer only to
what commwatch really produces: every metric name is one a commwatch process registers
(found by importing the modules that define metrics and reading their registries), and every
ClickHouse query runs against the schema `commwatch db migrate` creates (a real chdb engine)."""

from __future__ import annotations

import importlib
import inspect
import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "deploy" / "grafana").glob("*.json"))
RULES = ROOT / "deploy" / "prometheus" / "commwatch-rules.yaml"
PACKAGE_ROOTS = {"commwatch": "commwatch", "producers": "commwatch.producers", "streams": "commwatch.streams",
                 "sinks": "commwatch.sinks"}
DEFINES_METRICS = re.compile(r"\b(Counter|Gauge|Histogram|Summary|Info)\(\s*[\"']commwatch_")
METRIC_NAME = re.compile(r"\bcommwatch_[a-z0-9_]+")
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("", "_sum", "_count", "_created"), "info": ("_info",)}
PANEL_TYPES = {"stat", "timeseries", "table", "barchart", "bargauge", "gauge", "text", "row", "piechart", "heatmap"}


def metric_modules() -> list[str]:
    """Every module of the project that defines a commwatch_* metric."""
    found = []
    for folder, package in PACKAGE_ROOTS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "tests" in path.parts or not DEFINES_METRICS.search(path.read_text()):
                continue
            rel = path.relative_to(ROOT / folder).with_suffix("")
            found.append(".".join([package, *rel.parts]))
    return found


def families(module) -> list:
    """Metric families a module defines: module-level metrics, and classes built on a registry."""
    out = []
    for value in vars(module).values():
        if isinstance(value, MetricWrapperBase):
            out += value.describe()
        elif inspect.isclass(value) and value.__module__ == module.__name__:
            params = inspect.signature(value).parameters
            if "registry" in params:
                registry = CollectorRegistry()
                value(registry=registry)
                out += list(registry.collect())
    return out


@pytest.fixture(scope="module")
def produced_metrics() -> set[str]:
    names = set()
    for name in metric_modules():
        for family in families(importlib.import_module(name)):
            names |= {family.name + s for s in SUFFIXES[family.type]}
    return names


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def panels(dashboard: dict) -> list[dict]:
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out += p.get("panels", [])
    return out


def prometheus_exprs() -> list[tuple[str, str]]:
    exprs = []
    for path in DASHBOARDS:
        for panel in panels(load(path)):
            for t in panel.get("targets", []):
                if "expr" in t:
                    exprs.append((f"{path.name}: {panel['title']}", t["expr"]))
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            exprs.append((f"{RULES.name}: {rule['alert']}", rule["expr"]))
    return exprs


def clickhouse_queries() -> list[tuple[str, str]]:
    queries = []
    for path in DASHBOARDS:
        d = load(path)
        for var in d["templating"]["list"]:
            if var["type"] == "query" and var["datasource"]["type"] == "grafana-clickhouse-datasource":
                queries.append((f"{path.name}: variable {var['name']}", var["query"]))
        for panel in panels(d):
            for t in panel.get("targets", []):
                if "rawSql" in t:
                    queries.append((f"{path.name}: {panel['title']}", t["rawSql"]))
    return queries


# --- Grafana JSON ---------------------------------------------------------------------------

def test_there_are_live_and_history_dashboards():
    assert {p.name for p in DASHBOARDS} >= {"commwatch-live.json", "commwatch-history.json"}
    assert len(prometheus_exprs()) >= 10 and len(clickhouse_queries()) >= 5


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_valid_grafana_json(path):
    d = load(path)
    assert re.fullmatch(r"[a-z0-9-]{1,40}", d["uid"]) and d["title"]
    assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 36
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ids = [p["id"] for p in panels(d)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    occupied = set()
    for p in panels(d):
        assert p["type"] in PANEL_TYPES and p["title"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & occupied, f"panel {p['title']!r} overlaps another"
        occupied |= cells
        # every data source is the dashboard's data source variable, of the panel's plugin type
        ds = p["datasource"]
        var = variables[ds["uid"].strip("${}")]
        assert var["type"] == "datasource" and var["query"] == ds["type"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs))
        for t in p["targets"]:
            assert t["datasource"] == ds
            assert ("expr" in t) == (ds["type"] == "prometheus")
            assert ("rawSql" in t) == (ds["type"] == "grafana-clickhouse-datasource")
    used = {m for p in panels(d) for t in p["targets"] for m in re.findall(r"\$\{?(\w+)", json.dumps(t))}
    assert {u for u in used if not u.startswith("__")} <= set(variables)


def test_dashboard_uids_are_unique():
    uids = [load(p)["uid"] for p in DASHBOARDS]
    assert len(uids) == len(set(uids))


# --- Prometheus names ------------------------------------------------------------------------

def test_metric_registry_is_found(produced_metrics):
    assert "commwatch.metrics" in metric_modules()
    assert "commwatch_stream_messages_total" in produced_metrics
    assert "commwatch_detection_delay_seconds_bucket" in produced_metrics
    assert "commwatch_stream_messages" not in produced_metrics  # counters are exposed as *_total


@pytest.mark.parametrize("where,expr", prometheus_exprs(), ids=[w for w, _ in prometheus_exprs()])
def test_every_query_names_a_produced_metric(where, expr, produced_metrics):
    names = set(METRIC_NAME.findall(expr))
    others = set(re.findall(r"\b(?!commwatch_)([a-z_]+)\{", expr))
    assert names or others == {"up"}, "the query names no metric"
    assert names <= produced_metrics, f"{where}: {sorted(names - produced_metrics)} are not produced"
    assert others <= {"up"}, f"{where}: {sorted(others)}"


@pytest.mark.parametrize("group", yaml.safe_load(RULES.read_text())["groups"], ids=lambda g: g["name"])
def test_rules_are_well_formed(group):
    for rule in group["rules"]:
        assert re.fullmatch(r"Commwatch[A-Z]\w+", rule["alert"])
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert rule["annotations"]["summary"]
        assert re.fullmatch(r"\d+[smh]", rule["for"])


# --- ClickHouse names -------------------------------------------------------------------------

def expand_macros(sql: str, db: str) -> str:
    """What grafana-clickhouse-datasource sends, for a 6-hour range and job j1."""
    sql = re.sub(r"\$__timeFilter\((\w+)\)", r"\1 >= now() - INTERVAL 6 HOUR AND \1 <= now()", sql)
    sql = re.sub(r"\$__timeInterval\((\w+)\)", r"toStartOfInterval(toDateTime(\1), INTERVAL 60 second)", sql)
    sql = sql.replace("${job}", "j1").replace("$job", "j1")
    assert "$" not in sql, f"a macro the test does not know: {sql}"
    return re.sub(r"\bcommwatch\.", f"{db}.", sql)


@pytest.fixture
def migrated(ch_client, ch_settings):
    from commwatch.sinks.clickhouse.schema import migrate

    migrate(ch_client, ch_settings)
    db = ch_settings.clickhouse_database
    ch_client.command(
        f"INSERT INTO {db}.incidents (v, job, incident, kind, severity, status, ts_ns, opened_ns, opened_at, "
        "updated_at, culprit_ranks, culprit_nodes, comm, summary, evidence) VALUES "
        "(1, 'j1', 'j1-hang-1', 'hang', 'P0', 'open', 0, 0, now64(3) - INTERVAL 1 MINUTE, now64(3) - INTERVAL 1 MINUTE, [17, 18], ['node-02'], "
        "'9f2c4d1e00a1b2c3', 'rank 17 never entered', '{}')"
    )
    return ch_client, db


@pytest.mark.integration
def test_every_clickhouse_query_runs_on_the_schema(migrated):
    client, db = migrated
    tables = {r[0] for r in client.query(f"SELECT name FROM system.tables WHERE database = '{db}'").result_rows}
    results = {}
    for where, sql in clickhouse_queries():
        named = set(re.findall(r"\bcommwatch\.(\w+)", sql))
        assert named and named <= tables, f"{where}: {sorted(named - tables)} are not tables of the schema"
        results[where] = client.query(expand_macros(sql, db)).result_rows  # unknown column: ServerError
    by_rank = results["commwatch-history.json: Culprit ranks over time"]
    assert sorted(r[1] for r in by_rank) == ["17", "18"]
    assert [r[3] for r in results["commwatch-history.json: Incidents"]] == ["j1"]
    assert results["commwatch-history.json: variable job"] == [("j1",)]


def test_macro_expansion_refuses_unknown_macros():
    with pytest.raises(AssertionError, match="macro"):
        expand_macros("SELECT 1 WHERE $__unknownMacro(x)", "db")
    assert expand_macros("SELECT * FROM commwatch.steps WHERE $__timeFilter(end)", "d1") == (
        "SELECT * FROM d1.steps WHERE end >= now() - INTERVAL 6 HOUR AND end <= now()")
