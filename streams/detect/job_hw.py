"""Stage 2's slow-link and hardware rules for one job, mixed into `JobStage`.

- `slow_link` (P2 naming the nodes of the link; P3 naming no node when the slow comms all
  span the same nodes and nothing tells their links apart, unless the nodes' InfiniBand
  symbol errors rose lately on one or two of them: those are named).
- `hw_fault` (XID / ECC deltas, SM clock far below the job's, a GPU that stops answering
  NVML, a completion path stuck while the job still progresses).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commwatch.streams.detect.job_stage import JobState

HW_CLOCK_RATIO = 0.85  # SM clock below this share of the job's median is an anomaly
HW_HOLD_NS = 10_000_000_000  # a hardware anomaly this old with no slowdown is a hw_fault
STUCK_HW_NS = 30_000_000_000  # a stuck completion path while the job progresses: a hw_fault after this
IB_ERRORS_RECENT_NS = 60_000_000_000  # a node whose IB symbol errors rose this recently is a slow link's suspect


class HwRules:
    """The slow_link and hw_fault rules of `JobStage`."""

    @staticmethod
    def _link_open(js: JobState) -> bool:
        """Whether a slow link's incident is open: it explains the job's slowdown (generator
        D's slow NIC drawn with 10: its P2 open, the job's 24 % slowdown was also reported as
        unexplained, P3)."""
        return any(key[0] == "slow_link" for key in js.book.open)

    @staticmethod
    def _link_key(js: JobState, nodes: list[str]) -> tuple:
        """The incident key of a slow link between `nodes`: an open slow-link incident of any
        of them, as its nodes are narrowed down or widened (one incident per fault), else
        theirs. Generator D's slow NIC drawn with 10: its node pair named P2, then that node
        alone in a second P2 a second later, both open ten seconds."""
        for key, inc in js.book.open.items():
            if key[0] == "slow_link" and set(key[1]) & set(nodes):
                return key
        return ("slow_link", tuple(nodes))

    @classmethod
    def _slow_link(cls, js: JobState, links: list[dict], nodes: list[str], now_ns: int, out: list,
                   rank: int | None = None) -> None:
        """`rank`: the one rank every slow comm holds (`SlowTracker.slow_links`): its own path."""
        evidence: dict = {"comms": links[:16]}
        summary = f"transfers slow on {len(links)} comm(s) spanning {', '.join(nodes)}; no rank is slow"
        if all(h["nodes"] == nodes for h in links) and len(nodes) == 1:
            summary = (f"transfers slow on {len(links)} comm(s) inside {nodes[0]} (its NVLink, NVSwitch or PCIe "
                       f"path); no rank is slow")
        erring = [n for n in nodes if now_ns - js.ib_errors.get(n, (0, -IB_ERRORS_RECENT_NS))[1] < IB_ERRORS_RECENT_NS]
        if len(nodes) > 2 and 1 <= len(erring) <= 2:  # the nodes' link counters tell which link
            evidence.update(candidate_nodes=nodes, ib_symbol_errors={n: js.ib_errors[n][0] for n in erring})
            summary = (f"transfers slow on {len(links)} comm(s) spanning {len(nodes)} nodes; no rank is slow, "
                       f"and InfiniBand symbol errors rose on {', '.join(erring)} only")
            nodes = erring
        if rank is not None:
            evidence["rank"] = rank
            summary = (f"transfers slow on {len(links)} comm(s), rank {rank} the one member they all share: its own "
                       f"path (its comm kernels under contention, its PCIe or its NIC rail); no rank computes slower")
        if len(nodes) <= 2:
            out.extend(js.book.assert_(
                cls._link_key(js, nodes), now_ns, kind="slow_link", severity="P2",
                culprit_ranks=[rank] if rank is not None else [],
                culprit_nodes=nodes, comm=links[0]["comm"], summary=summary, evidence=evidence,
                id_hint=f"{'-'.join(nodes)}-{now_ns}"))
        else:  # every slow comm spans the same nodes: which of their links is slow is not known
            out.extend(js.book.assert_(
                cls._link_key(js, nodes), now_ns, kind="slow_link", severity="P3", culprit_ranks=[],
                culprit_nodes=[], comm=links[0]["comm"],
                summary=f"transfers slow on {len(links)} comm(s) spanning {', '.join(nodes)}; no rank is slow, "
                        f"and no comm tells which of their links it is",
                evidence={"comms": links[:16], "candidate_nodes": nodes}, id_hint=f"{'-'.join(nodes)}-{now_ns}"))

    def _sm_clocks(self, js: JobState) -> dict[int, float]:
        return {r: s["sm_clock_mhz"] for (_, r), s in js.hw.items() if r >= 0 and s.get("sm_clock_mhz")}

    def _hw(self, js: JobState, now_ns: int, out: list) -> None:
        clocks = self._sm_clocks(js)
        med = statistics.median(clocks.values()) if len(clocks) >= 4 else 0.0
        slow_ranks = {r for inc in js.book.of_kind("slow_rank") for r in inc.culprit_ranks}
        hung = set(js.book.open[("hang",)].culprit_ranks) if ("hang",) in js.book.open else set()
        for (node, rank), s in sorted(js.hw.items()):
            if rank in slow_ranks:
                continue
            why = []
            if s.get("xid"):
                why.append(f"XID {s['xid']}")
            if s.get("ecc_dbe"):
                why.append(f"{s['ecc_dbe']} new ECC double-bit errors")
            if s.get("nvml_timeout"):
                why.append("the GPU stopped answering NVML")
            clock = s.get("sm_clock_mhz")
            if med and clock and rank >= 0 and clock < HW_CLOCK_RATIO * med:
                why.append(f"SM clock {clock:.0f} MHz vs {med:.0f} MHz on peers")
            if not why:
                js.hw_since.pop((node, rank), None)
                continue
            since = js.hw_since.setdefault((node, rank), now_ns)
            if now_ns - since < HW_HOLD_NS and not (s.get("xid") or s.get("ecc_dbe") or s.get("nvml_timeout")):
                continue  # give a slowdown time to show: then it is a slow_rank with evidence
            sev = "P2" if s.get("xid") or s.get("ecc_dbe") or s.get("nvml_timeout") else "P3"
            out.extend(js.book.assert_(
                ("hw_fault", node, rank), now_ns, kind="hw_fault", severity=sev,
                culprit_ranks=[rank] if rank >= 0 else [], culprit_nodes=[node], comm="",
                summary=f"{node}{f' rank {rank}' if rank >= 0 else ''}: {'; '.join(why)}",
                evidence={k: s[k] for k in ("sm_clock_mhz", "throttle_reasons", "xid", "ecc_dbe", "temp_c",
                                            "nvml_timeout") if k in s},
                id_hint=f"{node}-{rank}-{now_ns}"))
        for rank, (done, peers, comm) in sorted(self._stuck(js, now_ns).items()):
            if rank in hung:
                continue
            since = js.stuck_since.setdefault(rank, now_ns)
            if now_ns - since < STUCK_HW_NS:
                continue
            node = js.node_of.get(rank, "")
            out.extend(js.book.assert_(
                ("completion_stuck", rank), now_ns, kind="hw_fault", severity="P2", culprit_ranks=[rank],
                culprit_nodes=[node] if node else [], comm=comm,
                summary=f"rank {rank}: completions stopped at #{done} while its peers completed #{peers} on comm "
                        f"{comm[:4]}..; the job still progresses (GPU or driver fault suspected)",
                evidence={"completed": done, "peers_completed": peers, "comm": comm}, id_hint=f"{rank}-{now_ns}"))
        js.stuck_since = {r: t for r, t in js.stuck_since.items() if r in self._stuck(js, now_ns)}
