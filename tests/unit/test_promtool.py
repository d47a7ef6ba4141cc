"""Prometheus' own checker on the rules: `promtool check rules` on deploy/prometheus and on the
Helm chart's PrometheusRule (its spec, rendered), and `promtool test rules` on the per-job
alerts (they fire for the job that has the problem, naming it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from debian_tools import require

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "commwatch-rules.yaml"
CHART = ROOT / "deploy" / "helm" / "commwatch"


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([require("promtool"), *args], capture_output=True, text=True, timeout=120)


def test_rule_file_passes_promtool():
    out = promtool("check", "rules", str(RULES))
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("values_file", ["monitoring-values.yaml", None], ids=["monitoring", "defaults"])
def test_chart_prometheus_rule_passes_promtool(values_file, tmp_path):
    import helm_python as helm

    values = yaml.safe_load((CHART / "ci" / values_file).read_text()) if values_file else {}
    values.setdefault("prometheusRule", {})["enabled"] = True
    out = helm.Chart.load(CHART).render(values, name="cw", namespace="observability")
    docs = [d for path, text in out.items() if not path.endswith("NOTES.txt") for d in yaml.safe_load_all(text) if d]
    [rule] = [d for d in docs if d["kind"] == "PrometheusRule"]
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    got = promtool("check", "rules", str(spec))
    assert got.returncode == 0 and "SUCCESS" in got.stdout, got.stdout + got.stderr


def test_promtool_refuses_a_broken_rule(tmp_path):
    """The check above can fail: a rule with a PromQL error does not pass."""
    rules = yaml.safe_load(RULES.read_text())
    rules["groups"][0]["rules"][0]["expr"] = "sum(commwatch_stream_consumer_lag_messages > "
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(rules))
    assert promtool("check", "rules", str(bad)).returncode != 0


def annotations(alert: str, **labels: str) -> dict[str, str]:
    """The rule's annotations with its `$labels` filled in (value templates left to the test)."""
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == alert:
                out = {}
                for k, v in rule["annotations"].items():
                    for name, value in labels.items():
                        v = v.replace("{{ $labels.%s }}" % name, value)
                    out[k] = v
                return out
    raise KeyError(alert)


def test_per_job_alerts_fire_for_the_job_in_trouble(tmp_path):
    waiting = annotations("CommwatchJobWaitingLong", job_name="j42")
    waiting["summary"] = waiting["summary"].replace("{{ $value | humanizeDuration }}", "7m 0s")
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": [
                {"series": 'commwatch_job_incidents_open{job_name="j42",kind="hang",severity="P0",instance="w0"}',
                 "values": "_ _ 1x40"},
                # the same job reported by two workers for a moment (a rebalance): one alert
                {"series": 'commwatch_job_incidents_open{job_name="j42",kind="hang",severity="P0",instance="w1"}',
                 "values": "_ _ _ 1 1"},
                {"series": 'commwatch_job_incidents_open{job_name="j7",kind="slow_rank",severity="P2",instance="w0"}',
                 "values": "1x40"},
                {"series": 'commwatch_job_hang_wait_seconds{job_name="j42",instance="w0"}', "values": "0+15x40"},
                {"series": 'commwatch_job_hang_wait_seconds{job_name="j7",instance="w0"}', "values": "0x40"},
            ],
            "alert_rule_test": [
                {"eval_time": "15s", "alertname": "CommwatchP0IncidentOpen", "exp_alerts": []},
                {"eval_time": "1m", "alertname": "CommwatchP0IncidentOpen", "exp_alerts": [{
                    "exp_labels": {"severity": "critical", "job_name": "j42", "kind": "hang"},
                    "exp_annotations": annotations("CommwatchP0IncidentOpen", job_name="j42", kind="hang")}]},
                {"eval_time": "5m", "alertname": "CommwatchJobWaitingLong", "exp_alerts": []},
                {"eval_time": "7m", "alertname": "CommwatchJobWaitingLong", "exp_alerts": [{
                    "exp_labels": {"severity": "critical", "job_name": "j42"}, "exp_annotations": waiting}]},
            ],
        }],
    }
    path = tmp_path / "rules.test.yaml"
    path.write_text(yaml.safe_dump(tests))
    out = promtool("test", "rules", str(path))
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr
