"""Shared fixtures: the real embedded broker (one per session, a fresh topic prefix per
test) and the real chdb engine (one directory per session, since chdb allows one path
per process; a fresh database per test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from commwatch.settings import Settings


@pytest.fixture(scope="session")
def broker():
    from commwatch.embedded import EmbeddedBroker

    b = EmbeddedBroker().start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def chdb_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("chdb")


@pytest.fixture
def prefix() -> str:
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture
def settings(tmp_path, prefix) -> Settings:
    """Settings for a unit test: no broker, data under tmp_path."""
    return Settings.load(env={}, data_dir=str(tmp_path), topic_prefix=prefix, metrics_port=0)


@pytest.fixture
def kafka_settings(broker, settings) -> Settings:
    """Settings pointing at the session broker with a fresh topic prefix."""
    from commwatch.kafka import ensure_topics

    s = settings.replace(kafka_bootstrap=broker.bootstrap, kafka_partitions=2)
    ensure_topics(s, broker.bootstrap)
    return s


@pytest.fixture
def ch_settings(chdb_dir, settings) -> Settings:
    """Settings pointing at the session chdb directory with a fresh database."""
    return settings.replace(clickhouse_dsn=f"chdb://{chdb_dir}", clickhouse_database="db_" + uuid.uuid4().hex[:10])


@pytest.fixture
def ch_client(ch_settings):
    from commwatch.embedded import clickhouse_client

    client = clickhouse_client(ch_settings)
    yield client
    client.command(f"DROP DATABASE IF EXISTS {ch_settings.clickhouse_database}")


@pytest.fixture(scope="session")
def gen_c(tmp_path_factory):
    """A capture of the third independent generator (`tests/independent/realworld`): its
    scenario by name prefix, drawn with a base seed (its default 1000), generated once per
    session (a drill replays it again)."""
    gen = Path(__file__).resolve().parent / "independent" / "realworld" / "gen.py"
    folder = tmp_path_factory.mktemp("gen_c")

    def capture(scenario: str, seed: int = 1000) -> Path:
        out = folder / str(seed)
        found = list(out.glob(f"{scenario}*.cwcap"))
        if not found:
            subprocess.run([sys.executable, str(gen), "--out", str(out), "--seed", str(seed), scenario], check=True,
                           capture_output=True)
            found = list(out.glob(f"{scenario}*.cwcap"))
        return found[0]

    return capture


def _scenario_truth(tmp_path_factory, name: str, default_seed: int):
    """A generator of `tests/independent/NAME` that writes `--out DIR --seed N SCENARIO` and a
    truth beside each capture: its scenario by full name, generated once per session."""
    gen = Path(__file__).resolve().parent / "independent" / name / "gen.py"
    folder = tmp_path_factory.mktemp(f"gen_{name}")

    def capture(scenario: str, seed: int = default_seed) -> tuple[Path, dict]:
        out = folder / str(seed)
        cap = out / f"{scenario}.cwcap"
        if not cap.exists():
            subprocess.run([sys.executable, str(gen), "--out", str(out), "--seed", str(seed), scenario], check=True,
                           capture_output=True)
        return cap, json.loads((out / f"{scenario}.truth.json").read_text())

    return capture


@pytest.fixture(scope="session")
def gen_d(tmp_path_factory):
    """A capture of the fourth independent generator (`tests/independent/ops`) and its truth
    (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "ops", 1)


@pytest.fixture(scope="session")
def gen_e(tmp_path_factory):
    """A capture of the fifth independent generator (`tests/independent/fleet`) and its truth
    (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "fleet", 1)


@pytest.fixture(scope="session")
def gen_f(tmp_path_factory):
    """A capture of the sixth independent generator (`tests/independent/quirks`) and its truth
    (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "quirks", 1)


@pytest.fixture(scope="session")
def gen_g(tmp_path_factory):
    """A capture of the seventh independent generator (`tests/independent/edges`) and its truth
    (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "edges", 1)


@pytest.fixture(scope="session")
def gen_h(tmp_path_factory):
    """A capture of the eighth independent generator (`tests/independent/noisy`) and its truth
    (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "noisy", 1)


@pytest.fixture(scope="session")
def gen_a(tmp_path_factory):
    """A capture of the first independent generator (`tests/independent/megatron`): its
    scenario by name, drawn with `SEED` (an offset to its seeds, 0 as committed), generated
    once per session."""
    gen = Path(__file__).resolve().parent / "independent" / "megatron" / "gen.py"
    folder = tmp_path_factory.mktemp("gen_a")

    def capture(scenario: str, seed: int = 0) -> Path:
        cap = folder / f"{scenario}.{seed}.cwcap"
        if not cap.exists():
            subprocess.run([sys.executable, str(gen), scenario, str(cap)], check=True, capture_output=True,
                           env={**os.environ, "SEED": str(seed)})
        return cap

    return capture


@pytest.fixture(scope="session")
def gen_i(tmp_path_factory):
    """A capture of the ninth independent generator (`tests/independent/sched`) and its truth
    (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "sched", 1)


@pytest.fixture(scope="session")
def gen_j(tmp_path_factory):
    """A capture of the tenth independent generator (`tests/independent/frontier`) and its
    truth (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "frontier", 1)


@pytest.fixture(scope="session")
def gen_k(tmp_path_factory):
    """A capture of the eleventh independent generator (`tests/independent/origin`) and its
    truth (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "origin", 1)


@pytest.fixture(scope="session")
def gen_l(tmp_path_factory):
    """A capture of the twelfth independent generator (`tests/independent/longrun`) and its
    truth (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "longrun", 1)


@pytest.fixture(scope="session")
def gen_m(tmp_path_factory):
    """A capture of the thirteenth independent generator (`tests/independent/rl`) and its truth
    (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "rl", 1)


@pytest.fixture(scope="session")
def gen_n(tmp_path_factory):
    """A capture of the fourteenth independent generator (`tests/independent/infra`) and its
    truth (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "infra", 1)


@pytest.fixture(scope="session")
def gen_o(tmp_path_factory):
    """A capture of the fifteenth independent generator (`tests/independent/tenants`: many jobs
    in one capture) and its truth (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "tenants", 1)


@pytest.fixture(scope="session")
def gen_q(tmp_path_factory):
    """A capture of the seventeenth independent generator (`tests/independent/recsys`:
    recommendation-model training) and its truth (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "recsys", 1)


@pytest.fixture(scope="session")
def gen_r(tmp_path_factory):
    """A capture of the eighteenth independent generator (`tests/independent/islands`:
    multi-island training over a WAN) and its truth (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "islands", 1)


@pytest.fixture(scope="session")
def gen_s(tmp_path_factory):
    """A capture of the nineteenth independent generator (`tests/independent/stacks`: DeepSpeed,
    JAX/XLA and gloo stacks) and its truth (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "stacks", 1)


@pytest.fixture(scope="session")
def gen_u(tmp_path_factory):
    """A capture of the twenty-first independent generator (`tests/independent/hoststall`: the
    host between collectives, training-loop control flow) and its truth (its default base seed 1)."""
    return _scenario_truth(tmp_path_factory, "hoststall", 1)
