"""Whether one rank's compute ratio (its compute share over its peers', `slow.py`) is a
slowdown, and since when: two interchangeable models, chosen by the `slow_model` setting.

- `numpy`: fixed rules. Hot when the ratio is >= 1 + `slow_impact` both over the horizon
  and in each new window; a slow rank once hot over max(`slow_windows`, `MIN_STREAK`) new
  windows in a row and `SLOW_MIN_NS` of event time (a GC pause lasts one or two windows),
  or at once when >= `FAST_RATIO` in two new windows in a row (three where the comm's
  spread is over `NOISY`: in an FSDP comm whose windows stray 40 % from 1, some healthy rank
  of 32 was far slower in two in a row now and then; windows judged before the spread was
  known count there only where it turns out small: `blind`), or in one window in which
  it was slow in nearly every instance (`steady`: a pause lengthens one gap, not all), or
  in one window that the caller's own evidence makes conclusive (`conclusive`: an
  iteration whose phases are all stretched alike, `steps.py`), or at once on a window that
  ends in a run of slow instances at >= `FAST_RATIO` (`tail`: the onset of a slowdown inside
  it, `windows._tail`), though the horizon still holds the healthy past. A window far slower overall
  but slow in few of its instances (`pause`) holds a pause's long gaps: it counts for nothing.
- `river`: the same evidence, and a Page-Hinkley drift detector (`river.drift.PageHinkley`,
  upward) per rank that learns the rank's normal ratio and flags the onset of a rise as
  soon as it is significant: a rank hot in two new windows with a detected drift is slow
  without waiting for `SLOW_MIN_NS`, where those windows agree (the least excess over 1 at
  least `DRIFT_EVEN` of the largest: a pause after a window barely hot is a spike, not a
  change; generator B's gloo rank drawn with SEED 7, 1.11x then 2.43x, was named P2). A rank
  slow from its first windows has no onset to detect: the sustained rule of the `numpy`
  model applies to it as well.

`update(ratio, stamp, now, held)` returns the onset time while the rank is judged slow
(`held`: an incident is open, hysteresis at half the threshold over the horizon, or the
newest window over the threshold: a tail decision comes before the horizon fills), else None. Scores are
higher-is-worse; the river models warm up over `PH_MIN` windows.

>>> m = RankModel("numpy", 0.1, 2)
>>> [m.update(1.3, s * 10**9, s * 10**9) for s in range(1, 6)]
[None, None, 1000000000, 1000000000, 1000000000]
>>> m = RankModel("numpy", 0.1, 2)   # a pause: hot in one window, the horizon remembers it
>>> [m.update(1.3, s * 10**9, s * 10**9, short=1.6 if s == 1 else 1.0) for s in range(1, 6)]
[None, None, None, None, None]
"""

from __future__ import annotations

SLOW_MIN_NS = 2_000_000_000
MIN_STREAK = 2  # new windows in a row, each slow on its own
FAST_RATIO = 1.5
PH_MIN = 4
NOISY = 0.1  # a spread over this: no single window decides, and the sustained rule waits longer ...
NOISY_EXTRA = 1  # ... by this many windows, and as many more `SLOW_MIN_NS`
NOISE_K = 2.5  # a window's ratio must stand this many of its comm's healthy spreads above 1 (`noise`)
DRIFT_EVEN = 0.15  # a drift decides early only where the streak's least excess is this share of its largest
LASTING_NS = 10_000_000_000  # hot over the horizon this long, no new window under half the threshold: slow
LASTING_WINDOWS = 4  # ... over this many new windows at least (`lasting`)


