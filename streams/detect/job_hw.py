"""Stage 2's slow-link and hardware rules for one job, mixed into `JobStage`.

- `slow_link` (P2 naming the nodes of the link; P3 naming no node when the slow comms all
  span the same nodes and nothing tells their links apart, unless the nodes' InfiniBand
  symbol errors rose lately on one or two of them: those are named).
- `hw_fault` (XID / ECC deltas, SM clock far below the job's, a GPU that stops answering
  NVML, a completion path stuck while the job still progresses). GPUs whose clocks fell at
  once (`HW_AT_ONCE_NS`: a rack's power cap, a node's cooling) are one notice naming them all.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commwatch.streams.detect.job_stage import JobState

HW_CLOCK_RATIO = 0.85  # SM clock below this share of the job's median is an anomaly
HW_HOLD_NS = 10_000_000_000  # a hardware anomaly this old with no slowdown is a hw_fault
STUCK_HW_NS = 30_000_000_000  # a stuck completion path while the job progresses: a hw_fault after this
IB_ERRORS_RECENT_NS = 60_000_000_000  # a node whose IB symbol errors rose this recently is a link's suspect
HW_AT_ONCE_NS = 5_000_000_000  # GPUs whose clocks fell this close together are one notice
HW_EVIDENCE = ("sm_clock_mhz", "throttle_reasons", "xid", "ecc_dbe", "temp_c", "nvml_timeout")  # a GPU's notice's evidence


class HwRules:
    """The slow_link and hw_fault rules of `JobStage`."""

    @staticmethod
    def _link_open(js: JobState) -> bool:
        """Whether a slow link's incident is open: it explains the job's slowdown (generator
        D's slow NIC drawn with 10: its P2 open, the job's 24 % slowdown was also reported as
        unexplained, P3)."""
        return any(key[0] == "slow_link" for key in js.book.open)

    @staticmethod
    def _ib_erring(js: JobState, nodes: list[str], now_ns: int) -> list[str]:
        """Of `nodes`, those whose InfiniBand symbol errors rose within `IB_ERRORS_RECENT_NS`."""
        return [n for n in nodes if now_ns - js.ib_errors.get(n, (0, -IB_ERRORS_RECENT_NS))[1] < IB_ERRORS_RECENT_NS]

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
        erring = cls._ib_erring(js, nodes, now_ns)
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
        low: dict[tuple[str, int], int] = {}  # GPUs whose only anomaly is a low clock, held: -> since
        for (node, rank), s in sorted(js.hw.items()):
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
            since = js.hw_since.setdefault((node, rank), now_ns)  # kept for slow ranks too (`_clock_mates`)
            if rank in slow_ranks:
                continue
            if not (s.get("xid") or s.get("ecc_dbe") or s.get("nvml_timeout")):
                if now_ns - since >= HW_HOLD_NS:  # a slowdown had time to show: then it is a slow_rank with evidence
                    low[(node, rank)] = since
                continue
            out.extend(js.book.assert_(
                ("hw_fault", node, rank), now_ns, kind="hw_fault", severity="P2",
                culprit_ranks=[rank] if rank >= 0 else [], culprit_nodes=[node], comm="",
                summary=f"{node}{f' rank {rank}' if rank >= 0 else ''}: {'; '.join(why)}",
                evidence={k: s[k] for k in HW_EVIDENCE if k in s}, id_hint=f"{node}-{rank}-{now_ns}"))
        for key, inc in list(js.book.open.items()):  # named slow since: the clocks are that incident's evidence
            if key[0] == "hw_fault" and len(key) == 3 and inc.culprit_ranks and set(inc.culprit_ranks) <= slow_ranks:
                out.extend(js.book.resolve(key, now_ns, "its GPUs are named in a slow_rank incident, whose evidence "
                                                        "holds their clocks"))
        # clocks that fell at once (a rack's or a node's power cap, its cooling): one notice for them
        groups = js.book.together(low, lambda _: HW_AT_ONCE_NS, js.hw_with, lambda g: ("hw_fault",) + g)
        for (node, rank), gpus in groups.items():
            if len(gpus) == 1:
                s = js.hw[gpus[0]]
                summary = f"{node} rank {rank}: SM clock {s['sm_clock_mhz']:.0f} MHz vs {med:.0f} MHz on peers"
                evidence = {k: s[k] for k in HW_EVIDENCE if k in s}
            else:
                mhz = {r: js.hw[(n, r)]["sm_clock_mhz"] for n, r in gpus}
                nodes = sorted({n for n, _ in gpus})
                reasons = sorted({str(js.hw[g]["throttle_reasons"]) for g in gpus if "throttle_reasons" in js.hw[g]})
                summary = (f"SM clocks fell at once on {len(gpus)} GPUs of {len(nodes)} node(s) ({', '.join(nodes)}): "
                           f"{min(mhz.values()):.0f}-{max(mhz.values()):.0f} MHz vs {med:.0f} MHz on peers; a cause "
                           f"they share (power capping, cooling) is likely")
                evidence = {"sm_clock_mhz": {str(r): v for r, v in sorted(mhz.items())},
                            "peers_sm_clock_mhz": med, "throttle_reasons": reasons,
                            "temp_c": max((js.hw[g].get("temp_c") or 0) for g in gpus)}
            out.extend(js.book.assert_(
                ("hw_fault", node, rank), now_ns, kind="hw_fault", severity="P3",
                culprit_ranks=sorted(r for _, r in gpus), culprit_nodes=sorted({n for n, _ in gpus}), comm="",
                summary=summary, evidence=evidence, id_hint=f"{node}-{rank}-{now_ns}"))
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
