"""A comm's calls and heartbeats are read by one worker, however many workers share them.

Three readers of the comm half's group on the real embedded broker, four partitions per
topic (a worker count that does not divide them): each must hold the same partition numbers
of `cw.calls.v1` and `cw.progress.v1`, and together all of them. Assigned round-robin, one
reader held calls partition 1 and another progress partition 1: the comms keyed there had
their stage-1 state split between two workers.
"""

from __future__ import annotations

import asyncio

import pytest

from commwatch.kafka import ensure_topics
from commwatch.streams.app import stream_topics
from commwatch.streams.poll_reader import PollReader

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
