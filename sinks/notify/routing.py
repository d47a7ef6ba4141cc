"""Which incident events become notifications, and when (pure: time comes in as `now`).

- Filter by `notify_min_severity` and `notify_kinds`.
- One notification per incident state change: opening, a change of severity or culprits,
  resolution. A repeated `update` with nothing new is dropped.
- Storms are grouped: the first event of a job opens a window of `notify_group_s`; every
  event of that job inside it goes out in the same notification.
- An open P0 is notified again every `notify_repeat_p0_s` until it resolves.
- With `refresh_s` (Alertmanager configured), every open incident is re-sent every
  `refresh_s` as a `refresh` notification, delivered only to destinations that forget an
  alert that is not re-sent (Alertmanager).

>>> r = Router(min_severity="P1", kinds=(), group_s=0.0, repeat_p0_s=60.0)
>>> r.offer({"job": "j", "incident": "i", "kind": "hang", "severity": "P0", "status": "open",
...          "culprit_ranks": [3], "culprit_nodes": ["n"]}, now=0.0)
True
>>> [(n.job, [e["event"] for e in n.events]) for n in r.due(now=0.0)]
[('j', ['open'])]
>>> [e["event"] for n in r.due(now=61.0) for e in n.events]
['repeat']
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commwatch.settings import Settings

SEVERITY_RANK = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}
FORGET_RESOLVED_S = 3600.0


@dataclass
class Notification:
    job: str
    events: list[dict]  # incident dicts with an added "event": open | update | resolved | repeat | refresh
    refresh: bool = False  # a periodic re-send of open incidents, for destinations that need it


@dataclass
class _Tracked:
    state: tuple
    last_sent: float
    incident: dict


@dataclass
class Router:
    min_severity: str = "P3"
    kinds: tuple[str, ...] = ()
    group_s: float = 5.0
    repeat_p0_s: float = 300.0
    refresh_s: float = 0.0  # > 0: every open incident is re-sent this often (event "refresh")
    tracked: dict[str, _Tracked] = field(default_factory=dict)
    pending: dict[str, dict[str, dict]] = field(default_factory=dict)  # job -> incident id -> event
    window_end: dict[str, float] = field(default_factory=dict)
    dropped: int = 0
    next_refresh: float = 0.0

    @classmethod
    def from_settings(cls, s: Settings) -> "Router":
        kinds = tuple(k.strip() for k in s.notify_kinds.split(",") if k.strip())
        refresh = s.notify_alertmanager_resend_s if s.notify_alertmanager_url else 0.0
        return cls(s.notify_min_severity, kinds, s.notify_group_s, s.notify_repeat_p0_s, refresh)

    def wanted(self, inc: dict) -> bool:
        if SEVERITY_RANK.get(inc["severity"], 9) > SEVERITY_RANK[self.min_severity]:
            return False
        return not self.kinds or inc["kind"] in self.kinds

    @staticmethod
    def _state(inc: dict) -> tuple:
        closed = inc["status"] == "resolved"
        return (closed, inc["severity"], tuple(inc["culprit_ranks"]), tuple(inc["culprit_nodes"]))

    def offer(self, inc: dict, now: float) -> bool:
        """Take one incident event; True when it will be notified."""
        if not self.wanted(inc):
            self.dropped += 1
            return False
        key = inc["incident"]
        state = self._state(inc)
        known = self.tracked.get(key)
        if known is not None and known.state == state:
            self.dropped += 1
            return False
        if known is None and state[0]:
            event = "resolved"
        elif known is None:
            event = "open"
        else:
            event = "resolved" if state[0] else "update"
        self.tracked[key] = _Tracked(state, now, inc)
        job = inc["job"]
        self.pending.setdefault(job, {})[key] = dict(inc, event=event)
        self.window_end.setdefault(job, now + self.group_s)
        return True

    def remember(self, inc: dict, now: float) -> None:
        """Take an incident event as already notified (the state a restarted notifier rebuilds
        from what it had committed): nothing is sent for it, later changes are."""
        if self.wanted(inc):
            self.tracked[inc["incident"]] = _Tracked(self._state(inc), now, inc)

    def due(self, now: float, repeats: bool = True) -> list[Notification]:
        """Notifications whose grouping window has closed, and (unless not `repeats`) P0 repeats."""
        out = []
        for job in [j for j, end in self.window_end.items() if now >= end]:
            del self.window_end[job]
            out.append(Notification(job, list(self.pending.pop(job, {}).values())))
        again: dict[str, list[dict]] = {}
        for key, t in list(self.tracked.items()) if repeats else ():
            if t.state[0]:
                if now - t.last_sent >= FORGET_RESOLVED_S:  # late duplicates of "resolved" stay quiet
                    del self.tracked[key]
                continue
            if t.incident["severity"] == "P0" and now - t.last_sent >= self.repeat_p0_s:
                t.last_sent = now
                again.setdefault(t.incident["job"], []).append(dict(t.incident, event="repeat"))
        out += [Notification(job, events) for job, events in again.items()]
        if repeats and self.refresh_s > 0 and now >= self.next_refresh:
            self.next_refresh = now + self.refresh_s
            still: dict[str, list[dict]] = {}
            for t in self.tracked.values():
                if not t.state[0]:
                    still.setdefault(t.incident["job"], []).append(dict(t.incident, event="refresh"))
            out += [Notification(job, events, refresh=True) for job, events in still.items()]
        return out
