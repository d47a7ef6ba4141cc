"""A comm's timing figures as stage 2 keeps them (`slow.py`): its latest windows' busy gaps
(`windows.py`), what is derived from them (ratios, their moves, typical gaps: memoised till a
window changes them), its compute shares over the horizon, transfer times and link streaks."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from commwatch.streams.detect.medians import RANGE_SIGMAS
from commwatch.streams.detect.medians import nanmedian as _nanmedian
from commwatch.streams.detect.medians import others_median as _others_median

BUSY_WINDOWS = 4  # a rank's busy gaps: pooled over this many latest windows of a comm
HORIZON_WINDOWS = 32


@dataclass
class CommTiming:
    ranks: list[int]
    p2p: bool
    ts_ns: int = 0
    interval_ns: float = 0.0
    timed: bool = True  # False: host-enqueue records, no timing
    inside: dict[int, float] | None = None  # share of time inside this comm's calls, over the horizon
    hist: deque = field(default_factory=lambda: deque(maxlen=HORIZON_WINDOWS))  # (ts, span, inside array)
    busy: deque = field(default_factory=lambda: deque(maxlen=BUSY_WINDOWS))  # (ts, gap sums, counts, shares, medians)
    classes: deque = field(default_factory=lambda: deque(maxlen=BUSY_WINDOWS))  # pipelines: (sums, counts) per class
    lag_ms: dict[int, float] = field(default_factory=dict)
    bytes_ratio: dict[int, float] = field(default_factory=dict)  # newest window: member -> its message size over the median
    crank: list[int] | None = None
    permute: bool = False  # a collective permute's P2P comm, judged as a collective (`SlowTracker.p2p_window`)
    windows: int = 0
    calls: int = 0  # instances seen over its windows: how busy the comm is (`job_slow._phase_coords`)
    nodes: list[str] = field(default_factory=list)
    xfer_ms: float = 0.0
    base_xfer: float = -1.0
    link_streak: int = 0
    channels: dict = field(default_factory=dict)  # P2P: (receiver, sender) -> [normal ms, ms now, streak, windows, normal bytes, bytes now]
    memo: dict = field(default_factory=dict)  # what is derived from `busy` and `classes`, till they change
    steady: dict = field(default_factory=dict)  # newest window: share of instances each rank was slow in
    tail: dict = field(default_factory=dict)  # newest window: rank -> [instances, ratio] of the slow run ending it
    spread: float = 0.0  # its own spread, last known (`SlowTracker.noise`)
    peak: tuple[float, int] = (0.0, 0)  # the largest spread lately, and when (`SlowTracker.noise`)
    _kind: tuple | None = None

    def changed(self) -> None:
        self.memo.clear()

    def kind(self) -> tuple:
        """Comms of one kind: the same size and the same strides between their members' ranks
        (the tensor-parallel groups, the data-parallel ones, ...: comms of one size may do
        different work)."""
        if self._kind is None:
            srt = sorted(self.ranks)
            self._kind = (len(srt), tuple(b - a for a, b in zip(srt, srt[1:])))
        return self._kind

    def _memo(self, name: str, latest: bool, fn):
        key = (name, latest)
        if key not in self.memo:
            self.memo[key] = fn(latest)
        return self.memo[key]

    def class_busy(self, latest: bool = False) -> tuple[np.ndarray, np.ndarray]:
        return self._memo("class_busy", latest, self._class_busy)

    def busy_of(self, latest: bool = False) -> np.ndarray:
        return self._memo("busy_of", latest, self._busy_of)

    def typical_of(self, latest: bool = False) -> np.ndarray:
        """Per rank (aligned with `ranks`), the median of its windows' median compute gaps (ms)
        over the kept windows (or the newest alone); nan where it has none."""
        def typical(last: bool) -> np.ndarray:
            wins = [self.busy[-1]] if last and self.busy else list(self.busy)
            return _nanmedian(np.stack([w[4] for w in wins]), 0)
        return self._memo("typical_of", latest, typical)

    def _class_busy(self, latest: bool) -> tuple[np.ndarray, np.ndarray]:
        """Pipelines: per class and rank (arrays `P2P_CLASSES` x ranks), the shortest interval
        over the kept windows (nan: none) and the count. The shortest, not a typical window's:
        a class may hold a longer instance once an iteration, and a window that happens to
        hold only that one says nothing of the rank's speed."""
        wins = [self.classes[-1]] if latest and self.classes else list(self.classes)
        lows = np.stack([w[0] for w in wins])
        counts = np.stack([w[1] for w in wins])
        low = lows.min(axis=0)
        return np.where(np.isfinite(low), low, np.nan), counts.sum(axis=0)

    def _busy_of(self, latest: bool) -> np.ndarray:
        """Per rank (aligned with `ranks`), its mean compute gap (ms) over the kept windows (or
        the newest alone); nan where it has none."""
        wins = [self.busy[-1]] if latest and self.busy else list(self.busy)
        sums = np.stack([w[1] for w in wins])
        counts = np.stack([w[2] for w in wins])
        tot, cnt = np.nansum(sums, axis=0), np.where(np.isnan(sums), 0, counts).sum(axis=0)
        with np.errstate(all="ignore"):
            return np.where((cnt > 0) & (tot > 0), tot / cnt, np.nan)

    def ratios(self) -> np.ndarray:
        """Every member's mean gap over the others' median in each kept window (windows x
        members; nan where unknown; empty for pipelines, judged per class)."""
        def ratios(_: bool) -> np.ndarray:
            if self.p2p or not self.busy or len(self.ranks) < 2:
                return np.zeros((0, len(self.ranks)))
            sums = np.stack([w[1] for w in self.busy])
            counts = np.stack([w[2] for w in self.busy])
            with np.errstate(all="ignore"):
                mean = sums / counts
                return mean / _others_median(mean.T).T
        return self._memo("ratios", False, ratios)

    def ratio_moves(self) -> np.ndarray:
        """Per member with at least two kept windows, how widely its window ratio (`ratios`)
        moves: its range over them, scaled to a standard deviation (divided by the expected
        range of that many normal draws). Moves, not levels: a member that stands apart in
        every window (a slow rank, or one doing other work than its peers) moves little; one
        whose ratio swings from window to window moves much."""
        def moves(_: bool) -> np.ndarray:
            ratio = self.ratios()
            if len(ratio) < 2:
                return np.zeros(0)
            ok = np.isfinite(ratio)
            k = ok.sum(axis=0)
            rng = np.where(ok, ratio, -np.inf).max(axis=0) - np.where(ok, ratio, np.inf).min(axis=0)
            use = k >= 2
            return rng[use] / RANGE_SIGMAS[np.minimum(k[use], len(RANGE_SIGMAS) - 1)]
        return self._memo("ratio_moves", False, moves)

    def share_of(self) -> np.ndarray:
        return self.busy[-1][3] if self.busy else np.zeros(len(self.ranks))
