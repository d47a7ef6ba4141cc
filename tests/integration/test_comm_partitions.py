"""A comm's calls and heartbeats are read by one worker, however many workers share them.

Three readers of the comm half's group on the real embedded broker, four partitions per
topic (a worker count that does not divide them): each must hold the same partition numbers
of `cw.calls.v1` and `cw.progress.v1`, and together all of them. Assigned round-robin, one
reader held calls partition 1 and another progress partition 1: the comms keyed there had
their stage-1 state split between two workers.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from commwatch.kafka import ensure_topics
from commwatch.settings import SettingsError
from commwatch.streams.app import check_partitions, stream_topics
from commwatch.streams.poll_reader import PollReader
from test_worker_live import worker_env

pytestmark = pytest.mark.integration
READERS = 3
PARTITIONS = 4


def test_three_readers_each_hold_a_comms_calls_and_heartbeats(broker, settings):
    s = settings.replace(kafka_bootstrap=broker.bootstrap, kafka_partitions=PARTITIONS, kafka_session_timeout_ms=6000)
    ensure_topics(s, broker.bootstrap, stream_topics(s))
    t = s.topics

    async def assigned() -> list[set]:
        readers = [PollReader(s, [t.calls, t.progress], group="commwatch-comm") for _ in range(READERS)]
        try:
            for r in readers:
                await r.start()
            for _ in range(300):  # polls keep the members' group sessions alive while they join
                await asyncio.gather(*(r.poll() for r in readers))
                got = [r.assignment() for r in readers]
                if all(got) and sum(map(len, got)) == 2 * PARTITIONS:
                    return got
            return [r.assignment() for r in readers]
        finally:
            for r in readers:
                await r.stop()

    got = asyncio.run(asyncio.wait_for(assigned(), 120))
    assert all(got), f"a reader got no partition: {got}"
    held = []
    for tps in got:
        calls = {tp.partition for tp in tps if tp.topic == t.calls}
        progress = {tp.partition for tp in tps if tp.topic == t.progress}
        assert calls == progress, f"a reader holds calls {sorted(calls)} but heartbeats {sorted(progress)}"
        held.extend(calls)
    assert sorted(held) == list(range(PARTITIONS))


def test_a_worker_refuses_topics_whose_partition_counts_differ(broker, settings, tmp_path):
    """Topics made before the worker with other counts (a producer that started first on a
    broker creating topics on first use): `commwatch worker` exits at start naming them, the
    key and the fix, instead of splitting comms between workers."""
    s = settings.replace(kafka_bootstrap=broker.bootstrap, kafka_partitions=2, data_dir=str(tmp_path))
    ensure_topics(s, broker.bootstrap, [s.topics.calls], partitions=3)
    ensure_topics(s, broker.bootstrap, stream_topics(s))
    with pytest.raises(SettingsError) as err:
        check_partitions(s)
    msg = str(err.value)
    assert msg.startswith("COMMWATCH_KAFKA_PARTITIONS") and f"{s.topics.calls} has 3" in msg \
        and f"{s.topics.progress} has 2" in msg
    proc = subprocess.run([sys.executable, "-m", "commwatch.cli", "worker", "--no-metrics"], env=worker_env(s),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "COMMWATCH_KAFKA_PARTITIONS" in proc.stderr, proc.stderr[-2000:]

    same = settings.replace(kafka_bootstrap=broker.bootstrap, kafka_partitions=2,
                            topic_prefix=settings.topic_prefix + "ok.")
    ensure_topics(same, broker.bootstrap, stream_topics(same))
    check_partitions(same)  # one count everywhere: nothing to refuse
