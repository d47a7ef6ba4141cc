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
