"""Slow ranks, pipeline imbalance and slow links from stage-1 windows (stage 2, one job).

The culprit of a slowdown is where the waiting ends: it computes slower than the ranks that
do the same work, while its victims compute as fast as ever and only wait longer. So ranks
are judged by their *busy gaps* (`windows.py`): the time from the end of one call of a comm
to the rank's entry into its next call of that comm, on the rank's own clock (no skew).
Between two instances of a collective comm every member does the same work; between two
recvs of a pipeline comm a stage does the same work in every replica. A rank's ratio in a
comm is its mean gap over the median of its peers' (the other members; for a pipeline comm,
the same stage in the other pipelines); an instance whose gap (the members' median) is over
three times the typical one spans the end of an iteration and holds waits elsewhere: it is
left out for every member (`windows._busy_stats`). Gaps are whole compute segments, so
no window edge cuts them: a victim's gaps stay its own however its pipeline is shifted.

A rank's ratio is taken in its finest comm (the one with the shortest gaps, typically tensor
parallel, else the pipeline, else data parallel): a coarser comm's gaps may hold waits in
other comms (a tensor-parallel peer of a slow rank waits inside its TP calls, which sit in
its pipeline gaps), the finest holds compute only.

- `slow_rank`: judged by the rank model (`rank_model.py`) on the ratio over the latest
  windows (`BUSY_WINDOWS`) and in the newest one. Ranks whose excess is under a quarter of the
  largest one's are its echo and are not named (`dominant`).
- Pipeline imbalance: a whole stage computes `IMBALANCE` more than the other stages (compute
  shares: the time outside calls, summed over the stage's comms, over a long horizon), from
  the start and throughout: tuning advice for the stage, not a faulty rank (`advisories`).
- Where the waiting ends: in a collective comm of `LAG_MEMBERS` or more, a rank is newly
  named only if its peers wait for it there: its mean arrival lag in the comm's newest window
  is `LAG_STAND` times their typical one (`_waited_on`). Between back-to-back calls (FSDP's
  all-gathers, gaps of 2 ms that are launch latency) healthy ranks' ratios stray by 40 %,
  and a rank 2x there for three windows in a row is chance; its peers do not wait for it.
- Slow link: a multi-node comm's transfer time (last arrival to completion) rises well
  above its normal for consecutive windows while none of its ranks is slow.

Ranks with a comm whose records carry no timing (host-enqueue probes) get no ratio here;
their iteration phases (`steps.py`) still can.

A comm's figures are kept in `comm_timing.py`; the stall rule is mixed in from `stalls.py`.
"""

from __future__ import annotations

import statistics
from collections import Counter, deque

import numpy as np

from commwatch.streams.detect.comm_timing import BUSY_WINDOWS, CommTiming
from commwatch.streams.detect.medians import nanmedian as _nanmedian
from commwatch.streams.detect.medians import others_median as _others_median
from commwatch.streams.detect.late import LateArrivals
from commwatch.streams.detect.rank_model import FAST_RATIO, NOISY, RankModel
from commwatch.streams.detect.stalls import STALL_KEEP, StallRules

FRESH_WINDOWS = 4.0  # a comm's window older than this many of its own intervals (and 5 s) is stale
MIN_COMPUTE = 0.02
IMBALANCE = 0.2  # a stage computing this much more than the others ...
IMBALANCE_EVALS = 10  # ... in most of its first evaluations, and this many, is an advisory ...
IMBALANCE_MIN_COMPUTE = 0.1  # ... where the other stages compute this share of their time at least (`advisories`)
HORIZON_NS = 10_000_000_000  # compute shares (advisory) are summed over this much of the latest windows
MIN_BUSY_MS = 1.0  # shorter compute intervals between a comm's calls are call overhead, not compute
OUTLIER = 3.0  # a class of gaps this many times a rank's typical one spans an iteration's end
MIN_CLASS_COUNT = 4  # a class of pipeline intervals is compared once it holds this many (early passes vary)
ECHO_SHARE = 1 / 3  # a slowdown under this share of the largest one in the job is its echo
STEADY_SHARE = 0.8  # a window in which a rank was slow in this share of the instances is no pause
PAUSE_SHARE = 0.5  # ... and one far slower in all (`FAST_RATIO`) but slow in under this share is one (`_pause`)
NEVER_FINER_NS = 10_000_000_000  # a comm in use this long without compute intervals is nobody's finest
SWITCH = 0.8  # a rank is judged in another comm once its intervals there are this much of those where it is
BLIND_WINDOWS = 4  # new windows of its finer comm without a figure for a rank before it is judged in a coarser one
ITSELF_APART = 1.5  # a peer found this many times a rank's excess, slower in a group they share: it waits for it
GROUP_HOLD_NS = 3_000_000_000  # a group seems slower as a whole this long before it is judged as one
GROUP_FIRST_MISSES = 2  # evaluations in a row under half the threshold that end how long a group has seemed slower
BETWEEN_REPLICAS = True  # a point-to-point comm between data-parallel replicas is no pipeline (`_between_replicas`)
FOUND = "found"  # `slow_groups` state of a group judged as one
LINK_FACTOR = 1.5
LINK_MIN_MS = 1.0
LINK_GRACE = 3
P2P_LINK_MIN_MS = 0.2  # a P2P transfer (one message, both ends' own clocks) is a cleaner figure than a collective's
MAX_LINK_CHANNELS = 4096  # P2P channels whose transfers are followed, per comm
SIZED_LINKS = True  # a P2P channel's normal transfer is for its normal message size (`_sized`)
SIZE_ALIKE = 2.0  # messages within this factor of a channel's normal size teach its normal
LEARN = 0.1
NOISE_MIN = 2  # members whose ratios' moves are known (`SlowTracker.noise`) before a kind's spread is known
NOISE_MEMBERS = 8  # comms of one stage and size, pooled: their ratios' own spread counts too
NOISE_HOLD_NS = 10_000_000_000  # a comm's spread, once seen, holds this long (`noise`)
NOISE_OWN = 16  # a comm of this many members knows its own spread (`SlowTracker.noise`)
LEVEL_MOVES = 3.0  # levels apart count as spread up to this many times the members' moves, once known (`noise`)
LAG_MEMBERS = 8  # in a collective comm of this many members, a rank newly named slow ...
LAG_STAND = 4.0  # ... arrives this many times later than its peers typically do (`_waited_on`) ...
LAG_FLOOR_MS = 0.05  # ... counting their typical lag as this much at least
FINE_SHARE = 0.25  # a comm whose intervals are at most this share of a step shows what a rank computes (`_normal_elsewhere`) ...
ELSEWHERE_SPREADS = 3.0  # ... like its peers within half slow_impact or this many of that comm's spreads (at most slow_impact)
FOUND_COMM_APART = True  # a rank's waits for a slower peer are not sought in the comm it was found in (`_waiting_on_slower`)
MEASURED_SHARE = 0.01  # a rank is named by a comm whose compared intervals fill this share of its peers' newest window (`_measured`)


def _spread(r: np.ndarray) -> float:
    """Ratios around their median, as a standard deviation (1.4826 x the median absolute
    deviation); 0 for fewer than 6."""
    if len(r) < 6:
        return 0.0
    return float(1.4826 * np.median(np.abs(r - np.median(r))))


def coords_but(c: dict, axis: str) -> tuple:
    """A rank's coordinates but `axis`: alike for the ranks of its group along that axis
    (its tensor-parallel peers for `tp`, its data-parallel ones for `dp`)."""
    return tuple(sorted((k, v) for k, v in c.items() if k != axis))


def dominant(found: dict[int, dict], keep: set[int] = frozenset()) -> dict[int, dict]:
    """Drop ranks whose excess is a small fraction of the largest one's: a large slowdown
    perturbs its victims (their schedules shift), and what they show is its echo, not a fault
    of theirs. Ranks already open stay (hysteresis)."""
    if len(found) < 2:
        return found
    top = max(ev["ratio"] for ev in found.values()) - 1.0
    return {r: ev for r, ev in found.items() if r in keep or ev["ratio"] - 1.0 >= top * ECHO_SHARE}


def _median(xs: list[float]) -> float:
    """`np.median` of a short list of finite numbers (the same value, without numpy's ~40 us
    per call: groups of comms take it once per member and evaluation)."""
    return float(statistics.median(xs)) if xs else 0.0



