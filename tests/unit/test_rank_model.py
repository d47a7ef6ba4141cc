"""The river rank model: river's Page-Hinkley learns a rank's normal ratio and flags the
rise, and loading it does not import the rest of river.drift (scipy.stats, ~1 s)."""

import subprocess
import sys

from commwatch.streams.detect.rank_model import RankModel


def test_page_hinkley_flags_a_rise_after_learning_the_normal_ratio():
    m = RankModel("river", 0.2, 2)
    normal = [m._drift(1.0 + 0.01 * (i % 3)) for i in range(20)]
    risen = [m._drift(1.6) for _ in range(6)]
    assert not any(normal) and any(risen)
    assert type(m.ph).__name__ == "PageHinkley" and "river" in type(m.ph).__module__ + sys.modules[
        type(m.ph).__module__].__file__


def test_the_river_model_loads_without_scipy_stats():
    code = ("import sys; from commwatch.streams.detect.rank_model import RankModel; "
            "m = RankModel('river', 0.2, 2); m._drift(1.0); "
            "print(m.ph is not None, 'scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False"]


def test_in_a_noisy_comm_two_far_slower_windows_do_not_decide_three_do():
    """An FSDP job (one comm, calls a few ms apart, a window's ratios straying 40 % from 1):
    some healthy rank of 32 was far slower (2.1-9.8x, a pause, then chance) in two windows in
    a row now and then, and was named slow at P2 (generator B: five in one healthy job). Where
    the spread is over `NOISY`, far slower needs one more window, as the sustained rule does;
    where it is small, two still decide."""
    for kind in ("numpy", "river"):
        noisy, quiet = RankModel(kind, 0.1, 2), RankModel(kind, 0.1, 2)
        got = [noisy.update(2.4, s * 10**9, s * 10**9, short=2.4, noise=0.45) for s in (1, 2, 3)]
        assert got == [None, None, 10**9]
        assert [quiet.update(1.6, s * 10**9, s * 10**9, short=1.6, noise=0.02) for s in (1, 2)] == [None, 10**9]
