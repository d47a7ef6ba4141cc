"""Decode one Kafka message of any contract topic, exactly as the live pipeline does.

Live workers and `commwatch replay` both call `decode_message`; whatever raises
`WireError` here goes to the dead-letter topic (live) or is skipped and counted (replay).
"""

from __future__ import annotations

import numpy as np

from commwatch import messages, topics, wire
from commwatch.capture import Message
from commwatch.wire import WireError

KEY_CACHE = 4096  # parsed `{job}/{comm}` keys kept; the cache is emptied when full


class CallBatch:
    """A validated `cw.calls.v1` message: `count` records in `value` (the raw batch, header
    included). `records` is the read-only record array, built on first use; the detector
    joins raw bodies of many batches instead (`body()`), so small batches cost no numpy."""

    __slots__ = ("job", "comm", "count", "value", "_records")

    def __init__(self, job: str, comm: int, count: int, value: bytes):
        self.job = job
        self.comm = comm
        self.count = count
        self.value = value
        self._records: np.ndarray | None = None

    @property
    def records(self) -> np.ndarray:
        if self._records is None:
            self._records = np.frombuffer(self.value, dtype=wire.RECORD_DTYPE, count=self.count,
                                          offset=wire.BATCH_HEADER_SIZE)
        return self._records

    def body(self) -> memoryview:
        """The records' bytes, without the batch header."""
        return memoryview(self.value)[wire.BATCH_HEADER_SIZE:]


_keys: dict = {}


def _comm_key(key) -> tuple[str, int]:
    """`topics.split_comm_key`, remembered per key: a node sends the same keys all run long."""
    hit = _keys.get(key)
    if hit is None:
        hit = topics.split_comm_key(key)
        messages.job_id_ok(hit[0], "key job")
        if len(_keys) >= KEY_CACHE:
            _keys.clear()
        _keys[key] = hit
    return hit


def message_job(msg: Message) -> str:
    """The job a message belongs to, from its key (`{job}` or `{job}/{comm}`)."""
    key = msg.key or ""
    return key.rpartition("/")[0] if msg.topic in (topics.CALLS, topics.PROGRESS) else key


def decode_messages(msgs: list[Message], max_bytes: int | None = None) -> list[CallBatch | dict | WireError]:
    """`decode_message` over many messages (what one poll returned, a chunk of a capture):
    per message its result or the `WireError` it raises. The call batches of all of them are
    validated in one numpy pass (`wire.check_batches`), which costs about what one batch's
    check does: the per-message cost is the header and key only."""
    out: list = [None] * len(msgs)
    calls, values, comms = [], [], []
    for i, msg in enumerate(msgs):
        try:
            if msg.topic != topics.CALLS:
                out[i] = decode_message(msg, max_bytes)
                continue
            _envelope_ok(msg, max_bytes)
            job, comm = _comm_key(msg.key)
        except WireError as err:
            out[i] = err
            continue
        calls.append((i, job, comm))
        values.append(msg.value)
        comms.append(comm)
    if calls:
        for (i, job, comm), value, count in zip(calls, values, wire.check_batches(values, comms)):
            out[i] = count if isinstance(count, WireError) else CallBatch(job, comm, count, value)
    return out


def _envelope_ok(msg: Message, max_bytes: int | None) -> None:
    if not 0 <= msg.ts_ns < wire.MAX_TS_NS:  # the message's time drives the detectors' clocks
        raise WireError("bad_time", f"message time {msg.ts_ns} ns is negative or far in the future")
    if max_bytes is not None and len(msg.value) > max_bytes:
        raise WireError("oversized", f"value of {len(msg.value)} bytes exceeds the {max_bytes}-byte limit")


def decode_message(msg: Message, max_bytes: int | None = None) -> CallBatch | dict:
    """A `CallBatch` for calls, a validated dict for JSON topics; raises `WireError`.

    Every field is checked here (`wire.validate_records` for call records, `messages` for
    JSON): the key (`{job}/{comm}` or `{job}`, a valid job id), the size, and every record.
    One record that breaks a rule refuses the whole message: a producer that writes one
    absurd record is not trusted for the others, and the message goes to the dead-letter
    topic whole, as received, so nothing is silently half-applied."""
    _envelope_ok(msg, max_bytes)
    if msg.topic == topics.CALLS:
        job, comm = _comm_key(msg.key)
        return CallBatch(job, comm, wire.check_batch(msg.value, comm), msg.value)
    if msg.topic == topics.PROGRESS:
        key_job, comm = _comm_key(msg.key)
    else:
        key_job = messages.job_id_ok(msg.key, "key") if isinstance(msg.key, str) else None
        if key_job is None:
            raise WireError("bad_key", f"a {msg.topic} message needs its job as the key, got {msg.key!r}")
    obj = messages.decode(msg.topic, msg.value)
    if msg.topic == topics.PROGRESS and obj["comm"] != f"{comm:016x}":
        raise WireError("comm_mismatch", f"progress.comm {obj['comm']} differs from key comm {comm:016x}")
    if obj["job"] != key_job:
        raise WireError("job_mismatch", f"message job {obj['job']!r} differs from key job {key_job!r}")
    return obj
