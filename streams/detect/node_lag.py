"""How far behind its job a node's clock runs, learnt from when its heartbeats arrive.

A job's now is its newest event time (`clock.py`). A heartbeat is dated by its node's clock,
so a node whose clock runs 5 s behind the job's others sends heartbeats that look 5 s old on
arrival: dated by their stamps, it would seem silent for 5 s at every moment (a P0
`node_lost` for a healthy node; its calls would seem to wait 5 s longer than they do), and
a node whose clock runs ahead would make every other one seem so. Dated at the job's now
instead, a backlog read at speed would be misjudged: a poll moves the job's clock to its
newest message before the heartbeats early in it are fed.

So a heartbeat's *lag* is taken against the reference clock it was received by (the
worker's wall clock live), not the job's: its reference time minus its stamp, the node's
clock offset plus its way through the pipeline. A node's lag is kept as its smallest,
forgotten at `FORGET` of the rate the reference time passes (a clock set anew is followed);
the job's *base* is the smallest of its nodes' lags; a node's *skew* is its lag above the
base. A clock behind shows in every heartbeat of that node from its first; a backlog in
some heartbeats of every node (each node heartbeats every communicator, and those are spread
over partitions), so it moves the base or nobody. Call batches are learnt from too, keyed by
their first rank (a batch holds one node's calls), so a node's calls are on the job's clock
from its first batch, before its first heartbeat. A skew under `SKEW_MIN_NS` is taken as
none: clocks that agree that well are used as they are (the detectors estimate small
offsets from the calls themselves). Replay of a capture sorted by stamp has no arrival
times: there every lag is about 0, and stamps are used as they are.

Once a job is `ESTABLISHED_NS` old, its base no longer drops by `SKEW_MIN_NS` or more at once:
a node whose clock is set seconds ahead mid-run (time sync stepping it), or that joins with
one, gets a negative skew (its stamps are moved back onto the job's clock) rather than
moving the job's clock, and every other node's and every call's time with it (they would
all seem seconds older at once: a P0 `node_lost` for a healthy node). Its `ahead` (how far
it was moved back) shrinks as its lag rises again (its clock set back). A node whose every
lag for `SET_BACK_NS` was `SKEW_MIN_NS` or more above its smallest had its clock set back:
its smallest is taken from those at once (forgotten at half the rate time passes, it took
10 s to follow a 5 s step, and the node seemed silent meanwhile: a P0 `node_lost` live); a
heartbeat late once, or a few late within a shorter time, moves it no more than before.
Until the lag of a node set ahead is learnt (live, from its next heartbeat; its call
batches are not learnt from), the job's clocks take none of its stamps as more than
`SKEW_MIN_NS` ahead of the job's now (`Detector._clock_top`): one poll of its batches would
move the job's clock for good, every comm would then seem stale, and a hang in it went
unalerted.

A worker reads a backlog in polls, all received at one reference time: the lags of a
poll are learnt first (`observe`), its messages dated after (`skew`), so the early messages
of a poll are dated with what the freshest ones say of their node.

>>> lags = NodeLags()
>>> S = 10**9
>>> [lags.observe("j", n, lag, S) for n, lag in (("a", 0), ("b", 5 * S), ("a", S // 10), ("c", S // 10))]
[0, 5000000000, 0, 0]
>>> lags.observe("j", "b", 7 * S, 2 * S)     # a late one: its lag stays about its smallest
5500000000
>>> lags.observe("j", "a", -5 * S, 9 * S)    # a's clock set 5 s ahead: a is moved back, not the others
-5000000000
>>> lags.skew("j", "c")
0
"""

from __future__ import annotations

FORGET = 0.5
SAMPLE_NS = 100_000_000
SKEW_MIN_NS = 500_000_000
BASE_REFRESH_NS = 1_000_000_000
ESTABLISHED_NS = 5_000_000_000
SET_BACK_NS = 1_500_000_000


class NodeLags:
    def __init__(self) -> None:
        # job -> node or rank -> [when, smallest lag, ahead, since when every lag was late, the least of those]
        self._lag: dict[str, dict[str | int, list[int]]] = {}
        self._base: dict[str, list[int]] = {}  # job -> [when computed, base, first seen]

    def observe(self, job: str, node: str | int, lag: int, ref_ns: int) -> int:
        """One heartbeat of `node` (or call batch of rank `node`) received `lag` ns after its
        stamp (negative when its clock runs ahead of the reference), at reference time
        `ref_ns`; returns the node's skew (`skew`). A node observed again within `SAMPLE_NS`
        is updated only when its lag is a new smallest (its forgetting waits: it is the same)."""
        nodes = self._lag.get(job)
        if nodes is None:
            nodes = self._lag[job] = {}
        e = nodes.get(node)
        if e is None:
            e = nodes[node] = [ref_ns, lag, 0, 0, 0]
        else:
            if lag < e[1] + SKEW_MIN_NS:
                e[3] = 0
            elif not e[3]:
                e[3], e[4] = ref_ns, lag
            else:
                e[4] = min(e[4], lag)
            if e[3] and ref_ns - e[3] >= SET_BACK_NS:  # every lag since late: its clock was set back
                e[0], e[1], e[3] = ref_ns, e[4], 0
            elif lag < e[1] or ref_ns - e[0] >= SAMPLE_NS:
                e[1] = min(lag, e[1] + int((ref_ns - e[0]) * FORGET))
                e[0] = ref_ns
        b = self._base.get(job)
        if b is None:
            b = self._base[job] = [ref_ns, lag, ref_ns]
        elif e[2] or (e[1] < b[1] - SKEW_MIN_NS and ref_ns - b[2] >= ESTABLISHED_NS):
            e[2] = max(0, b[1] - e[1])  # ahead of an established job's clock: moved back onto it
        if ref_ns - b[0] >= BASE_REFRESH_NS:
            b[0], b[1] = ref_ns, min(v[1] + v[2] for v in nodes.values())
        elif e[1] + e[2] < b[1]:
            b[1] = e[1] + e[2]
        d = e[1] - b[1]
        return d if abs(d) >= SKEW_MIN_NS else 0

    def skew(self, job: str, node: str | int) -> int:
        """How far the clock of `node` (or of rank `node`'s node) runs behind the job's
        (negative: ahead, moved back), 0 under `SKEW_MIN_NS` or when it was never observed."""
        nodes = self._lag.get(job)
        e = nodes.get(node) if nodes else None
        if e is None:
            return 0
        d = e[1] - self._base[job][1]
        return d if abs(d) >= SKEW_MIN_NS else 0

    def established(self, job: str, ref_ns: int) -> bool:
        """Whether the job's base no longer drops at once (`ESTABLISHED_NS` after its first lag)."""
        b = self._base.get(job)
        return b is not None and ref_ns - b[2] >= ESTABLISHED_NS

    def knows(self, job: str, node: str | int) -> bool:
        nodes = self._lag.get(job)
        return nodes is not None and node in nodes

    def keep(self, job: str, nodes: set) -> None:
        """Forget the job's nodes and ranks not in `nodes`."""
        have = self._lag.get(job)
        if have:
            for node in [n for n in have if n not in nodes]:
                del have[node]

    def forget(self, job: str) -> None:
        self._lag.pop(job, None)
        self._base.pop(job, None)