def _sized(size: float, normal: float) -> tuple[float, bool]:
    """How much longer than its normal a P2P channel's transfer of `size` bytes may take (its
    normal is for its normal size: a larger message takes at most proportionally longer;
    a smaller one no less than the normal), and whether the size is alike enough to learn
    from. A serving engine's pipeline sends carry a decode step's activations (16 KiB) or a
    chunked prefill's (megabytes), its KV transfers a prompt's cache: the sixteenth
    generator's healthy engines were P2 `slow_link`s a minute apart, 1.37 ms against a normal
    0.033 ms. Sizes a probe does not give (0) compare as alike."""
    if size <= 0 or normal <= 0:
        return 1.0, True
    ratio = size / normal
    return max(1.0, ratio), 1 / SIZE_ALIKE <= ratio <= SIZE_ALIKE

class SlowTracker(StallRules):
    def __init__(self, slow_impact: float, slow_windows: int, model: str = "river"):
        self.slow_impact = slow_impact
        self.slow_windows = slow_windows
        self.comms: dict[str, CommTiming] = {}
        self.models: dict[int, RankModel] = {}
        self.judged_in: dict[int, str] = {}  # rank -> the comm its ratio is taken in
        self.low_busy: dict[tuple[int, str], float] = {}  # (rank, comm) -> its shortest mean busy gap yet
        self.blind: dict[int, tuple[str, int, int]] = {}  # rank -> (its finer comm, that comm's latest window,
        # how many of its windows in a row gave the rank no figure): `evaluate`
        self.slow_groups: dict[str, tuple | str] = {}  # comm -> (since when its members seem slower together,
        # corroborated since), or FOUND: judged as a group (`_slow_groups`)
        self.group_since: dict[str, int] = {}  # comm judged as a group -> since when it seemed slower
        self.group_first: dict[str, list[int]] = {}  # comm -> [since when over half the threshold against its
        # siblings, evaluations in a row under it since] (`_slow_groups`, `group_began`)
        self.model_kind = model
        self.ratio: dict[int, float] = {}
        self.compute: dict[int, float] = {}
        self.stage_evals: dict[int, list[int]] = {}  # stage -> [evaluations imbalanced, evaluations]
        self.stage_ratio: dict[int, float] = {}
        self.step_ns = 0.0  # the job's median step (set by stage 2): long steps, rare windows
        self.fresh = False  # a window that may decide alone arrived since the last evaluation (`_hot`)
        self.in_use_since: dict[str, int] = {}  # comm -> when an evaluation first saw it in use
        self.due_ns = 0  # when time alone may conclude a rank hot over enough windows (0: none)
        self.stall_log: dict[tuple[int, str], deque] = {}  # (rank, comm) -> (window end, ms) of its windows with stalls
        self.late = LateArrivals(slow_impact)  # ranks late at every call of a job-wide comm (`late.py`)
        self.open_ranks: set[int] = set()  # ranks with an incident open, as of the latest evaluation
        self.long: dict[str, dict[int, tuple]] = {}  # the latest evaluation's figures over each comm's horizon
        self.coords: dict[int, dict] = {}  # the job's ranks' coordinates, as the latest evaluation had them
    # --- inputs -----------------------------------------------------------------------
    def _timing(self, rep: dict, p2p: bool) -> CommTiming:
        ct = self.comms.get(rep["comm"])
        if ct is None or ct.ranks != rep["ranks"] or ct.p2p != p2p:
            ct = self.comms[rep["comm"]] = CommTiming(list(rep["ranks"]), p2p)
        if ct.ts_ns:
            gap = rep["ts_ns"] - ct.ts_ns
            ct.interval_ns = gap if ct.interval_ns == 0 else ct.interval_ns + 0.2 * (gap - ct.interval_ns)
        ct.ts_ns = rep["ts_ns"]
        ct.windows += 1
        ct.calls += int(rep.get("instances") or 0)
        ct.nodes = rep.get("nodes") or ct.nodes
        return ct

    @staticmethod
    def _horizon(ct: CommTiming, ts_ns: int, span_ns: float, inside: list[float]) -> None:
        """Inside shares over the latest windows covering `HORIZON_NS`, weighted by span."""
        ct.hist.append((ts_ns, float(span_ns), np.asarray(inside, float)))
        total = 0.0
        acc = np.zeros(len(inside))
        for t, span, vals in reversed(ct.hist):
            acc += vals * span
            total += span
            if ts_ns - t + span >= HORIZON_NS:
                break
        ct.inside = dict(zip(ct.ranks, (acc / max(total, 1.0)).tolist()))

    def _take(self, ct: CommTiming, rep: dict) -> None:
        ct.timed = True
        self._horizon(ct, rep["ts_ns"], rep["span_ns"], rep["inside"])
        # kept as arrays (a missing figure nan, a missing class minimum inf): evaluated often
        ct.changed()
        share = np.asarray(rep["busy_share"], float)
        if "busy_ms" in rep:
            sums = np.array([np.nan if v is None else v for v in rep["busy_ms"]], float)
            med = np.array([np.nan if v is None else v for v in rep.get("busy_med_ms") or [None] * len(sums)], float)
            ct.busy.append((rep["ts_ns"], sums, np.asarray(rep["busy_n"], float), share, med))
            ct.steady = {r: v for r, v in zip(ct.ranks, rep.get("busy_steady") or ()) if v is not None}
            ct.tail = {r: v for r, v in zip(ct.ranks, rep.get("busy_tail") or ()) if v is not None}
            for r, v in zip(ct.ranks, rep.get("busy_stall") or ()):
                if v is not None:
                    log = self.stall_log.get((r, rep["comm"]))
                    if log is None:
                        log = self.stall_log[(r, rep["comm"])] = deque(maxlen=STALL_KEEP)
                    log.append((rep["ts_ns"], v[1]))
            self.fresh = self.fresh or self._hot(ct, sums, np.asarray(rep["busy_n"], float))
        if "busy_cls_ms" in rep:
            lows = np.array([[np.inf if v is None else v for v in row] for row in rep["busy_cls_ms"]], float)
            ct.classes.append((lows, np.asarray(rep["busy_cls_n"], float)))
            n = len(rep["ranks"])
            ct.busy.append((rep["ts_ns"], np.full(n, np.nan), np.zeros(n), share, np.full(n, np.nan)))
            # a pipeline's window, judged per class of intervals: evaluated at once where a member is hot
            self.fresh = self.fresh or any(m.hot_since for r in ct.ranks if (m := self.models.get(r)) is not None)

    def _hot(self, ct: CommTiming, sums: np.ndarray, counts: np.ndarray) -> bool:
        """Whether a new window of a collective comm may decide a slow rank now: a member
        slower at its end (`tail`), `FAST_RATIO` over the others' median on average, or over
        the threshold while its model is already hot (a second hot window may conclude). It
        is evaluated when it arrives (`fresh`), not at the next periodic evaluation. Any
        member over the threshold would not do: in a job of 1024 ranks some comm nearly
        always shows one 1.1x (evaluated at each, detect took 9 % longer)."""
        if ct.tail:
            return True
        with np.errstate(all="ignore"):
            mean = sums / counts
        if np.isfinite(mean).sum() < 2:
            return False
        with np.errstate(all="ignore"):
            ratio = mean / _others_median(mean[:, None])[:, 0]
        for i in np.nonzero(ratio >= 1.0 + self.slow_impact)[0].tolist():
            m = self.models.get(ct.ranks[i])
            if ratio[i] >= FAST_RATIO or (m is not None and m.hot_since):
                return True
        return False

    def window(self, rep: dict) -> None:
        ct = self._timing(rep, p2p=False)
        if not rep.get("timed"):
            ct.timed, ct.inside = False, None
            ct.hist.clear()
            ct.busy.clear()
            ct.changed()
            return
        self._take(ct, rep)
        ct.lag_ms = dict(zip(rep["ranks"], rep["lag_ms"]))
        ct.bytes_ratio = dict(zip(rep["ranks"], rep["bytes_ratio"])) if "bytes_ratio" in rep else {}
        self.late.window(rep["comm"], rep["ranks"], rep, self.open_ranks)
        xfer = float(rep.get("xfer_ms", 0.0))
        ct.xfer_ms = xfer
        if ct.base_xfer < 0:
            ct.base_xfer = xfer
        elif xfer >= LINK_FACTOR * ct.base_xfer + LINK_MIN_MS and ct.windows > LINK_GRACE:
            ct.link_streak += 1
        else:
            ct.link_streak = 0
            ct.base_xfer += LEARN * (xfer - ct.base_xfer)

    def p2p_window(self, rep: dict) -> None:
        """A P2P comm's window; a collective permute's (`permute`, `windows._permute_busy`) is
        judged as a collective's: each member against the others of its comm."""
        permute = rep.get("permute")
        ct = self._timing(rep, p2p=permute is None)
        ct.permute = permute is not None
        if rep.get("calls", 0) == 0:
            if rep.get("untimed"):
                ct.timed, ct.inside = False, None
                ct.hist.clear()
                ct.busy.clear()
                ct.changed()
            return  # an idle pipeline comm: its last figures stand
        if permute is None:
            self._take(ct, rep)
            ct.crank = rep.get("crank")
        else:
            self._take(ct, {**{k: v for k, v in rep.items() if not k.startswith("busy_")}, **permute})
            ct.calls += int(permute.get("instances") or 0)
        for r, p, ms, size in rep.get("links", ()):
            ch = ct.channels.get((r, p))
            if ch is None:
                if len(ct.channels) >= MAX_LINK_CHANNELS:
                    continue
                ch = ct.channels[(r, p)] = [ms, ms, 0, 0, size, size]
            ch[1], ch[3], ch[5] = ms, ch[3] + 1, size
            scale, alike = _sized(size, ch[4]) if SIZED_LINKS else (1.0, True)
            if ms >= LINK_FACTOR * ch[0] * scale + P2P_LINK_MIN_MS and ch[3] > LINK_GRACE:
                ch[2] += 1
            else:
                ch[2] = 0
                if alike:
                    ch[0] += LEARN * (ms - ch[0])
                    ch[4] += LEARN * (size - ch[4])

    def forget_comm(self, comm: str) -> None:
        self.in_use_since.pop(comm, None)
        self.slow_groups.pop(comm, None)
        self.group_since.pop(comm, None)
        self.group_first.pop(comm, None)
        ct = self.comms.pop(comm, None)
        self.late.forget(comm)
        for r in ct.ranks if ct else ():
            self.low_busy.pop((r, comm), None)
            self.stall_log.pop((r, comm), None)

    # --- evaluation -------------------------------------------------------------------
    def _fresh(self, ct: CommTiming, now_ns: int) -> bool:
        """A comm's latest window is current: within a few of its own intervals, or steps."""
        return now_ns - ct.ts_ns <= max(5e9, FRESH_WINDOWS * ct.interval_ns, 3 * self.step_ns)

    def compute_shares(self, now_ns: int, in_use: dict[str, list[int]] | None = None,
                       stale: set[str] = frozenset()) -> dict[int, float]:
        """Each rank's share of wall time outside communication calls over the horizon (ranks
        all of whose comms in use, `in_use`: comm -> members, are timed and current)."""
        inside: dict[int, float] = {}
        unknown: set[int] = set()
        for comm, members in (in_use or {}).items():
            if comm not in self.comms or comm in stale:
                unknown.update(members)
        for ct in self.comms.values():
            if ct.inside is None or not self._fresh(ct, now_ns):
                unknown.update(ct.ranks)
                continue
            for r, v in ct.inside.items():
                inside[r] = inside.get(r, 0.0) + v
        return {r: max(MIN_COMPUTE, 1.0 - v) for r, v in inside.items() if r not in unknown}

    def _comm_ratios(self, now_ns: int, stale: set[str], latest: bool) -> dict[str, dict[int, tuple]]:
        """Per current comm, per rank: (ratio, its busy, peers' busy, peers' busy share). A
        pipeline comm compares each class of compute interval with the same class of the same
        stage elsewhere, and takes the median of the classes' ratios (the steady passes:
        classes at least half as frequent as the most frequent one)."""
        cur = {c: ct for c, ct in self.comms.items() if ct.timed and ct.busy and c not in stale
               and self._fresh(ct, now_ns)}
        out: dict[str, dict[int, tuple]] = {c: {} for c in cur}
        # pipelines: every member of every current P2P comm, grouped by (comm size, stage)
        rows: list[tuple[str, int, int, tuple]] = []
        lows, counts, shares = [], [], []
        for c, ct in cur.items():
            if ct.p2p and ct.crank and not self._between_replicas(ct):
                lo, cn = ct.class_busy(latest)
                sh = ct.share_of()
                for i, r in enumerate(ct.ranks):
                    if i < len(ct.crank) and ct.crank[i] >= 0:
                        rows.append((c, r, i, (len(ct.ranks), ct.crank[i])))
                        lows.append(lo[:, i])
                        counts.append(cn[:, i])
                        shares.append(sh[i] if i < len(sh) else 0.0)
        if rows:
            lows_a, counts_a, shares_a = np.array(lows), np.array(counts), np.array(shares)
            groups: dict[tuple, list[int]] = {}
            for j, (_, _, _, key) in enumerate(rows):
                groups.setdefault(key, []).append(j)
            by_n: dict[int, list[list[int]]] = {}  # groups of one size evaluated together
            for g, idx in enumerate(groups.values()):
                by_n.setdefault(len(idx), []).append([g] + idx)
            found_rows = []
            for batch in by_n.values():
                order, members = np.array([b[0] for b in batch]), np.array([b[1:] for b in batch])  # groups x n
                lo, cn = lows_a[members], counts_a[members]  # groups x n x classes
                ref = _others_median(lo)  # per member and class: the same stage elsewhere
                ps = _others_median(shares_a[members][..., None])[..., 0]
                top = cn.max(axis=2, keepdims=True)
                typical = _nanmedian(np.where(cn > 0, lo, np.nan), 2)[..., None]
                # a class of gaps far longer than the rank's typical one spans an iteration's
                # end: it holds waits in other comms (data parallel), not compute
                use = ((cn >= top / 2) & (cn >= MIN_CLASS_COUNT) & np.isfinite(lo) & (ref > 0)
                       & (lo <= OUTLIER * typical))
                with np.errstate(all="ignore"):
                    ratio = np.where(use, lo / ref, np.nan)
                med = _nanmedian(ratio, 2)  # one class that spans an iteration's edge does not move it
                gi, mi = np.nonzero(np.isfinite(med))
                fine = np.argmin(np.where(use[gi, mi], lo[gi, mi], np.inf), axis=1)
                figures = zip(med[gi, mi].tolist(), lo[gi, mi, fine].tolist(), ref[gi, mi, fine].tolist(),
                              ps[gi, mi].tolist())
                found_rows.extend(zip(order[gi].tolist(), mi.tolist(), members[gi, mi].tolist(), figures))
            for _, _, j, value in sorted(found_rows, key=lambda x: x[:2]):
                c, r, _, _ = rows[j]
                out[c][r] = value
        # collective comms: each member against the others of its comm; comms of one size at once
        by_size: dict[tuple[int, int], list[tuple[str, np.ndarray, np.ndarray]]] = {}
        for c, ct in cur.items():
            if not ct.p2p:
                busy, share = ct.busy_of(latest), ct.share_of()
                by_size.setdefault((len(busy), len(share)), []).append((c, busy, share))
        for group in by_size.values():
            busy = np.stack([b for _, b, _ in group], axis=1)  # members x comms
            ref = _others_median(busy)
            ps = _others_median(np.stack([s for _, _, s in group], axis=1))
            with np.errstate(all="ignore"):
                ratio = busy / ref
            ok = np.isfinite(busy) & np.isfinite(ref) & (ref > 0)
            ii, jj = np.nonzero(ok)
            for i, j, value in zip(ii.tolist(), jj.tolist(), zip(ratio[ii, jj].tolist(), busy[ii, jj].tolist(),
                                                                  ref[ii, jj].tolist(), ps[ii, jj].tolist())):
                c = group[j][0]
                out[c][cur[c].ranks[i]] = value
        return out

    def _between_replicas(self, ct: CommTiming) -> bool:
        """Whether a point-to-point comm joins data-parallel replicas, by coordinates: its
        members are in one pipeline stage and in different replicas. No pipeline runs between
        replicas: such transfers come when requests do (disaggregated serving's KV caches, from
        a prefill engine to a decode engine, whose tensor-parallel sizes may differ), and the
        intervals between them are a load, not compute. The sixteenth generator's healthy disaggregated job (two
        prefill and two decode engines, TP 4, one stage, 16 two-rank KV comms): compared with
        the other prefill engine's by those intervals, 630 ms against 483, one engine's four
        ranks were named P2 "57 % slower", and as a group P1 "585 % slower" than the decode
        engines."""
        if not BETWEEN_REPLICAS:
            return False
        cs = [self.coords.get(r) for r in ct.ranks]
        if len(cs) < 2 or any(c is None or "dp" not in c for c in cs):
            return False
        return len({c["dp"] for c in cs}) > 1 and len({c.get("pp", 0) for c in cs}) == 1

    def peer_groups(self, coords: dict[int, dict], world: int) -> dict[int, list[int]]:
        """Ranks doing the same work as each rank (itself included): the same stage."""
        groups: dict[int, list[int]] = {}
        for members in self.stages(coords).values():
            for r in members:
                groups[r] = members
        return groups

    def noise(self, coords: dict[int, dict], now_ns: int) -> dict[str, float]:
        """Per comm, how far a healthy member's window ratio strays from 1 in this job,
        pooled over the job's comms of its kind (`CommTiming.kind`: the tensor-parallel groups
        together, the data-parallel ones together: a comm of two members says little alone,
        and comms of one size may do different work: a job whose data-parallel calls overlap
        backward on a second stream has their gaps stray by tens of percent, its
        tensor-parallel ones', of the same size, by a few); a comm of `NOISE_OWN` members or more also knows its own, which counts
        where it is larger: two comms over the same ranks may do different work (FSDP's all-gathers and reduce-scatters on
        two comms over the same ranks: the gaps between one's calls hold the other's waits,
        and stray by 25-35 % where the other's stray by 4 %). Its own stands, once known,
        while too few of its members have figures to know it anew (the comm whose gaps hold
        the other's waits gives few when a rank slows: its healthy members were then judged by
        the other's spread, and one was named). Where a
        rank's compute is all its gaps hold, a window's mean over many instances strays by a
        few percent; where they hold more (collectives that overlap compute: DDP's buckets,
        FSDP's prefetched all-gathers), are a few milliseconds long, or ranks' steps vary
        (uneven batches), by tens of percent, with no rank slower than another. Spreads, the
        larger of:
        - how widely each member's ratio moves over the kept windows (`CommTiming.
          ratio_moves`; the median over members): a slow rank, or one doing other work than
          its peers, stands apart in every window and moves little;
        - the ratios themselves around their median (1.4826 x the median absolute
          deviation), over comms whose members all do the
          same work (one pipeline stage, by coordinates) and at least `NOISE_MEMBERS` members
          in all (one slow rank, or a pair, is then a small share): known from the first
          window, and not blind to a rank's step spanning two windows.
        Once every comm of the kind keeps `BUSY_WINDOWS` windows and every member's moves are
        known, the level spread counts up to `LEVEL_MOVES` times the moves (`NOISY` at least):
        levels apart that hold are structure, not noise (generator A drawn with 18: half of
        each data-parallel comm of a stage on a 1.4x node, levels 1.35x and 0.73x window after
        window, a level spread of 0.4 against moves of 0.04; nothing could be named).
        A comm whose kind has fewer than `NOISE_MIN` members' moves is absent: its spread is
        not known yet. A comm's spread, once seen, holds for `NOISE_HOLD_NS` unless a larger
        one comes (`CommTiming.peak`), where its kind pools `NOISE_MEMBERS` members' moves or
        more: the estimate itself strays (over four windows, a few of them holding one rank's
        slow step). Generator A's healthy job whose iterations stray 15 %, drawn with SEED 16:
        its data-parallel comms' spread fell from 0.15-0.2 to 0.099 for a moment, under
        `NOISY`, as rank 31's one slow iteration made two far slower windows (1.50x, 1.52x),
        and it was named P2. Not with fewer: there one rank's onset moves every member's
        ratio (a 2-rank job: the other's is its inverse) and its spread, till the onset's
        window leaves them; held, the bench's two recorded GPU jobs were named 10 s later."""
        moves: dict[tuple, list[np.ndarray]] = {}
        levels: dict[tuple, list[np.ndarray]] = {}
        members: dict[tuple, int] = {}
        own: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
        ct_windows: dict[tuple, int] = {}  # per kind, the fewest windows a comm of it keeps
        for c, ct in self.comms.items():
            kind = ct.kind()
            d = ct.ratio_moves()
            if len(d):
                moves.setdefault(kind, []).append(d)
            ct_windows[kind] = min(ct_windows.get(kind, BUSY_WINDOWS), len(ct.ratios()))
            lv = None
            stages = {coords[r].get("pp", 0) if r in coords else None for r in ct.ranks}
            if len(stages) == 1 and None not in stages:
                r = ct.ratios()
                if r.size:
                    lv = r[np.isfinite(r)]
                    levels.setdefault(kind, []).append(lv)
                    members[kind] = members.get(kind, 0) + len(ct.ranks)
            if len(ct.ranks) >= NOISE_OWN:
                own[c] = (d, lv)
        by_kind = {}
        pooled: dict[tuple, int] = {}
        for kind, parts in moves.items():
            d = np.concatenate(parts)
            if len(d) < NOISE_MIN:
                continue
            by_kind[kind] = float(np.median(d))
            pooled[kind] = len(d)
            if members.get(kind, 0) >= NOISE_MEMBERS:
                level = _spread(np.concatenate(levels[kind]))
                if len(d) >= members[kind] and ct_windows.get(kind, 0) >= BUSY_WINDOWS:
                    level = min(level, max(LEVEL_MOVES * by_kind[kind], NOISY))  # levels apart that hold: structure
                by_kind[kind] = max(by_kind[kind], level)
        out = {}
        for c, ct in self.comms.items():
            v = by_kind.get(ct.kind())
            if v is None:
                continue
            d, lv = own.get(c, ((), None))
            if len(d) >= NOISE_OWN or (lv is not None and len(lv) >= NOISE_OWN):
                ct.spread = max(float(np.median(d)) if len(d) >= NOISE_OWN else 0.0,
                                _spread(lv) if lv is not None and len(lv) >= NOISE_OWN else 0.0)
            v = max(v, ct.spread)
            # held where many members pool it (with a few, one rank's onset moves them all, and passes)
            if pooled.get(ct.kind(), 0) < NOISE_MEMBERS or v >= ct.peak[0] or now_ns - ct.peak[1] >= NOISE_HOLD_NS:
                ct.peak = (v, now_ns)
            out[c] = max(v, ct.peak[0])
        return out

    def evaluate(self, now_ns: int, coords: dict[int, dict], world: int, open_ranks: set[int],
                 in_use: dict[str, list[int]] | None = None, stale: set[str] = frozenset()) -> dict[int, dict]:
        """Slow ranks now: rank -> evidence (`ratio`, `impact`, `onset_ns`, `comm`, busy gaps)."""
        self.fresh = False
        self.open_ranks = open_ranks
        self.compute = self.compute_shares(now_ns, in_use, stale)
        self.coords = coords
        long = self.long = self._comm_ratios(now_ns, stale, latest=False)
        short = self._comm_ratios(now_ns, stale, latest=True)
        # in use, but no current busy figures: the rank's finest comm may be missing (judged
        # in a coarser one, its intervals would hold its waits in the finer one's calls) ...
        unknown: dict[int, float] = {}  # rank -> the shortest intervals it had in such a comm
        for comm, members in (in_use or {}).items():
            first = self.in_use_since.setdefault(comm, now_ns)
            if comm not in long:
                ct = self.comms.get(comm)
                if (ct is None or not ct.busy) and now_ns - first >= NEVER_FINER_NS:
                    continue  # ... unless it never had any in this long: it is nobody's finest
                for r in members:
                    unknown[r] = min(unknown.get(r, np.inf), self.low_busy.get((r, comm), 0.0))
        # a rank is judged in its finest comm: the shortest compute intervals, so the most of
        # them, but intervals of real compute (peers' >= MIN_BUSY_MS), not the scheduling
        # noise between back-to-back calls; by the shortest they have been (a checkpoint or a
        # pause lengthens a fine comm's latest intervals for a while, and judged in a coarser
        # one a slow rank's peer is slow, waiting on it in the fine one inside its gaps). It
        # moves to a finer comm only when that one's intervals are `SWITCH` shorter: a slowing
        # rank's intervals grow in every comm, but in a comm whose horizon still holds its
        # healthy past they grow later, and judged there its evidence would restart
        finest: dict[int, tuple[str, tuple]] = {}
        score: dict[int, tuple[bool, float]] = {}
        blind_p2p = self._tp_compared(long, coords)
        for c, res in long.items():
            for r, v in res.items():
                if (r, c) in blind_p2p:
                    continue
                low = min(self.low_busy.get((r, c), np.inf), v[1])
                self.low_busy[(r, c)] = low
                if r not in finest or (v[2] < MIN_BUSY_MS, low) < score[r]:
                    finest[r], score[r] = (c, v), (v[2] < MIN_BUSY_MS, low)
        # ... only where that comm's intervals were shorter than those of the comm it would be
        # judged in (or it never had figures for the rank). The RL generator's colocated job:
        # its 32-rank rollout gather, idle for most of a generation round and still in use, made
        # every rank unknown while its TP comms were current, and a 1.5x rollout GPU (9 ms
        # decode intervals against its peers' 6, in its TP comm) was never judged
        for r in [r for r in finest if r in unknown and self._may_be_finer(unknown[r], score[r][1])]:
            del finest[r]
        # a rank whose finer comm is current but gives it no figure this time (too few
        # intervals of a kind in its latest windows) is not judged now, nor idled: in a
        # coarser comm its intervals hold the waits it spends in the finer one's calls (the
        # last stage of a TP=1 pipeline behind a slow stage, between its data-parallel calls).
        # Not for ever: after `BLIND_WINDOWS` new windows of the finer comm without a figure
        # for it, the coarser comm is all there is to judge it by
        blind = set()
        for r, (c, v) in list(finest.items()):
            was = self.judged_in.get(r)
            if was != c and was in long:
                w = long[was].get(r)
                if w is None and self.low_busy.get((r, was), np.inf) < self.low_busy[(r, c)] and self._still_blind(
                        r, was):
                    blind.add(r)
                    del finest[r]
                    continue
                if w is not None and (w[2] < MIN_BUSY_MS) == (v[2] < MIN_BUSY_MS) and v[1] >= SWITCH * w[1]:
                    finest[r] = (was, w)
            self.judged_in[r] = finest[r][0]
        for r in [r for r in self.blind if r not in blind]:
            del self.blind[r]
        grouped = self._slow_groups(now_ns, long, finest, coords)
        finest.update({r: (c, v) for r, (c, v, _) in grouped.items()})
        self.ratio = {r: v[0] for r, (_, v) in finest.items()}
        noise = self.noise(coords, now_ns)
        verdicts: dict[int, int] = {}
        for r, (c, (ratio, mine, ref, ps)) in finest.items():
            m = self.models.get(r)
            if m is None:
                m = self.models[r] = RankModel(self.model_kind, self.slow_impact, self.slow_windows)
            ct = self.comms[c]
            stamp = ct.ts_ns
            s = grouped[r][2] if r in grouped else short.get(c, {}).get(r)
            verdict = m.update(ratio, stamp, now_ns, held=r in open_ranks, short=s[0] if s else ratio,
                               start=stamp - int(ct.interval_ns), steady=ct.steady.get(r, 0.0) >= STEADY_SHARE,
                               pause=r not in grouped and self._pause(ct, r, s[0] if s else ratio),
                               tail=None if r in grouped else self._tail(ct, r),
                               noise=0.0 if r in grouped else noise.get(c))
            if verdict is not None:
                verdicts[r] = verdict
        hot = open_ranks | verdicts.keys()
        out = {}
        for r, verdict in verdicts.items():
            c, (ratio, mine, ref, ps) = finest[r]
            ct = self.comms[c]
            if r not in open_ranks and r not in grouped and (
                    self._measured(ct, r, ps) < MEASURED_SHARE or not self._waited_on(ct, r)
                    or self._normal_elsewhere(r, c, verdict, short, noise, hot)
                    or self._waits_in_finer(r, c, long)):
                continue
            out[r] = {"ratio": round(ratio, 3), "slowdown": round(ratio - 1.0, 3), "comm": c,
                      "busy_ms": round(mine, 4), "peers_busy_ms": round(ref, 4),
                      "impact": round(min(1.0, (ratio - 1.0) * ps), 4), "onset_ns": int(verdict),
                      "lag_ms": ct.lag_ms.get(r), "signal": "collectives"}
            if r in grouped:
                out[r]["group"] = grouped[r][0]
        kinds: dict[str, tuple | None] = {}
        for r, ev in out.items():
            group = self._slow_itself(r, ev["ratio"], long, kinds, open_ranks) if r not in grouped and self.comms[
                ev["comm"]].p2p else None
            if group is not None:
                ev["slow_itself"] = group
        for r in self._waiting_on_slower(out, long, set(grouped)):
            del out[r]
        for r in list(self.models):
            if r not in finest and r not in open_ranks and r not in blind:
                self.models[r].idle()
                self.models[r].due = 0
        self.due_ns = min((m.due for m in self.models.values() if m.due), default=0)
        return dominant(out, open_ranks)

    @staticmethod
    def _may_be_finer(missing_low: float, low: float) -> bool:
        """A comm in use without current figures, whose intervals were `missing_low` at the
        shortest (0 if it never had figures for the rank), may be finer than the comm with
        `low` the rank would be judged in."""
        return missing_low < low

    def _tp_compared(self, long: dict[str, dict[int, tuple]], coords: dict[int, dict]) -> set[tuple[int, str]]:
        """(rank, pipeline comm) where half or more of the ranks its intervals are compared with
        there (the same stage of the other pipelines, `_comm_ratios`) are its tensor-parallel
        peers (the same coordinates but `tp`: a job without data parallelism): they wait for it
        inside their TP calls, which fall between their pipeline calls, so there it computes
        like them whatever it does. It is judged in another comm. Generator E's TP 8 x PP 4 job
        (no DP) drawn with 1: rank 29, 1.3x from 20 s, 1.15x between its TP calls, was judged
        in its pipeline comm (the shortest intervals), 1.06x there, and never named."""
        groups: dict[tuple, list[tuple[int, str]]] = {}
        for c, res in long.items():
            ct = self.comms.get(c)
            if ct is None or not ct.p2p or not ct.crank:
                continue
            for i, r in enumerate(ct.ranks):
                if i < len(ct.crank) and r in res:
                    groups.setdefault((len(ct.ranks), ct.crank[i]), []).append((r, c))
        out: set[tuple[int, str]] = set()
        for members in groups.values():
            if len(members) < 2:
                continue
            # a rank's coordinates but `tp`: alike for its TP peers
            place = {r: coords_but(coords[r], "tp") for r, _ in members if r in coords}
            where = Counter(place.values())
            out.update((r, c) for r, c in members if r in place and 2 * (where[place[r]] - 1) >= len(members) - 1)
        return out

    @staticmethod
    def _measured(ct: CommTiming, rank: int, share: float) -> float:
        """How much of the comm's newest window its compared intervals fill, the peers' median
        (`rank` left out): in a collective comm, the gaps its busy figures kept over the
        window's span; a pipeline's, `share` (its peers' compute share). Not the comm's busy
        share, which counts every gap, also those that span an iteration's end: generator C's
        healthy job drawn with 22000 (a data-parallel comm of 4, gaps of 0.2-11 ms kept in a few
        windows of ten, the rest of each 0.93 s window one long gap) had rank 11 named P2 '630 %
        slower, the job loses ~100 %' on two gaps of 10.5 ms against its peers' 0.2 and 2.7."""
        if ct.p2p or not ct.busy or not ct.hist:
            return share
        sums, span = ct.busy[-1][1], ct.hist[-1][1] / 1e6
        i = ct.ranks.index(rank)
        others = np.delete(sums, i)
        others = others[np.isfinite(others)]
        if span <= 0 or not len(others):
            return 0.0
        return float(np.median(others)) / span

    @staticmethod
    def _waited_on(ct: CommTiming, rank: int) -> bool:
        """Whether the peers of `rank` wait for it in comm `ct` (the culprit of a slowdown is
        where the waiting ends): its mean arrival lag in the comm's newest window exceeds the
        median of theirs by `LAG_STAND` times their spread around it (the median absolute
        deviation), in a collective comm of `LAG_MEMBERS` or more (in a smaller one the
        median is one or two peers). Against their median absolute lag, as before, a slow
        node holding half of a comm's members (generator A drawn with 18, the stage
        outermost) was waited on by nobody: the median arrival lay between the halves. On the
        bench and generator B's jobs, culprits judged alone in such comms arrived 10-490
        times later than their peers typically did when first named; the healthy ranks
        named in noisy FSDP and MoE comms, 2.2-2.5 times. Without lag figures: true."""
        lags = ct.lag_ms
        mine = lags.get(rank)
        if ct.p2p or len(lags) < LAG_MEMBERS or mine is None or not np.isfinite(mine):
            return True
        others = np.fromiter((v for q, v in lags.items() if q != rank), np.float64)
        others = others[np.isfinite(others)]
        if not len(others):
            return True
        mid = float(np.median(others))
        return bool(mine - mid >= LAG_STAND * max(float(np.median(np.abs(others - mid))), LAG_FLOOR_MS))

    def _normal_elsewhere(self, rank: int, judged: str, onset: int, short: dict[str, dict[int, tuple]],
                          noise: dict[str, float], hot: set[int] = frozenset()) -> bool:
        """Whether `rank`, found slow in comm `judged` (hot since `onset`), computes like its
        peers (within half `slow_impact`) between the calls of another collective comm of its,
        in that comm's latest window, begun after the onset (within `ELSEWHERE_SPREADS` of that
        comm kind's spreads where they are wider, never more than `slow_impact`: between their
        TP calls, generator C's victims computed 1.07x their peers in TP groups whose ratios
        stray by 2.7-3 %, and were named): a slow rank computes slower
        wherever its intervals are compute (the culprit is late in every group it belongs to),
        while a rank judged in a comm whose intervals hold waits in another comm's calls (its
        tensor-parallel peer's, a neighbour stage's) looks slow there only. The other comm must
        be quiet (its spread known and under `NOISY`), and its peers compute between its calls
        (`MIN_BUSY_MS`) for at most `FINE_SHARE` of a step (without iteration timings, of the
        rank's longest intervals): intervals that span an iteration hold every wait of it, and
        are alike for every member of a job in lockstep. The third generator's jobs: a 1.4-1.5x
        rank's tensor-parallel peer, and the next stage's rank, judged between pipeline,
        context-parallel or data-parallel calls (their gaps hold the waits), were named with it
        (a P1 among them); between their tensor-parallel calls they computed 0.65-1.0x their
        peers. Nor where half or more of its peers there are slow too (`hot`: found slow now, or
        named) and none of those computes clearly more there (by half `slow_impact`): like them
        says nothing (generator A's slow node, a quarter of a stage: each tensor-parallel group
        on it slow as a whole, its ranks computed alike between their TP calls, and seven of the
        eight were never named); a peer that does is the one it waits for (generator C's TP=2
        victim, drawn with seed 6000, whose only TP peer was the culprit, was named P2)."""
        step_ms = self.step_ns / 1e6 or max((res[rank][2] for res in short.values() if rank in res), default=0.0)
        for c, res in short.items():
            v = res.get(rank)
            ct = self.comms.get(c)
            if c == judged or v is None or ct is None or ct.p2p or not MIN_BUSY_MS <= v[2] <= FINE_SHARE * step_ms:
                continue
            peers_hot = [q for q in ct.ranks if q != rank and q in hot]
            if 2 * len(peers_hot) >= len(ct.ranks) - 1 and not any(
                    q in res and res[q][1] > v[1] * (1.0 + self.slow_impact / 2) for q in peers_hot):
                continue  # like peers slow too, none of them clearly slower here: says nothing
            spread = noise.get(c)
            if spread is None or spread > NOISY or ct.ts_ns - ct.interval_ns < onset:
                continue
            if v[0] <= 1.0 + min(self.slow_impact, max(self.slow_impact / 2, ELSEWHERE_SPREADS * spread)):
                return True
        return False

    def _waits_in_finer(self, rank: int, judged: str, long: dict[str, dict[int, tuple]]) -> bool:
        """Whether `rank`, judged in comm `judged` while a finer comm of its (shorter intervals
        it was judged by) is current but gives it no figure (`BLIND_WINDOWS`), spends no more of
        its time computing (outside every call, over the horizon: `compute_shares`) than the
        other members of `judged`, within half `slow_impact`: the coarser comm's intervals hold
        its waits inside the finer one's calls (a stage behind a slow one waits in its
        receives), while a slow rank computes a larger share of the time than its peers, who
        wait for it. Generator A's TP=1 pipeline with a 2x rank, drawn anew: the last stage's
        rank, blind in its pipeline comm, was named P2 from its data-parallel comm (1.4x
        there), computing 0.40 of its time like its stage's others (0.39-0.44), the culprit 0.83."""
        low = self.low_busy.get((rank, judged), np.inf)
        if not any(f != judged and rank not in res and self.low_busy.get((rank, f), np.inf) < low
                   for f, res in long.items()):
            return False
        mine = self.compute.get(rank)
        peers = [self.compute[q] for q in self.comms[judged].ranks if q != rank and q in self.compute]
        return mine is not None and bool(peers) and mine < (1.0 + self.slow_impact / 2) * _median(peers)

    def _still_blind(self, r: int, was: str) -> bool:
        """Whether rank `r`, with no figure in its finer comm `was` now, is left unjudged: until
        `BLIND_WINDOWS` of that comm's new windows in a row gave it none."""
        ts = self.comms[was].ts_ns
        comm, last, n = self.blind.get(r, (was, ts, 0))
        if comm != was:
            last, n = ts, 0
        if ts != last:
            n += 1
        self.blind[r] = (was, ts, n)
        return n < BLIND_WINDOWS

    def _waiting_on_slower(self, found: dict[int, dict], long: dict[str, dict[int, tuple]],
                           grouped: set[int]) -> list[int]:
        """Ranks found slow that compute clearly faster than a slower one found with them in a
        collective comm they share (their intervals there shorter by half `slow_impact`, the
        hysteresis margin): they wait for it inside that comm's calls, so their intervals
        between another comm's calls grew (generator B's MoE: a 2x rank's tensor-parallel peer
        was 1.25-1.3x slower between its expert-parallel calls, and named; between their own
        calls it was 0.6x the culprit; a 1.3x rank's TP peer, 1.12x in the peer's
        expert-parallel comm, computed 0.89-0.92x the culprit between their TP calls). Of two
        slow ranks of one group, the slower one is what the group waits for, as that comm's
        figures say, whatever the ratios they were found by (in other comms): generator C's
        1.5x rank, found 2.1x in its data-parallel comm, had a tensor-parallel peer found 2.2x
        in its own (its gaps there hold the waits), which computed 1.07x its peers between their
        TP calls to the culprit's 1.47x, and was named with it. Only where two ranks each seem
        to wait for the other (in two comms) does the larger ratio they were found by decide.
        A rank that is slow itself (`slow_itself`: found in its pipeline comm, where waits sit
        inside calls, and slower than its sibling groups between its group's calls) is kept.
        A rank is not kept so where a peer of that group computes slower there and was found
        slower by far (`ITSELF_APART` times its excess): its group's gaps hold pipeline waits
        (generator E's 1.3x rank of a TP 8 x PP 8 x DP 16 job, drawn with SEED 5: its whole TP
        group computed 1.19-1.23x the other groups between its TP calls, a GPipe schedule's
        bubbles in them; two peers, found 1.13-1.15x in their pipeline comms to the culprit's
        1.26x, seemed slow themselves and were named with it). Not in the comm a rank was found
        in: its waits there fall inside that comm's calls, not between them (the eighth
        generator's two slow ranks of one stage in two data-parallel replicas, 1.3x and 1.6x,
        found in the data-parallel comm they share: the first was taken to wait for the second,
        and its incident resolved while it was as slow)."""
        rest = {r: {c: v for c, v in long.items() if c != ev.get("comm") or not FOUND_COMM_APART}
                for r, ev in found.items()}
        outpaced = {r: self._outpaced_by(r, found, rest[r]) for r, ev in found.items()
                    if r not in grouped and ev.get("signal") == "collectives"}
        waits = {r: self._slower_peers(r, found.keys(), rest[r]) | qs for r, qs in outpaced.items()}
        return [r for r, qs in waits.items() if (not found[r].get("slow_itself") or outpaced[r])
                and any(r not in waits.get(q, ()) or found[q]["ratio"] > found[r]["ratio"] for q in qs)]

    def _outpaced_by(self, rank: int, found: dict[int, dict], long: dict[str, dict[int, tuple]]) -> set[int]:
        """The ranks found with `rank` that compute slower than it in a collective comm of one
        stage they share (by `long`'s figures) and were found slower by far: their excess
        `ITSELF_APART` times its own or more."""
        excess = found[rank]["ratio"] - 1.0
        out: set[int] = set()
        for ct, res in self._stage_groups(rank, long):
            out.update(q for q in ct.ranks if q != rank and q in res and q in found and res[q][1] > res[rank][1]
                       and found[q]["ratio"] - 1.0 >= ITSELF_APART * excess)
        return out

    def _stage_groups(self, rank: int, long: dict[str, dict[int, tuple]]):
        """(comm, its figures) for each collective comm of `rank` with a figure for it whose
        members are of one pipeline stage (by coordinates, where known)."""
        for c, res in long.items():
            ct = self.comms.get(c)
            if ct is None or ct.p2p or rank not in res or len(
                    {self.coords[q].get("pp", 0) for q in ct.ranks if q in self.coords}) > 1:
                continue
            yield ct, res

    def _kind(self, comm: str, kinds: dict[str, tuple | None]) -> tuple | None:
        """What a collective comm's group is, by its members' coordinates: the coordinates
        they share (a TP group shares `dp` and `pp`, a DP group `tp` and `pp`) and their
        values' stage; None where a member's are unknown, or for a P2P comm."""
        if comm not in kinds:
            ct = self.comms.get(comm)
            cs = [self.coords.get(q) for q in ct.ranks] if ct is not None and not ct.p2p else [None]
            if not cs or any(c is None for c in cs):
                kinds[comm] = None
            else:
                same = frozenset(k for k in cs[0] if all(c.get(k) == cs[0][k] for c in cs))
                kinds[comm] = (len(cs), same, cs[0].get("pp", 0)) if "pp" in same or "pp" not in cs[0] else None
        return kinds[comm]

    def _slow_itself(self, rank: int, found: float, long: dict[str, dict[int, tuple]],
                     kinds: dict[str, tuple | None], within: set[int] = frozenset()) -> str | None:
        """Whether `rank` computes slower by `slow_impact`, and by half the excess it was
        `found` slow by at least, between the calls of a collective comm of one stage, than
        the members of its sibling comms do between theirs (groups of the same kind in the
        same stage, two at least: their median interval, by `long`'s figures). For a rank found in its pipeline comm (pipeline waits sit inside its calls,
        not in the gaps it was judged by) it means that it does not merely wait for a slower
        peer of that group: it is slow itself (`evaluate` marks it `slow_itself`). Generator
        E's launch-bound node (TP 8 x PP 2 x DP 4, GPU-timed: its eight hosts ~1.3x from
        30 s, one TP group): every member computed 1.13-1.17x the other stage-1 TP groups
        between its TP calls, but they waited for the slowest of them, rank 41, inside those
        calls; the seven others, 1.14x in their pipeline comm, were taken to wait for it
        (and their phases, which hold those waits, showed 1.0-1.04x: echoes), and only 41
        was named. A rank found in a group comm is not marked: its gaps may hold pipeline
        waits. Nor do they always sit inside pipeline calls (generator C's interleaved
        pipeline drawn with 7000: the last stage's TP pair waiting on a slow stage, 1.94x in
        its pipeline comm, 1.37x its siblings between its TP calls: slow by far less than it
        was found, it is not marked); so a rank is marked only while no rank outside that
        group is named (`evaluate`: there the 1.5x culprit of the stage before was), and the
        phases' echo rule spares a marked rank only where the culprit it would echo is of
        that group (`JobStage._echoes`). `within`: the comm must hold these ranks (the ones
        named: generator E's launch-bound node drawn with SEED 5, two of its ranks named, a
        third slow itself in its data-parallel comm too, which was taken, holding neither of
        them: not marked, its phases took it for their echo). Returns that comm, or None."""
        for c, res in long.items():
            kind = self._kind(c, kinds) if rank in res and within <= set(self.comms[c].ranks) else None
            if kind is None:
                continue
            sib = [_median([v[1] for v in res_o.values()]) for o, res_o in long.items()
                   if o != c and res_o and self._kind(o, kinds) == kind]
            if len(sib) >= 2 and res[rank][1] >= (1.0 + max(self.slow_impact, (found - 1.0) / 2)) * _median(sib):
                return c
        return None

    @staticmethod
    def _tail(ct: CommTiming, rank: int) -> tuple[float, int] | None:
        """The run of slow instances ending the comm's newest window (`windows._tail`): its
        ratio, and since when (the window's share of the comm's interval it covers)."""
        t = ct.tail.get(rank)
        if t is None or not ct.busy:
            return None
        n = ct.busy[-1][2][ct.ranks.index(rank)]
        return t[1], ct.ts_ns - int(ct.interval_ns * min(1.0, t[0] / max(n, 1.0)))

    def _pause(self, ct: CommTiming, rank: int, short: float) -> bool:
        """The comm's newest window holds a pause of `rank` (a GC pause, a data-loader hiccup),
        not a slowdown: far slower overall (`FAST_RATIO`) but slow in under `PAUSE_SHARE` of its
        instances, or, where they are too few to tell, its typical (median) interval no slower
        than the threshold against the other members'. A slowdown lengthens every interval."""
        if short < FAST_RATIO:
            return False
        share = ct.steady.get(rank)
        if share is not None:
            return share < PAUSE_SHARE
        typical = ct.typical_of(latest=True)
        if ct.p2p or rank not in ct.ranks or len(typical) < 2:
            return False
        i = ct.ranks.index(rank)
        others = _nanmedian(np.delete(typical, i), 0)
        return bool(typical[i] < (1.0 + self.slow_impact) * others)

    def _slow_groups(self, now_ns: int, long: dict[str, dict[int, tuple]], finest: dict[int, tuple[str, tuple]],
                     coords: dict[int, dict]
                     ) -> dict[int, tuple[str, tuple, tuple | None]]:
        """Ranks of a group that is slow as a whole, judged as a group.

        Judged against each other, the members of a finest comm that all compute slower (a
        slow node holding a whole tensor-parallel group: thermal throttling, a bad host) are
        even. Two comparisons with the ranks doing the same work elsewhere must both show it:
        - the group's typical gap (its members' median `typical_of`: waits that fall in some
          gaps do not move it) against those of its sibling groups
          (comms of its size, finest for their members, in the same pipeline stage): the
          ratio every member is judged on (over the horizon, and in the latest windows), so
          the group is found at once, not rank by rank. A group's fine gaps may hold waits in
          other comms (a stage waiting on a slow stage of its pipeline): alone, this would
          name victims;
        - each member's pipeline comm (the same stage in the other pipelines; without
          pipelines, its next-finest comm: the other data-parallel replicas), where those
          waits sit inside calls, not in gaps: the members slower there by half the
          threshold (their median; transfers in the gaps dilute it). A coarser collective
          (data parallel, once an iteration) would not do: its gaps hold the pipeline's waits.
        And nobody stands out within the group (every ratio there under half the threshold's
        excess): one slow member makes its peers look slow in coarser comms, as they wait on
        it inside the finest one. The group is judged as one once its sibling ratio over the
        horizon held the threshold for `GROUP_HOLD_NS` (noisy jobs swing a small group's
        typical gap by 20 % for seconds), the pipeline figure and the latest windows' ratio
        agreeing at least once meanwhile (both vary with the kinds of intervals a window
        holds); then while its gaps stay longer than its siblings' by half the threshold.
        Returns rank -> (the group's comm, figures as `_comm_ratios` gives them, latest
        figures or None)."""
        half, thr = 1.0 + self.slow_impact / 2, 1.0 + self.slow_impact
        stages = self.stages(coords)
        stage_of = {r: s for s, members in stages.items() for r in members}
        pipelined = len(stages) > 1
        whole: dict[str, float] = {}  # comm finest for all its members, in one stage -> typical gap
        siblings: dict[tuple[int, int], list[str]] = {}
        for c, res in long.items():
            ct = self.comms[c]
            if ct.p2p or len(ct.ranks) < 2 or any(finest.get(r, ("",))[0] != c or r not in res for r in ct.ranks):
                continue
            at = {stage_of.get(r) for r in ct.ranks}
            typical = _nanmedian(ct.busy_of(), 0)
            if len(at) == 1 and None not in at and np.isfinite(typical) and typical > 0:
                whole[c] = float(typical)
                siblings.setdefault((len(ct.ranks), at.pop()), []).append(c)
        out: dict[int, tuple[str, tuple, tuple | None]] = {}
        of_rank: dict[int, list[tuple[str, tuple]]] = {}
        for c, res in long.items():
            for r, v in res.items():
                of_rank.setdefault(r, []).append((c, v))
        for group in siblings.values():
            if len(group) < 2:
                continue
            latest = {o: float(_nanmedian(self.comms[o].typical_of(latest=True), 0)) for o in group}
            for c in group:
                res, ct = long[c], self.comms[c]
                ref = _median([whole[o] for o in group if o != c])
                self._first_over(c, ref > 0 and whole[c] >= half * ref, now_ns)
                if ref <= 0 or whole[c] < half * ref or max(res[r][0] for r in ct.ranks) >= half:
                    self.slow_groups.pop(c, None)
                    self.group_since.pop(c, None)
                    continue
                peers = [v for o, v in latest.items() if o != c and v > 0]
                now = (latest[c] / _median(peers),) if peers and latest[c] > 0 else None
                state = self.slow_groups.get(c)
                if state != FOUND:  # not yet judged as a group
                    if whole[c] < thr * ref:
                        self.slow_groups.pop(c, None)
                        continue
                    since, seen = state or (now_ns, False)
                    nxt = {}
                    for r in ct.ranks:
                        options = [o for o in of_rank[r] if o[0] != c]
                        pipes = [o for o in options if self.comms[o[0]].p2p]
                        if pipes or (options and not pipelined):
                            nxt[r] = min(pipes or options, key=lambda o: (o[1][2] < MIN_BUSY_MS,
                                                                          self.low_busy.get((r, o[0]), o[1][1])))[1][0]
                    seen = seen or ((now is None or now[0] >= thr) and len(nxt) == len(ct.ranks)
                                    and _median(list(nxt.values())) >= half)
                    self.slow_groups[c] = (since, seen)
                    if not seen or now_ns - since < GROUP_HOLD_NS:
                        continue
                    self.slow_groups[c], self.group_since[c] = FOUND, since
                for r in ct.ranks:
                    out[r] = (c, (whole[c] / ref, whole[c], ref, res[r][3]), now)
        return out

    def _first_over(self, comm: str, over: bool, now_ns: int) -> None:
        """Since when a group has seemed slower than its siblings by half the threshold: ended
        by `GROUP_FIRST_MISSES` evaluations in a row under it, not by one. While a job warms
        up its gaps shrink several-fold within seconds, and a comm whose horizon took a new
        window compared with siblings that had not yet dipped under half for one evaluation:
        the origin generator's node 1.25x from the start (TP 8 x DP 4, seed 5), 1.21-1.35x
        against its siblings from the job's first windows, 0.83x and 1.05x at two lone
        evaluations as its warm-up ended."""
        e = self.group_first.get(comm)
        if over:
            if e is None:
                self.group_first[comm] = [now_ns, 0]
            else:
                e[1] = 0
        elif e is not None:
            e[1] += 1
            if e[1] >= GROUP_FIRST_MISSES:
                del self.group_first[comm]

    def group_began(self, comm: str) -> int | None:
        """Since when a group judged as one has seemed slower: from its first evaluation over
        half the threshold against its siblings, when it has not been under it for
        `GROUP_FIRST_MISSES` evaluations in a row since (`_first_over`), else since it held
        the threshold (`group_since`); None: not judged as one."""
        since = self.group_since.get(comm)
        e = self.group_first.get(comm)
        return since if since is None or e is None else min(since, e[0])

    def stages(self, coords: dict[int, dict]) -> dict[int, list[int]]:
        """Pipeline stages: from coordinates, else from the comm ranks of the P2P comms."""
        out: dict[int, list[int]] = {}
        if coords:
            for r, c in coords.items():
                out.setdefault(int(c.get("pp", 0)), []).append(r)
            return out
        for ct in self.comms.values():
            if ct.p2p and ct.crank:
                for r, cr in zip(ct.ranks, ct.crank):
                    if cr >= 0:
                        out.setdefault(cr, []).append(r)
        return out

    def advisories(self, coords: dict[int, dict]) -> list[dict]:
        """Stages that compute `IMBALANCE` more than the other stages, from the start on. Not
        where the others' share outside calls is under `IMBALANCE_MIN_COMPUTE`: their calls'
        times overlap (pipeline receives posted ahead on a stream of their own, as Megatron
        overlaps them, run while the rank computes), and 1 minus the shares inside calls is
        no compute figure. The ninth generator's healthy pipelines (1F1B, interleaved with
        context parallelism, sequence parallel): every stage inside a call 90-100 % of the
        time by those sums, compute figures of 0.02-0.11 (the floor, `MIN_COMPUTE`, or near
        it) and ratios of 1.5-3.9 between them: a P3 "rebalance the stages" for a stage of each
        job, none heavier. The job model's unbalanced stages: the others compute 0.33-0.63."""
        stages = self.stages(coords)
        med = {s: _median([self.compute[r] for r in rs if r in self.compute]) for s, rs in stages.items()}
        med = {s: v for s, v in med.items() if v > 0}
        out = []
        if len(med) < 2:
            return out
        for s, v in med.items():
            others = _median([w for t, w in med.items() if t != s])
            ratio = v / others if others >= IMBALANCE_MIN_COMPUTE else 0.0
            count = self.stage_evals.setdefault(s, [0, 0])
            count[1] += 1
            if ratio >= 1 + IMBALANCE:
                count[0] += 1
            self.stage_ratio[s] = ratio
            # structural: imbalanced in most of its first evaluations (a later change is a fault)
            if count[0] >= IMBALANCE_EVALS and count[0] * 4 >= count[1] * 3 and ratio >= 1 + IMBALANCE / 2:
                out.append({"stage": s, "ranks": sorted(stages[s]), "ratio": round(ratio, 3)})
        return out

    def slow_links(self, now_ns: int, slow_ranks: set[int], node_of: dict[int, str] | None = None,
                   linked: set[str] = frozenset()) -> tuple[list[dict], list[str], int | None]:
        """Cross-node comms whose transfers stay slow while no member rank is slow, and the nodes
        to blame: the ends of the node pairs every slow comm spans and no comm with normal
        transfers spans (a pair both ends of which also meet in a healthy comm is a healthy link);
        without such a pair, the nodes the most slow comms share. P2P channels between two
        nodes (`node_of`) name their pair directly: a slow one is a candidate, a normal one
        clears its pair. A comm inside one node (its NVLink) names that node. A comm of `linked`
        (an open link was found on it) stays a candidate while its transfers stay slow, slow
        members or not: the link slows them. Third: the one rank that two slow comms or more
        have in common, where no node pair is to blame (its own path is: its comm kernels, its
        PCIe, its NIC rail), else None."""
        hot, cool = [], []
        common: set[int] | None = None
        hot_pairs: set[tuple[str, str]] = set()
        for comm, ct in self.comms.items():
            if ct.p2p or ct.permute:
                if node_of and self._fresh(ct, now_ns):
                    self._channel_links(comm, ct, node_of, slow_ranks, hot, cool, hot_pairs)
                continue
            if not self._fresh(ct, now_ns) or not ct.nodes or len(ct.nodes) < 2 and not self._in_node(ct, node_of):
                continue
            if ct.link_streak < self.slow_windows:
                if ct.link_streak == 0 and ct.base_xfer >= 0:
                    cool.append(set(ct.nodes))
                continue
            if comm not in linked and (slow_ranks.intersection(ct.ranks) or any(
                    self.ratio.get(r, 1.0) >= 1 + self.slow_impact for r in ct.ranks)):
                continue
            hot.append({"comm": comm, "nodes": list(ct.nodes), "xfer_ms": ct.xfer_ms,
                        "normal_xfer_ms": round(ct.base_xfer, 3)})
            common = set(ct.ranks) if common is None else common.intersection(ct.ranks)
        if not hot:
            return [], [], None
        shared = set.intersection(*(set(h["nodes"]) for h in hot))
        pairs = {(a, b) for a in shared for b in shared if a < b
                 and not any(a in c and b in c for c in cool)}
        direct = {p for p in hot_pairs if p in pairs}  # a slow channel between the two
        if direct or pairs:
            return hot, sorted({n for p in (direct or pairs) for n in p}), None
        for h in hot:
            if "ranks" in h:
                common = set(h["ranks"]) if common is None else common.intersection(h["ranks"])
        if len(hot) >= 2 and common is not None and len(common) == 1:
            (rank,) = common
            if node_of and node_of.get(rank) in shared:
                return hot, [node_of[rank]], rank
        counts: dict[str, int] = {}
        for h in hot:
            for n in h["nodes"]:
                counts[n] = counts.get(n, 0) + 1
        top = max(counts.values())
        return hot, sorted(n for n, c in counts.items() if c == top), None

    @staticmethod
    def _in_node(ct: CommTiming, node_of: dict[int, str] | None) -> bool:
        """A comm inside one node, every member placed there (its NVLink is its link): the
        seventh generator's node whose NVLink degraded, its TP comm's transfers 12x, was only
        the job's unexplained slowdown."""
        return bool(node_of) and all(node_of.get(r) == ct.nodes[0] for r in ct.ranks)

    def _channel_links(self, comm: str, ct: CommTiming, node_of: dict[int, str], slow_ranks: set[int], hot: list,
                       cool: list, hot_pairs: set) -> None:
        for (r, p), (base, ms, streak, _, normal_size, size) in ct.channels.items():
            a, b = node_of.get(r), node_of.get(p)
            if a is None or b is None or a == b:
                continue
            if streak == 0:
                cool.append({a, b})
            elif streak >= self.slow_windows and not (slow_ranks & {r, p}) and all(
                    self.ratio.get(x, 1.0) < 1 + self.slow_impact for x in (r, p)):
                hot.append({"comm": comm, "nodes": sorted((a, b)), "ranks": [p, r], "xfer_ms": ms,
                            "normal_xfer_ms": round(base, 3), "bytes": int(size),
                            "normal_bytes": int(normal_size)})
                hot_pairs.add((min(a, b), max(a, b)))

    def heavy(self, rank: int) -> tuple[float, str]:
        """The largest share of data `rank` carries over its peers' median in a collective comm
        whose members' message sizes differ (its newest window), and that comm."""
        best, where = 1.0, ""
        for comm, ct in self.comms.items():
            v = ct.bytes_ratio.get(rank, 1.0)
            if v > best:
                best, where = v, comm
        return best, where

    def lateness(self) -> dict[int, float]:
        """Each rank's largest mean arrival lag (ms) in its comms' latest windows."""
        out: dict[int, float] = {}
        for ct in self.comms.values():
            for r, v in ct.lag_ms.items():
                if v is not None and v > out.get(r, -1e18):
                    out[r] = v
        return out
