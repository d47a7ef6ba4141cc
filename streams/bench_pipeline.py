"""`commwatch bench throughput`'s engine part: the worker's engine (`app.Pipeline`) on one core,
without the broker.

A simulated job's messages (generated first, not timed) are fed as a worker's two tasks feed
them: calls and heartbeats a poll at a time (`Pipeline.comm_messages`: one validation pass,
the detector's comm half), the reports it returns bundled and read back by the job half
(`report_out.bundles`, `Pipeline.job_message`: what `cw.internal.reports.v1` carries between
them), the job's other messages (steps, topology) through the job half, and both halves'
ticks every `TICK_POLLS` polls. What the live figures cost per record, both halves included,
without the consumer's own cost (fetch, decompression, `to_message`).

Two loads: the live bench's flood job (64 ranks) read as a backlog, as fast as it goes (its
event time runs far faster than the worker's clock, and each record pays for more of the
job's time than at wall-clock pace), and a 1024-rank job at wall-clock pace (what a real job
of that size sends). Call records/s per CPU second.
"""

from __future__ import annotations

import gc
import time

from commwatch.capture import Message
from commwatch.producers.simulate import JobSpec, simulate
from commwatch.settings import Settings

POLL = 2000  # messages a poll returns at most (`poll_reader.POLL_MAX`)
TICK_POLLS = 7  # polls between the worker's timer ticks at ~300k records/s (a tick every 0.5 s)


def pipeline_run(settings: Settings, tp: int, pp: int, dp: int, sim_s: float, wall_pace: bool) -> dict:
    """The engine over one simulated job: `wall_pace` False, the worker's clock stands 5 s after
    the job's last message (a backlog read as fast as it goes); True, it follows the job's
    messages (a job at wall-clock pace) and ticks every 0.5 s of it."""
    import river.drift  # noqa: F401  imported on a rank's first hot window: start-up's cost, not the rate's

    from commwatch.metrics import StreamMetrics
    from commwatch.streams.app import Pipeline
    from commwatch.streams.detect.detector import COMM_TOPICS
    from commwatch.streams.report_out import REPORTS, bundles, encode_bundle

    sim = simulate(JobSpec(job="engine", tp=tp, pp=pp, dp=dp, duration_s=sim_s, batch_s=settings.agent_flush_s))
    msgs = list(sim.messages())
    clock = [msgs[-1].ts_ns + 5_000_000_000]
    pipe = Pipeline(settings, StreamMetrics(), wall_ns=lambda: clock[0])
    pipe.unread = False  # every partition read: nothing held
    incidents = 0

    def job_half(reports: list[dict]) -> int:
        return sum(len(pipe.job_message(REPORTS, Message(REPORTS, b["job"], b["ts_ns"], encode_bundle(b))))
                   for b in bundles(reports))

    gc.collect()
    c0 = time.process_time()
    last_tick, polls = msgs[0].ts_ns, 0
    for i in range(0, len(msgs), POLL):
        poll = msgs[i:i + POLL]
        polls += 1
        if wall_pace:
            clock[0] = poll[-1].ts_ns
        comm = [(m.topic, m, None) for m in poll if m.topic in COMM_TOPICS]
        if comm:
            incidents += job_half(pipe.comm_messages(comm)[0])
        for m in poll:
            if m.topic not in COMM_TOPICS:
                incidents += len(pipe.job_message(m.topic, m))
        if (poll[-1].ts_ns - last_tick >= 500_000_000) if wall_pace else polls % TICK_POLLS == 0:
            last_tick = poll[-1].ts_ns
            incidents += job_half(pipe.comm_tick()) + len(pipe.job_tick())
    cpu = time.process_time() - c0
    n = sim.stats.records
    return {"ranks": tp * pp * dp, "sim_s": sim_s, "pace": "wall clock" if wall_pace else "backlog",
            "records": n, "records_detected": pipe.detector.stats["records"], "messages": len(msgs),
            "cpu_s": round(cpu, 2), "records_per_cpu_s": round(n / cpu), "incidents": incidents}


def pipeline_runs(settings: Settings, quick: bool) -> list[dict]:
    return [pipeline_run(settings, 8, 2, 4, 20.0 if quick else 60.0, False),
            pipeline_run(settings, 8, 4, 32, 4.0 if quick else 15.0, True)]
