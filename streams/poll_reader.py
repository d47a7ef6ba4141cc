"""The worker's input, read in polls straight from Kafka with aiokafka (the client faust
itself runs on), in the worker's own event loop: one reader for each half.

- comm half: `cw.calls.v1` and `cw.progress.v1`, consumer group `<prefix>commwatch-comm`;
- job half: `cw.internal.reports.v1`, `cw.topology.v1`, `cw.steps.v1` and `cw.hw.v1`, group
  `<prefix>commwatch-job`.

Partitions are assigned by range in both groups: the same partition number of each topic
goes to the same worker, so a comm (key `{job}/{comm}`) has its calls and heartbeats on one
worker, and a job (key `{job}`, one partitioner everywhere) its reports, topology, steps and
hw. (Assigned round-robin over all the partitions of both topics, the comm half's split them
whenever the workers did not divide the partitions evenly: three workers on four partitions
each, one worker read a comm's calls and another its heartbeats, and both reported on it to
stage 2.)

faust hands every message to its agents as one event (conductor, queues, sensors, a task
switch): about 190 us per message on the project's 2-core VM, more than the detector spends
on it, and each hop needs a turn of the event loop. A worker busy with calls left faust's
job agent so few turns that, under a 200k records/s load, it read 53 report bundles in a
minute and alerted nothing. A poll here returns up to `POLL_MAX` records (about 9 us per
message with decoding), is handled at once, and gives the loop a turn before the next:
the two halves alternate poll by poll, neither starves the other.

Offsets are committed after the records are processed (every `COMMIT_EVERY_S`), so a
worker that dies re-reads at most that much. A failure of the client (the broker gone,
a rebalance that could not complete) closes it, is logged, and a new one is started after
`RETRY_S`: the reader never ends while the worker runs.

>>> from commwatch.settings import Settings
>>> PollReader(Settings.load(env={}), ["cw.calls.v1", "cw.progress.v1"], group="commwatch-comm").group
'commwatch-comm'
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from commwatch.settings import Settings

log = logging.getLogger(__name__)

POLL_MAX = 2000  # records one poll returns at most
POLL_WAIT_MS = 20  # a poll waits this long for records at most
COMMIT_EVERY_S = 1.0
RETRY_S = 1.0


class PollReader:
    """One aiokafka consumer of `names` in consumer group `group` (with the topic prefix):
    `poll()` the records read, `processed` the last offset handed out per partition,
    `assignment()`, `highwater(tp)`, `position(tp)`. Partitions are assigned by range (the
    same partition numbers of every topic to one member)."""

    def __init__(self, settings: Settings, names: list[str], credentials: Any = None, *, group: str):
        self.settings = settings
        self.names = names
        self.credentials = credentials
        self.group = settings.topics.name(group)
        self.consumer: Any = None
        self.processed: dict[Any, int] = {}
        self._committed_at = 0.0
        self.failures = 0

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

        s = self.settings
        self.consumer = AIOKafkaConsumer(
            *self.names,
            bootstrap_servers=[b.strip() for b in s.kafka_bootstrap.split(",")],
            group_id=self.group,
            client_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=s.kafka_session_timeout_ms,
            heartbeat_interval_ms=max(500, s.kafka_session_timeout_ms // 6),
            rebalance_timeout_ms=max(6000, s.kafka_session_timeout_ms),
            max_poll_records=POLL_MAX,
            max_partition_fetch_bytes=max(s.max_message_bytes + 4096, 4_194_304),
            fetch_max_bytes=max(s.max_message_bytes + 4096, 52_428_800),
            metadata_max_age_ms=5000,  # topics re-created after a broker restart are found soon
            partition_assignment_strategy=(RangePartitionAssignor,),
            **credentials_to_aiokafka_auth(self.credentials),
        )
        await self.consumer.start()
        self._committed_at = time.monotonic()

    async def stop(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            try:
                await consumer.stop()
            except Exception:  # noqa: BLE001 - a client that failed may fail to stop too
                log.debug("reader %s: stopping the consumer failed", self.group, exc_info=True)

    async def poll(self) -> list[tuple[Any, list]]:
        """The records of one poll per partition: [(topic partition, records)], each record
        with topic, partition, offset, timestamp (ms), key and value; starts the consumer first when there is none. Commits
        what earlier polls handed out, at most every `COMMIT_EVERY_S`. A client failure is
        logged, the client closed and an empty poll returned after `RETRY_S`."""
        try:
            if self.consumer is None:
                await self.start()
            if time.monotonic() - self._committed_at >= COMMIT_EVERY_S:
                self._committed_at = time.monotonic()
                await self._commit()
            got = await self.consumer.getmany(timeout_ms=POLL_WAIT_MS, max_records=POLL_MAX)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - see the docstring
            self.failures += 1
            log.warning("reader %s: %s: %s; restarting its consumer in %g s", self.group, type(exc).__name__, exc,
                        RETRY_S)
            await self.stop()
            await asyncio.sleep(RETRY_S)
            return []
        out = [(tp, records) for tp, records in got.items() if records]
        for tp, records in out:
            self.processed[tp] = records[-1].offset
        # records already fetched come back without the poll ever suspending: under load one
        # half would keep the loop, and the other, the timers and the producers would starve
        await asyncio.sleep(0)
        return out

    async def _commit(self) -> None:
        """Commit what was handed out. A commit refused during a rebalance is not a failure of
        the client: the partitions' next owner re-reads at most `COMMIT_EVERY_S` of them."""
        from aiokafka.errors import CommitFailedError, IllegalStateError, RebalanceInProgressError

        try:
            await self.consumer.commit()
        except (CommitFailedError, IllegalStateError, RebalanceInProgressError) as exc:
            log.info("reader %s: commit skipped (%s)", self.group, type(exc).__name__)

    def assignment(self) -> set:
        return set(self.consumer.assignment()) if self.consumer is not None else set()

    def highwater(self, tp: Any) -> int | None:
        return self.consumer.highwater(tp) if self.consumer is not None else None

    async def position(self, tp: Any) -> int | None:
        return await self.consumer.position(tp) if self.consumer is not None else None
