"""Partitions that went to another worker in a rebalance: the worker lets go of what it held
for them, and says nothing more of it (the worker that reads them now does)."""

from __future__ import annotations

from aiokafka.structs import TopicPartition

from commwatch import topics
from commwatch.capture import Message
from commwatch.metrics import StreamMetrics
from commwatch.producers.simulate import JobSpec, parse_fault, simulate
from commwatch.streams.app import LET_GO_S, REPORTS, Pipeline
from commwatch.streams.report_out import bundles, encode_bundle


def _fed(settings, part_of) -> tuple[Pipeline, list[dict]]:
    """A pipeline fed a job that hangs: its calls and heartbeats on the partitions `part_of`
    gives each comm, stage 1's reports handed to stage 2 through partition 0 of the reports."""
    pipe = Pipeline(settings, StreamMetrics(), wall_ns=lambda: 0)
    pipe.unread = False
    t = settings.topics
    sim = simulate(JobSpec(job="j", tp=2, pp=2, dp=2, duration_s=14, step_s=0.5), [parse_fault("hang:rank=3,at=4s")])
    incidents: list[dict] = []
    for msg in sim.messages():
        base = msg.topic
        pipe.wall_ns = lambda m=msg: m.ts_ns  # received as sent
        if base in (topics.CALLS, topics.PROGRESS):
            tp = TopicPartition(t.name(base), part_of(msg.key))
            reports, _ = pipe.comm_messages([(base, msg, tp)])
            for b in bundles(reports + pipe.comm_tick()):
                rep = Message(REPORTS, "j", b["ts_ns"], encode_bundle(b))
                incidents += pipe.job_message(REPORTS, rep, TopicPartition(t.name(REPORTS), 0))
        else:
            incidents += pipe.job_message(base, msg, TopicPartition(t.name(base), 0))
    return pipe, incidents


def test_comms_and_jobs_of_partitions_gone_elsewhere_are_let_go_silently(settings):
    part_of = lambda key: hash(key.split("/")[1]) % 2  # noqa: E731 - two partitions of calls and progress
    pipe, incidents = _fed(settings, part_of)
    assert any(i["kind"] == "hang" and i["status"] == "open" for i in incidents)
    det, t = pipe.detector, settings.topics
    comms = set(det.comm_stage.comms)
    on0 = {k for k in comms if part_of(f"j/{k[1]:016x}") == 0}
    assert on0 and on0 != comms
    pipe.let_go(set(), set(), mono=0.0)  # a rebalance under way: nothing assigned for now, nothing let go
    assert set(det.comm_stage.comms) == comms and "j" in det.job_stage.jobs
    comm_now = {TopicPartition(t.calls, 1), TopicPartition(t.progress, 1)}
    job_now = {TopicPartition(t.name(REPORTS), 0), TopicPartition(t.topology, 0)}
    pipe.let_go(comm_now, job_now, mono=1.0)  # partition 0 of calls and progress away: for now
    assert set(det.comm_stage.comms) == comms
    # ... and meanwhile not reported: the worker that reads it now does
    later = det.comm_clocks.stamp("j") + 2 * 10**9
    pipe.wall_ns = lambda: later
    reported = {(r["job"], int(r["comm"], 16)) for r in pipe.comm_tick() if "comm" in r}
    assert reported and not reported & on0, reported
    pipe.let_go(comm_now, job_now, mono=1.0 + LET_GO_S)  # away long enough: gone elsewhere
    assert set(det.comm_stage.comms) == comms - on0
    assert "j" in det.job_stage.jobs  # its job's partitions are still here
    pipe.let_go(comm_now, {TopicPartition(t.name(REPORTS), 1)}, mono=100.0)
    assert "j" in det.job_stage.jobs
    # away for now: held, nothing concluded for want of data (before, its hang resolved
    # "not seen" here while the worker that took its partitions carried it on)
    assert pipe.held("j") and pipe.job_tick() == []
    pipe.let_go(comm_now, {TopicPartition(t.name(REPORTS), 1)}, mono=100.0 + LET_GO_S)
    assert "j" not in det.job_stage.jobs and "j" not in pipe.jobs
    # nothing is said of what was let go: no resolution for want of data, however long after
    assert det.job_tick(10**19) == [] and pipe.job_tick() == []


def test_the_partition_bookkeeping_forgets_what_the_detector_forgot(settings):
    """A worker watching job after job keeps their partitions only while the detector holds
    them (before, every comm and job ever seen, and every job counted as watched)."""
    pipe, _ = _fed(settings, lambda key: 0)
    assert "j" in pipe.jobs and pipe.job_parts and pipe.comm_parts
    pipe.forget()  # the detector still holds the job: nothing dropped
    assert "j" in pipe.jobs and set().union(*pipe.comm_parts.values()) == set(pipe.detector.comm_stage.comms)
    pipe.detector._forget("j")  # gone from the detector (idle, ended)
    pipe.let_go(set(), set(), mono=1e6)  # the periodic pass
    assert not pipe.jobs and not pipe.job_parts and not pipe.comm_parts
