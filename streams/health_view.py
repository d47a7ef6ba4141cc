"""A job's health as plain text, built from the topics a person would look at.

`HealthView` takes decoded messages of one job (topology, progress heartbeats, incident
events) and renders a compact block: ranks and nodes, progress per communicator kind
(lowest and highest completed sequence numbers, and the group that lags most), and the
open incidents with their culprits. `commwatch demo` redraws it every second.

>>> v = HealthView("j1", {"00000000000000aa": "dp0"})
>>> v.feed("cw.progress.v1", {"job": "j1", "node": "n0", "ts_ns": 5, "comm": "00000000000000aa",
...        "ranks": [{"rank": 0, "started": 7, "completed": 7}, {"rank": 1, "started": 8, "completed": 7}]})
False
>>> v.progress_lines()
['  dp  1 group(s)  completed seq 7..7  (slowest dp0 at 7)']
"""

from __future__ import annotations

import re
from typing import Any

from commwatch import topics


def comm_kind(name: str) -> str:
    """`dp3` -> `dp`; an unnamed comm (16 hex digits) -> `comm`."""
    m = re.match(r"[a-z]+", name)
    return m.group(0) if m and not re.fullmatch(r"[0-9a-f]{16}", name) else "comm"


class HealthView:
    def __init__(self, job: str, comm_names: dict[str, str] | None = None):
        self.job = job
        self.comm_names = dict(comm_names or {})
        self.ranks: set[int] = set()
        self.nodes: set[str] = set()
        self.world_size = 0
        self.completed: dict[str, dict[int, int]] = {}  # comm hex -> rank -> completed seq
        self.incidents: dict[str, dict[str, Any]] = {}  # id -> latest event
        self.first_ts_ns = 0
        self.last_ts_ns = 0

    def feed(self, base_topic: str, value: dict[str, Any]) -> bool:
        """Take one decoded message; returns whether the incident list changed."""
        if value.get("job") != self.job:
            return False
        ts = value.get("ts_ns")
        if isinstance(ts, int):
            self.first_ts_ns = min(self.first_ts_ns or ts, ts)
            self.last_ts_ns = max(self.last_ts_ns, ts)
        if base_topic == topics.TOPOLOGY:
            self.ranks.add(value["rank"])
            self.nodes.add(value.get("node", "?"))
            self.world_size = max(self.world_size, value.get("world_size", 0))
        elif base_topic == topics.PROGRESS:
            self.nodes.add(value.get("node", "?"))
            per_rank = self.completed.setdefault(value["comm"], {})
            for r in value.get("ranks", ()):
                per_rank[r["rank"]] = r["completed"]
                self.ranks.add(r["rank"])
        elif base_topic == topics.ALERTS:
            before = self.incidents.get(value["incident"], {}).get("status")
            self.incidents[value["incident"]] = value
            return before != value.get("status") or value.get("status") == "update"
        return False

    def open_incidents(self) -> list[dict[str, Any]]:
        return [i for i in self.incidents.values() if i.get("status") != "resolved"]

    def progress_lines(self) -> list[str]:
        by_kind: dict[str, list[tuple[int, str]]] = {}
        for comm, per_rank in self.completed.items():
            if per_rank:
                name = self.comm_names.get(comm, comm)
                by_kind.setdefault(comm_kind(name), []).append((min(per_rank.values()), name))
        lines = []
        for kind in sorted(by_kind):
            groups = by_kind[kind]
            lo, slowest = min(groups)
            hi = max(g[0] for g in groups)
            if hi < 0:
                lines.append(f"  {kind:<3} {len(groups)} group(s)  no collectives (send/recv only)")
                continue
            lines.append(f"  {kind:<3} {len(groups)} group(s)  completed seq {lo}..{hi}  (slowest {slowest} at {lo})")
        return lines

    def incident_line(self, inc: dict[str, Any]) -> str:
        culprits = ",".join(map(str, inc.get("culprit_ranks") or [])) or "-"
        nodes = ",".join(inc.get("culprit_nodes") or []) or "-"
        return (f"  {inc.get('severity', '?')} {inc.get('kind', '?'):<10} {inc.get('status', '?'):<8} "
                f"culprit ranks {culprits} nodes {nodes}: {inc.get('summary', '')}")

    def render(self) -> str:
        t = (self.last_ts_ns - self.first_ts_ns) / 1e9 if self.first_ts_ns else 0.0
        world = self.world_size or len(self.ranks)
        lines = [f"job {self.job}   t={t:6.1f} s   ranks {len(self.ranks)}/{world}   nodes {len(self.nodes)}",
                 "progress:"]
        lines += self.progress_lines() or ["  (no heartbeats yet)"]
        opened = self.open_incidents()
        lines.append(f"open incidents: {len(opened)}")
        lines += [self.incident_line(i) for i in opened]
        return "\n".join(lines)
