"""Incident lifecycle (contract 2.6): open, update on change, resolve after a quiet period.

Each detector *asserts* the conditions it sees at every evaluation, under a stable key.
A key asserted for the first time opens an incident (stable id fixed at open); a change of
culprits or severity emits `update`; a key not asserted for `resolve_after_s` resolves it.
A key that reopens right after resolving is the same trouble flapping: it reopens with a
new id only after twice the quiet period; before that the assertion is ignored. A resolved
event says why in `evidence.resolved_reason`: `cleared` (not seen for the quiet period, or its
cause visibly gone: a lost node heard from again), `job_ended` or `no_data` (`resolve_all`),
and its summary ends with "[resolved: ...]" in words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Incident:
    id: str
    kind: str
    severity: str
    opened_ns: int
    culprit_ranks: list[int]
    culprit_nodes: list[str]
    comm: str
    summary: str
    evidence: dict = field(default_factory=dict)
    last_seen_ns: int = 0
    quiet_ns: int = 0
    asserted_ns: int = 0  # when its condition was last seen (`keep` leaves it)


class IncidentBook:
    def __init__(self, job: str, resolve_after_s: float):
        self.job = job
        self.resolve_ns = int(resolve_after_s * 1e9)
        self.open: dict[tuple, Incident] = {}
        self._resolved_at: dict[tuple, int] = {}
        self.faded: dict[tuple, int] = {}  # key -> when it resolved for not being seen (`expire`)

    def event(self, inc: Incident, status: str, now_ns: int) -> dict:
        return {
            "v": 1, "job": self.job, "incident": inc.id, "kind": inc.kind, "severity": inc.severity,
            "status": status, "ts_ns": int(now_ns), "opened_ns": int(inc.opened_ns),
            "culprit_ranks": sorted(int(r) for r in inc.culprit_ranks), "culprit_nodes": sorted(inc.culprit_nodes),
            "comm": inc.comm, "summary": inc.summary, "evidence": inc.evidence,
        }

    def assert_(self, key: tuple, now_ns: int, *, kind: str, severity: str, culprit_ranks: list[int],
                culprit_nodes: list[str], comm: str, summary: str, evidence: dict, id_hint: str,
                quiet_ns: int = 0) -> list[dict]:
        """`quiet_ns`: how long the condition must go unseen before the incident resolves (at
        least the book's quiet period; longer for a condition seen once per long iteration)."""
        inc = self.open.get(key)
        if inc is None:
            gone = self._resolved_at.get(key)
            if gone is not None and now_ns - gone < 2 * self.resolve_ns:
                return []
            inc = Incident(f"{self.job}-{kind}-{id_hint}", kind, severity, now_ns, list(culprit_ranks),
                           list(culprit_nodes), comm, summary, evidence, now_ns, max(self.resolve_ns, quiet_ns), now_ns)
            self.open[key] = inc
            return [self.event(inc, "open", now_ns)]
        inc.last_seen_ns = inc.asserted_ns = now_ns
        inc.quiet_ns = max(self.resolve_ns, quiet_ns)
        inc.summary, inc.evidence = summary, evidence
        if sorted(culprit_ranks) != sorted(inc.culprit_ranks) or sorted(culprit_nodes) != sorted(
            inc.culprit_nodes
        ) or severity != inc.severity:
            inc.culprit_ranks, inc.culprit_nodes, inc.severity = list(culprit_ranks), list(culprit_nodes), severity
            return [self.event(inc, "update", now_ns)]
        return []

    def expire(self, now_ns: int, kinds: tuple[str, ...] | None = None) -> list[dict]:
        """Resolve incidents (of `kinds`) not asserted for the quiet period."""
        out = []
        for key, inc in list(self.open.items()):
            if kinds is not None and inc.kind not in kinds:
                continue
            if now_ns - inc.last_seen_ns >= inc.quiet_ns:
                out.append(self._resolved(key, now_ns, "cleared", f"not seen for {inc.quiet_ns / 1e9:.0f} s"))
                self.faded[key] = now_ns
        return out

    def faded_since(self, kind: str, since_ns: int, but: tuple | None = None) -> list[tuple]:
        """Keys of `kind` (their first item) other than `but` that resolved for not being seen
        at `since_ns` or later (older ones are forgotten here)."""
        for key in [k for k, t in self.faded.items() if t < since_ns]:
            del self.faded[key]
        return [k for k in self.faded if k[0] == kind and k != but]

    def keep(self, key: tuple, now_ns: int, most_ns: int | None = None) -> None:
        """The condition cannot be judged now (what shows it is not current): it is neither
        seen again nor gone, and its quiet period starts anew; with `most_ns`, only until it
        was last seen that long ago."""
        inc = self.open.get(key)
        if inc is not None and (most_ns is None or now_ns - inc.asserted_ns < most_ns):
            inc.last_seen_ns = now_ns

    def resolve(self, key: tuple, now_ns: int, why: str) -> list[dict]:
        """Resolve at once (the cause is visibly gone, e.g. a lost node is back: `why`)."""
        return [self._resolved(key, now_ns, "cleared", why)] if key in self.open else []

    def resolve_all(self, now_ns: int, reason: str, why: str) -> list[dict]:
        """Resolve every open incident at once (the job ended): `evidence.resolved_reason`
        says why, and none reopens unless the condition is seen again after the quiet period."""
        return [self._resolved(key, now_ns, reason, why) for key in list(self.open)]

    def _resolved(self, key: tuple, now_ns: int, reason: str, why: str) -> dict:
        """Close an open incident: the figures last asserted may read oddly once its cause is
        gone (a slow rank "0% slower" as it recovers), so the event says why it ended."""
        inc = self.open.pop(key)
        self._resolved_at[key] = now_ns
        inc.evidence = {**inc.evidence, "resolved_reason": reason}
        inc.summary = f"{inc.summary} [resolved: {why}]"
        return self.event(inc, "resolved", now_ns)

    def adopt(self, iid: str, old_id: str, opened_ns: int, severity: str) -> bool:
        """The open incident `iid` is one said open before under `old_id` at `severity` (by this
        job's stage 2 before a restart): it carries on under that id and opening time, at the
        higher of the two severities (a severity only rises while open). Whether it was found."""
        for inc in self.open.values():
            if inc.id == iid:
                inc.id, inc.opened_ns, inc.severity = old_id, opened_ns, min(inc.severity, severity)
                return True
        return False

    def together(self, onsets: dict, slack_of: Callable[[object], float], was: dict, key_of: Callable[[object], tuple]
                 ) -> dict:
        """Members of one condition (lost nodes, GPUs whose clocks fell) grouped into one
        incident each where they began at once: an onset within `slack_of(member)` of the
        group's first (one cause takes them down together: a rack's switch or power). A
        member stays in the group it joined while that group's incident (`key_of(first
        member)`) is open, and one whose own key is open heads its own. `onsets`: member ->
        when its condition began; `was`: member -> its group's first member, kept up to date
        here. Returns the first member -> the group's members (those in `onsets`)."""
        groups: dict = {}
        onset: dict = {}
        for m in sorted(onsets, key=lambda m: (onsets[m], m)):
            t = onsets[m]
            head = was.get(m)
            if head is None or key_of(head) not in self.open:
                head = m if key_of(m) in self.open else None
            if head is None:
                head = next((h for h, t0 in onset.items() if abs(t - t0) <= slack_of(m)), m)
            groups.setdefault(head, []).append(m)
            onset[head] = min(onset.get(head, t), t)
        was.clear()
        was.update({m: h for h, ms in groups.items() for m in ms})
        return groups

    def of_kind(self, kind: str) -> list[Incident]:
        return [i for i in self.open.values() if i.kind == kind]
