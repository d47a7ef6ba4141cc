"""Payloads for each kind of destination, and the destinations configured in settings.

- `webhook`: generic JSON, `{"v": 1, "job": J, "events": [incident + "event"]}`.
- `slack`: Slack-compatible incoming webhook, `{"text": ...}`.
- `feishu`: Feishu/Lark custom bot, `{"msg_type": "text", "content": {"text": ...}}`.
- `alertmanager`: Prometheus Alertmanager API v2, `POST <url>/api/v2/alerts` with one alert
  per incident (labels alertname, severity, job, kind, incident; `endsAt` once resolved).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Callable

from commwatch.settings import Settings
from commwatch.sinks.notify.routing import Notification

MARK = {"open": "OPEN", "update": "UPDATE", "resolved": "RESOLVED", "repeat": "STILL OPEN"}


def _line(e: dict) -> str:
    culprits = ", ".join(map(str, e["culprit_ranks"])) or "-"
    nodes = ", ".join(e["culprit_nodes"]) or "-"
    return (f"[{MARK.get(e['event'], e['event'])}] {e['severity']} {e['kind']} in job {e['job']}: {e['summary']} "
            f"(culprit ranks {culprits}; nodes {nodes}; incident {e['incident']})")


def text(n: Notification) -> str:
    head = f"commwatch: {len(n.events)} incident events in job {n.job}\n" if len(n.events) > 1 else ""
    return head + "\n".join(_line(e) for e in n.events)


def webhook_payload(n: Notification) -> Any:
    return {"v": 1, "job": n.job, "events": n.events}


def slack_payload(n: Notification) -> Any:
    return {"text": text(n)}


def feishu_payload(n: Notification) -> Any:
    return {"msg_type": "text", "content": {"text": text(n)}}


def _rfc3339(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def alertmanager_payload(n: Notification) -> Any:
    alerts = []
    for e in n.events:
        alert = {
            "labels": {"alertname": f"commwatch_{e['kind']}", "severity": e["severity"], "job": e["job"],
                       "kind": e["kind"], "incident": e["incident"]},
            "annotations": {"summary": e["summary"],
                            "culprit_ranks": ",".join(map(str, e["culprit_ranks"])),
                            "culprit_nodes": ",".join(e["culprit_nodes"])},
            "startsAt": _rfc3339(e["opened_ns"]),
        }
        if e["status"] == "resolved":
            alert["endsAt"] = _rfc3339(e["ts_ns"])
        alerts.append(alert)
    return alerts


@dataclass(frozen=True)
class Destination:
    name: str
    url: str
    payload: Callable[[Notification], Any]


def from_settings(s: Settings) -> list[Destination]:
    out = []
    if s.notify_webhook_url:
        out.append(Destination("webhook", s.notify_webhook_url, webhook_payload))
    if s.notify_slack_url:
        out.append(Destination("slack", s.notify_slack_url, slack_payload))
    if s.notify_feishu_url:
        out.append(Destination("feishu", s.notify_feishu_url, feishu_payload))
    if s.notify_alertmanager_url:
        out.append(Destination("alertmanager", s.notify_alertmanager_url.rstrip("/") + "/api/v2/alerts",
                               alertmanager_payload))
    return out
