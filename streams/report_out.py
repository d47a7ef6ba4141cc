"""The comm half's output: stage-1 reports (one bundle per job, `cw.internal.reports.v1`)
and window messages (`cw.internal.windows.v2`), produced with librdkafka.

Not through faust's producer: faust hands its buffer to the client one message per await,
and the comm half, busy with polls, leaves the loop few turns. Under a 200k records/s load
its buffer held 60-68k messages and stage-1 reports reached the job half minutes late, if
at all: no hang of another job was alerted. librdkafka batches in its own thread; a
`produce` is a few microseconds and never waits on the loop. With its local queue full
(the broker gone, or slower than the worker) the comm half waits here, sleeping, so the
loop runs on, until it drains: reports are never dropped (the job half needs each of them). Keys are `{job}` with the same
partitioner as faust's (`commwatch.kafka.producer`): a job's reports land on the partition
its topology, steps and hw come in on.
"""

from __future__ import annotations

import asyncio
import logging

import msgspec
import numpy as np

from commwatch import messages, topics
from commwatch.kafka import Sender
from commwatch.settings import Settings
from commwatch.streams.window_message import window_message

log = logging.getLogger(__name__)

REPORTS = "cw.internal.reports.v1"
FULL_WAIT_S = 0.01  # a full local queue is retried this often


def _plain(obj):
    """A numpy scalar in a report as the Python number it holds (msgspec encodes no numpy)."""
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"a report holds a {type(obj).__name__}")


# The internal bundles with msgspec: a third of `json.dumps`'s time for a bundle of reports
# (2-3 % of a loaded worker's CPU); the bytes are JSON all the same (exponents written `e-6`
# where `json` writes `e-06`), and read back equal.
encode_bundle = msgspec.json.Encoder(enc_hook=_plain).encode
decode_bundle = msgspec.json.Decoder().decode


def bundles(reports: list[dict]) -> list[dict]:
    """Stage-1 reports as one message per job (a job's state at one tick arrives at stage 2
    whole: a wait report is never judged without the reports of the same tick)."""
    by_job: dict[str, list[dict]] = {}
    for rep in reports:
        by_job.setdefault(rep["job"], []).append(rep)
    return [{"type": "bundle", "job": job, "ts_ns": max(r["ts_ns"] for r in reps), "reports": reps}
            for job, reps in by_job.items()]


class ReportOut:
    """`publish(reports)` (awaited: backpressure), `failed()` (undelivered, logged once each),
    `close()` (deliver what is queued)."""

    def __init__(self, settings: Settings):
        # Never create a topic: a broker that restarted empty would make the reports topic
        # with its default partition count before the worker (`TopicKeeper`) re-creates it
        # with the job topics' count, and a job's reports would land off its partition.
        # Metadata refreshed often, to see the re-created topics soon.
        self.sender = Sender(settings, settings.kafka_bootstrap, **{"allow.auto.create.topics": False,
                                                                   "topic.metadata.refresh.interval.ms": 2000})
        self.reports = settings.topics.name(REPORTS)
        self.windows = settings.topics.name(topics.WINDOWS)
        self.waits = 0  # times the local queue was full
        self._failed_seen = 0

    async def publish(self, reports: list[dict]) -> None:
        for bundle in bundles(reports):
            await self._send(self.reports, bundle["job"], encode_bundle(bundle), bundle["ts_ns"])
        for rep in reports:
            window = window_message(rep)
            if window is not None:
                await self._send(self.windows, rep["job"], messages.dumps(window), rep["ts_ns"])

    async def _send(self, topic: str, job: str, value: bytes, ts_ns: int) -> None:
        while not self.sender.send(topic, job.encode(), value, timestamp_ms=ts_ns // 1_000_000):
            self.waits += 1
            await asyncio.sleep(FULL_WAIT_S)

    def failed(self) -> int:
        """Messages the broker never took (delivery failed after librdkafka's retries); each new
        failure is logged."""
        self.sender.producer.poll(0)
        new = self.sender.failed - self._failed_seen
        if new:
            self._failed_seen = self.sender.failed
            log.warning("%d stage-1 report or window message(s) could not be delivered", new)
        return self.sender.failed

    def close(self, timeout_s: float = 5.0) -> int:
        """Deliver what is queued (up to `timeout_s`); returns messages left undelivered."""
        return self.sender.flush(timeout_s)
