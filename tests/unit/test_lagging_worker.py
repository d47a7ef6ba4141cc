"""Two workers share a job's comms (calls and heartbeats on two partitions), and one of them
runs seconds behind the other: stage 2 (on the first) gets the comms of the second as they
were seconds ago. It judges the job's waits as of what every comm's reports tell
(`JobStage.as_of`), not at the newest report's time: the culprit is named, alone, once.

Judged at the job's now before, with the second worker 2 s behind: the hang was never named
(the comms of the worker behind were stale), or a victim was named with the root (its wait,
in a comm of the worker behind, not reported yet: it seemed silent)."""

from __future__ import annotations

import zlib

import pytest
from aiokafka.structs import TopicPartition

from commwatch import topics
from commwatch.capture import Message
from commwatch.metrics import StreamMetrics
from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.streams.app import REPORTS, Pipeline
from commwatch.streams.report_out import bundles, encode_bundle

S = 10**9


def _two_workers(settings, behind_s: float, first: int) -> list[dict]:
    """A hung 8-rank job; partition `first` of calls and progress read by worker A (which
    runs stage 2 too), the other by worker B `behind_s` late. Returns A's incident events."""
    a, b = (Pipeline(settings, StreamMetrics(), wall_ns=lambda: 0) for _ in range(2))
    a.unread = b.unread = False
    t = settings.topics
    sim = simulate(JobSpec(job="j", tp=2, pp=2, dp=2, duration_s=40, step_s=0.5), [parse_fault("hang:rank=3,at=8s")])
    arrivals = []
    for i, msg in enumerate(sim.messages()):
        part = zlib.crc32(msg.key.encode()) % 2 if msg.topic in (topics.CALLS, topics.PROGRESS) else first
        arrivals.append((msg.ts_ns + (0 if part == first else int(behind_s * S)), i, part, msg))
    incidents: list[dict] = []

    def to_stage2(reports: list[dict], at: int) -> None:
        for bundle in bundles(reports):
            rep = Message(REPORTS, "j", bundle["ts_ns"], encode_bundle(bundle))
            a.wall_ns = lambda: at
            incidents.extend(a.job_message(REPORTS, rep, TopicPartition(t.name(REPORTS), 0)))

    for at, _, part, msg in sorted(arrivals):
        worker = a if part == first else b
        worker.wall_ns = lambda at=at: at
        if msg.topic in (topics.CALLS, topics.PROGRESS):
            reports, _ = worker.comm_messages([(msg.topic, msg, TopicPartition(t.name(msg.topic), part))])
            to_stage2(reports + worker.comm_tick(), at)
        else:
            incidents += a.job_message(msg.topic, msg, TopicPartition(t.name(msg.topic), 0))
        a.wall_ns = lambda at=at: at
        to_stage2(a.comm_tick(), at)
        incidents += a.job_tick()
    return incidents


@pytest.mark.parametrize("first", [0, 1])
@pytest.mark.parametrize("behind_s", [0.0, 2.0, 4.0])
def test_a_worker_seconds_behind_does_not_hide_the_hang_or_name_a_victim(settings, behind_s, first):
    incidents = _two_workers(settings, behind_s, first)
    opened = [(i["kind"], i["severity"], i["culprit_ranks"]) for i in incidents if i["status"] == "open"]
    assert opened == [("hang", "P0", [3])], opened
    assert all(i["culprit_ranks"] == [3] for i in incidents if i["kind"] == "hang"), incidents
