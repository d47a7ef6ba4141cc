"""Slow hosts under host-enqueue probes: the rank whose enqueue the job's calls wait for.

A host-enqueue probe (ENQUEUED records: the hook on NCCL without CUDA events, the plugin
without GPU timing) gives no device time, so nothing here can see a GPU computing slower.
It does see a host that cannot keep up: each window of a collective comm says, per member,
the share of instances it *gated* (`windows.enqueue_gate`: the call completed at once after
its host enqueued it, while every other member had enqueued it long before). Hosts run
ahead of their GPUs, so in a healthy job nobody gates; a launch-bound host (CPU contention,
a noisy neighbour) gates every call of every comm it is in, and its peers' GPUs idle.

A rank is found when, in one of its comms, it gated at least `GATE_SHARE` of the instances
of every window for `GATE_HOLD_NS` of event time (two windows at least, `GATE_MIN_INSTANCES`
instances in all): a host pause (a garbage collection) gates the calls after it until its
host runs ahead again, not a second of windows. One window does not decide, however many
calls it gated: the seventh generator's host stalling 2 s every 10 s under host-enqueue
gated 27 of one window's 32 calls after each stall, and was named P3 "its host is the
bottleneck" when a window of eight gated calls was let decide. Its peers in those comms
wait for it (`waits_for`): the iteration phases they report, which hold those waits, name
none of them.

A host slow in one part of its step only (its CPU optimizer, ZeRO-Offload's Adam on the host)
gates the calls after that part and no other: a share of each window under `GATE_SHARE`. It is
found too when it alone gated a call in every window of its comm for `STEADY_WINDOWS` windows
in a row spanning `STEADY_HOLD_NS` (a pause gates the windows after it, not every window for
seconds). The independent host-stall generator's data-parallel job (128 ranks, host-enqueue)
whose rank 72 ran its CPU Adam 1.6x slower: the job's steps 28 % longer, 127 ranks waiting
0.42 s a step inside the parameter all-gather it enqueued last, 1 or 2 of each window's 6
calls gated by it and none by any other rank; it was a P3 "no rank explains it". What it costs the job is the job's own step-time loss (`StepTracker.slowdown`),
filled in by stage 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GATE_SHARE = 0.6  # a window's instances a rank gated, at least, to count
GATE_HOLD_NS = 1_000_000_000  # gating windows in a row must span this much event time
GATE_MIN_INSTANCES = 4  # ... and hold this many instances in all
GATE_STALE_NS = 5_000_000_000  # a comm with no gating window this long counts no more
STEADY_WINDOWS = 5  # windows in a row in which one member alone gated a call ...
STEADY_HOLD_NS = 4_000_000_000  # ... spanning this much event time: a host slow in part of its step


@dataclass
class _Streak:
    rank: int = -1  # the member that gated every window of the run (-1: none)
    since_ns: int = 0  # the first window's end
    last_ns: int = 0  # the latest window's end
    windows: int = 0
    instances: int = 0
    turn_ms: float = 0.0  # its latest median enqueue-to-completion
    peers_turn_ms: float = 0.0  # the other members' (median)
    members: list[int] = field(default_factory=list)


class HostGate:
    """Per job: gating runs per collective comm (`window`), slow hosts found (`evaluate`)."""

    def __init__(self) -> None:
        self.streaks: dict[str, _Streak] = {}
        self.steady: dict[str, _Streak] = {}  # runs of windows one member alone gated some of
        self.fresh = False  # a run began to hold since the last evaluation

    def window(self, rep: dict) -> None:
        """A collective window report; only host-enqueue ones carry `gate`."""
        gate = rep.get("gate")
        if not gate:
            self.streaks.pop(rep["comm"], None)
            self.steady.pop(rep["comm"], None)
            return
        ranks = rep["ranks"]
        top = max(range(len(gate)), key=gate.__getitem__)
        # a run of windows in which it gated `GATE_SHARE` of the instances; and one of windows in
        # which it alone gated some (a host slow in part of its step)
        self._extend(self.streaks, rep, top, gate[top] >= GATE_SHARE and ranks[top] >= 0, self._holds)
        alone = gate[top] > 0 and ranks[top] >= 0 and sum(1 for g in gate if g > 0) == 1
        self._extend(self.steady, rep, top, alone, self._steady_holds)

    def _extend(self, runs: dict[str, _Streak], rep: dict, top: int, counts: bool, holds) -> None:
        """One window of a comm's run: extended by member `top` where the window `counts`,
        else ended; stage 2 evaluates at once when the run begins to hold (`holds`), not at
        its next periodic evaluation."""
        st = runs.setdefault(rep["comm"], _Streak())
        ranks, ts = rep["ranks"], int(rep["ts_ns"])
        if not counts:
            st.rank, st.windows, st.instances = -1, 0, 0
            st.last_ns = ts
            return
        if st.rank != ranks[top]:
            st.rank, st.since_ns, st.windows, st.instances = ranks[top], ts, 0, 0
        held = holds(st)
        st.windows += 1
        st.instances += int(rep.get("gate_n", 0))
        st.last_ns = ts
        self._turns(st, rep, top)
        if not held and holds(st):
            self.fresh = True

    @staticmethod
    def _turns(st: _Streak, rep: dict, top: int) -> None:
        ranks, turns = rep["ranks"], rep.get("turn_ms") or []
        if len(turns) == len(ranks):
            others = sorted(t for i, t in enumerate(turns) if i != top and t is not None)
            st.turn_ms = float(turns[top])
            st.peers_turn_ms = float(others[len(others) // 2]) if others else 0.0
        st.members = list(ranks)

    @staticmethod
    def _holds(st: _Streak) -> bool:
        return (st.rank >= 0 and st.windows >= 2 and st.instances >= GATE_MIN_INSTANCES
                and st.last_ns - st.since_ns >= GATE_HOLD_NS)

    @staticmethod
    def _steady_holds(st: _Streak) -> bool:
        return st.rank >= 0 and st.windows >= STEADY_WINDOWS and st.last_ns - st.since_ns >= STEADY_HOLD_NS

    def _held(self, now_ns: int) -> dict[str, _Streak]:
        held = {c: st for c, st in self.streaks.items() if self._holds(st) and now_ns - st.last_ns <= GATE_STALE_NS}
        for c, st in self.steady.items():
            if c not in held and self._steady_holds(st) and now_ns - st.last_ns <= GATE_STALE_NS:
                held[c] = st
        return held

    def evaluate(self, now_ns: int) -> dict[int, dict]:
        """Ranks found gating now -> evidence (stage 2 sets `impact` and `slowdown`)."""
        self.fresh = False
        out: dict[int, dict] = {}
        for c, st in sorted(self._held(now_ns).items(), key=lambda x: -x[1].instances):
            if st.rank not in out:
                out[st.rank] = {"signal": "host", "comm": c, "onset_ns": st.since_ns, "ratio": 1.0, "slowdown": 0.0,
                                "impact": 0.0, "turn_ms": round(st.turn_ms, 1),
                                "peers_turn_ms": round(st.peers_turn_ms, 1), "gated_windows": st.windows}
        return out

    def waits_for(self, rank: int, now_ns: int) -> bool:
        """Whether `rank` shares a comm whose calls wait for another member's host now."""
        return any(st.rank != rank and rank in st.members for st in self._held(now_ns).values())