class RankModel:
    def __init__(self, kind: str, slow_impact: float, slow_windows: int):
        self.kind = kind
        self.impact = slow_impact
        self.windows = slow_windows
        self.last_stamp = -1
        self.hot_since = 0
        self.streak = 0
        self.fast = 0
        self.blind = 0  # windows of the `fast` run judged while the comm's spread was not known
        self.excess = (0.0, 0.0)  # the least and largest excess of a new window in the streak
        self.onset = 0
        self.ph = None
        self.seen = 0
        self.first_ns = 0  # when its first window began
        self.normal = 0  # windows of it judged not slow (`slow_throughout`)
        self.due = 0
        self.lasting_since = 0  # hot over the horizon since, no new window under half the threshold (0: not)
        self.lasting_n = 0
        self.need = max(slow_windows, MIN_STREAK)
        self.min_ns = SLOW_MIN_NS

    def threshold(self) -> float:
        return 1.0 + self.impact

    def update(self, ratio: float, stamp: int, now_ns: int, held: bool = False, short: float | None = None,
               **kw) -> int | None:
        """`_update` (below); keeps `due`: when time alone would conclude the sustained rule
        (hot over enough windows, `SLOW_MIN_NS` not yet passed), else 0."""
        v = self._update(ratio, stamp, now_ns, held, short, **kw)
        self.due = (self.hot_since + self.min_ns if v is None and not held and self.hot_since
                    and self.streak >= self.need else 0)
        return v

    def _update(self, ratio: float, stamp: int, now_ns: int, held: bool = False, short: float | None = None,
               start: int | None = None, steady: bool = False, conclusive: bool = False, pause: bool = False,
               tail: tuple[float, int] | None = None, noise: float | None = 0.0) -> int | None:
        """`ratio` over the horizon (steady); `short` over each comm's latest window alone
        (fast but noisy). A slowdown is hot in both; the streak counts new windows in a row
        that are hot alone (a pause lasts one or two of them, however long the horizon
        remembers it). `start`: when the window behind `stamp` began (the onset, if hot).
        `steady`: the rank was slow in nearly every instance of that window, not in one
        long gap (a pause): a window at >= `FAST_RATIO` decides alone. `conclusive`: the
        caller's own evidence shows that this window alone is a slowdown (every phase of an
        iteration stretched alike, `steps.py`): it decides at once. `pause`: the caller's
        evidence shows a few long gaps hold the window (a GC pause, a data-loader hiccup:
        far slower overall, yet slow in few of its instances): it counts for nothing.
        `tail`: (ratio, since) where the window ends in a run of instances the rank was slow
        in, after ones it was not (`windows._tail`): a slowdown that began inside it. At
        >= `FAST_RATIO` it decides at once, since then, however little of the horizon (and
        of the window) it fills yet. `noise`: how far healthy members' window ratios stray
        from 1 in this comm (`slow.SlowTracker.noise`): a window counts as hot only `NOISE_K`
        spreads above 1 (half that over the horizon, which pools a few windows), and as far
        slower only that far above `FAST_RATIO` too; the threshold where the spread is small.
        Where the spread is over `NOISY`, or not known yet (None), no single window decides
        (`tail`, `steady`, `conclusive`): a run of slow instances there may be chance; over
        `NOISY`, the sustained rule needs `NOISY_EXTRA` more windows and seconds."""
        short = ratio if short is None else short
        new = stamp != self.last_stamp
        self.last_stamp = stamp
        drift = False
        if new:
            self.seen += 1
            self.first_ns = self.first_ns or start or stamp or now_ns
            drift = self._drift(short)
        thr = self.threshold()
        unknown = noise is None
        noisy = noise is not None and noise > NOISY
        alone = noise is not None and not noisy  # one window decides only where its spread is known and small
        noise = noise or 0.0
        thr_short = max(thr, 1.0 + NOISE_K * noise)
        thr_long = max(thr, 1.0 + NOISE_K * noise / 2)
        fast = max(FAST_RATIO, thr_short)
        self.need = max(self.windows, MIN_STREAK) + (NOISY_EXTRA if noisy else 0)  # noisy: one more window ...
        self.min_ns = SLOW_MIN_NS * (NOISY_EXTRA + 1 if noisy else 1)  # ... and longer
        if new and pause and not held:
            return None
        if new and alone and tail is not None and tail[0] >= fast and not held:
            self.hot_since, self.streak, self.fast, self.blind = tail[1], 1, 1, 0
            return self.hot_since
        if held:
            if ratio >= 1.0 + self.impact / 2 or short >= thr:
                return self.hot_since or stamp or now_ns
            self.hot_since = self.streak = self.fast = self.blind = 0
            self.normal += 1
            return None
        lasting = self._lasting(ratio >= thr_long and not (new and short < 1.0 + (thr_short - 1.0) / 2),
                                new, start or stamp or now_ns, now_ns)
        if ratio < thr_long or (new and short < thr_short):
            if new or ratio < thr_long:
                self.hot_since = self.streak = self.fast = self.blind = 0
                self.normal += 1
            return lasting
        if not self.hot_since:
            self.hot_since = start or stamp or now_ns
        if new:
            self.streak += 1
            if short >= fast:
                self.fast, self.blind = self.fast + 1, self.blind + int(unknown)
            else:
                self.fast = self.blind = 0
            x = short - 1.0
            self.excess = (x, x) if self.streak == 1 else (min(self.excess[0], x), max(self.excess[1], x))
        sustained = self.streak >= self.need and now_ns - self.hot_since >= self.min_ns
        # a drift is a change that lasts: a spike after a window barely hot (a pause after some
        # jitter) is not one, however far it moves the detector
        drifted = drift and self.streak >= (self.need if noisy else 2) and (
            self.excess[0] >= DRIFT_EVEN * self.excess[1])
        fast_need = MIN_STREAK + (NOISY_EXTRA if noisy else 0)  # noisy: far slower in one more window too
        # far slower in windows judged before the comm's spread was known counts only where it
        # turns out small: generator B's healthy FSDP rank drawn with 18, 2-2.6x its peers'
        # launch gaps in the job's first three windows, spread then known as 0.37, was named P2
        if sustained or self.fast - (self.blind if noisy else 0) >= fast_need or drifted or (new and alone and (steady and self.fast >= 1 or conclusive)):
            return self.hot_since
        return lasting

    def slow_throughout(self, until_ns: int) -> bool:
        """Whether every window judged was slow but one at most (the first may hold a job's
        warm-up, all its ranks alike), the first begun by `until_ns`."""
        return self.normal <= 1 and 0 < self.first_ns <= until_ns

    def _lasting(self, hot: bool, new: bool, since: int, now_ns: int) -> int | None:
        """A slowdown near the threshold that lasts: the ratio over the horizon held it for
        `LASTING_NS` and `LASTING_WINDOWS` new windows, none of them alone under half of it
        (the streak needs each new window over the threshold: windows that hold different
        parts of an iteration swing around it). Generator E's 1.2x rank of a 300 s capture
        (TP 4 x PP 2 x DP 4, 2.8 s steps): 1.11-1.12x over its horizon from 7 s after its
        onset, its windows alternately over and under 1.1, its streak never two; it was never
        named. Returns the onset (when the horizon went hot) once it is slow, else None."""
        if not hot:
            if new or not self.lasting_since:
                self.lasting_since = self.lasting_n = 0
            return None
        if not self.lasting_since:
            self.lasting_since, self.lasting_n = since, 0
        self.lasting_n += int(new)
        if self.lasting_n >= LASTING_WINDOWS and now_ns - self.lasting_since >= LASTING_NS:
            return self.lasting_since
        return None

    def _drift(self, ratio: float) -> bool:
        if self.kind != "river":
            return False
        if self.ph is None:
            self.ph = _page_hinkley()(min_instances=PH_MIN, delta=self.impact / 4, threshold=2 * self.impact,
                                        mode="up")
        self.ph.update(ratio)
        return bool(self.ph.drift_detected)

    def idle(self) -> None:
        """No ratio this evaluation (a comm stale or untimed): a streak does not carry over."""
        self.streak = self.fast = self.blind = 0
        self.hot_since = self.lasting_since = self.lasting_n = 0


def _page_hinkley() -> type:
    """river's `PageHinkley`. Importing `river.drift` imports every detector of the package,
    KSWIN's scipy.stats among them (about 1 s, paid at a rank's first hot window, most of a
    small replay's time): only the module of `PageHinkley` is loaded, from river's own file."""
    import importlib.util
    import sys

    name = "commwatch_river_page_hinkley"
    mod = sys.modules.get(name)
    if mod is None:
        try:
            import river

            spec = importlib.util.spec_from_file_location(name, f"{river.__path__[0]}/drift/page_hinkley.py")
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            sys.modules[name] = mod
        except (ImportError, OSError, AttributeError):  # another layout of river: the package itself
            from river import drift as mod
    return mod.PageHinkley
