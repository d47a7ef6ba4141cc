"""Payloads for each kind of destination, and the destinations configured in settings.

- `webhook`: generic JSON, `{"v": 1, "job": J, "events": [incident + "event"]}`.
- `slack`: Slack-compatible incoming webhook, `{"text": ...}`.
- `feishu`: Feishu/Lark custom bot, `{"msg_type": "text", "content": {"text": ...}}`.
- `alertmanager`: Prometheus Alertmanager API v2, `POST <url>/api/v2/alerts` with one alert
  per incident (labels alertname, severity, job, kind, incident). Open incidents are re-sent
  every `notify_alertmanager_resend_s` with `endsAt` three periods ahead; a resolved one
  is sent with `endsAt` at its resolution. `deploy/alertmanager/commwatch.yml` is an
  example Alertmanager configuration (grouping by job, a P0 hang inhibiting P2/P3).

The generic webhook and Alertmanager take extra HTTP headers (authentication) from the
secret settings `COMMWATCH_NOTIFY_WEBHOOK_HEADERS` / `..._ALERTMANAGER_HEADERS`.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import time
from dataclasses import dataclass
from typing import Any, Callable

from commwatch.settings import Settings, SettingsError
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


def alertmanager_payload(n: Notification, hold_s: float = 180.0, now_ns: int | None = None) -> Any:
    """Alerts for Alertmanager's API v2. An open incident's alert carries `endsAt` = now +
    `hold_s`: the notifier re-sends it well before then (every `hold_s / 3`), so it stays
    active whatever Alertmanager's `resolve_timeout`, and it expires by itself only if the
    notifier is gone. A resolved incident's alert ends now (or at its resolution, if that
    is earlier): Alertmanager resolves it at once."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    alerts = []
    for e in n.events:
        alert = {
            "labels": {"alertname": f"commwatch_{e['kind']}", "severity": e["severity"], "job": e["job"],
                       "kind": e["kind"], "incident": e["incident"]},
            "annotations": {"summary": e["summary"],
                            "culprit_ranks": ",".join(map(str, e["culprit_ranks"])),
                            "culprit_nodes": ",".join(e["culprit_nodes"])},
            "startsAt": _rfc3339(min(e["opened_ns"], now_ns)),
        }
        if e["status"] == "resolved":
            alert["endsAt"] = _rfc3339(max(min(e["ts_ns"], now_ns), min(e["opened_ns"], now_ns)))
        else:
            alert["endsAt"] = _rfc3339(now_ns + int(hold_s * 1e9))
        alerts.append(alert)
    return alerts


@dataclass(frozen=True)
class Destination:
    """Where notifications go. `refresh`: also send the router's periodic re-sends of open
    incidents (Alertmanager forgets an alert that is not re-sent); `headers`: extra HTTP
    headers (auth), from secret settings."""

    name: str
    url: str
    payload: Callable[[Notification], Any]
    refresh: bool = False
    headers: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:  # the URL and headers may carry tokens
        return f"Destination({self.name!r})"


def parse_headers(key: str, text: str) -> tuple[tuple[str, str], ...]:
    """`"Name: value; Name2: value2"` -> pairs; raises `SettingsError` naming `key` (never the
    value: it is a secret)."""
    out = []
    for i, part in enumerate(p for p in text.replace("\n", ";").split(";") if p.strip()):
        name, sep, value = part.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not _TOKEN.fullmatch(name) or not value or any(c in value for c in "\r\n\0"):
            raise SettingsError(f"{key}: header {i + 1} is not 'Name: value'")
        out.append((name, value))
    return tuple(out)


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def from_settings(s: Settings) -> list[Destination]:
    out = []
    if s.notify_webhook_url:
        out.append(Destination("webhook", s.notify_webhook_url, webhook_payload,
                               headers=parse_headers("COMMWATCH_NOTIFY_WEBHOOK_HEADERS", s.notify_webhook_headers)))
    if s.notify_slack_url:
        out.append(Destination("slack", s.notify_slack_url, slack_payload))
    if s.notify_feishu_url:
        out.append(Destination("feishu", s.notify_feishu_url, feishu_payload))
    if s.notify_alertmanager_url:
        hold = 3 * s.notify_alertmanager_resend_s
        out.append(Destination("alertmanager", s.notify_alertmanager_url.rstrip("/") + "/api/v2/alerts",
                               functools.partial(alertmanager_payload, hold_s=hold), refresh=True,
                               headers=parse_headers("COMMWATCH_NOTIFY_ALERTMANAGER_HEADERS",
                                                     s.notify_alertmanager_headers)))
    return out
