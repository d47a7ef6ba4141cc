"""Decode one Kafka message of any contract topic, exactly as the live pipeline does.

Live workers and `commwatch replay` both call `decode_message`; whatever raises
`WireError` here goes to the dead-letter topic (live) or is skipped and counted (replay).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commwatch import messages, topics
from commwatch.capture import Message
from commwatch.wire import WireError, decode_batch


@dataclass(frozen=True)
class CallBatch:
    """A decoded `cw.calls.v1` message."""

    job: str
    comm: int
    records: np.ndarray


def message_job(msg: Message) -> str:
    """The job a message belongs to, from its key (`{job}` or `{job}/{comm}`)."""
    key = msg.key or ""
    return key.rpartition("/")[0] if msg.topic in (topics.CALLS, topics.PROGRESS) else key


def decode_message(msg: Message, max_bytes: int | None = None) -> CallBatch | dict:
    """A `CallBatch` for calls, a validated dict for JSON topics; raises `WireError`."""
    if max_bytes is not None and len(msg.value) > max_bytes:
        raise WireError("oversized", f"value of {len(msg.value)} bytes exceeds the {max_bytes}-byte limit")
    if msg.topic == topics.CALLS:
        job, comm = topics.split_comm_key(msg.key)
        return CallBatch(job, comm, decode_batch(msg.value, comm))
    obj = messages.decode(msg.topic, msg.value)
    key_job = message_job(msg)
    if msg.topic == topics.PROGRESS:
        job, comm = topics.split_comm_key(msg.key)
        if obj["comm"] != f"{comm:016x}":
            raise WireError("comm_mismatch", f"progress.comm {obj['comm']} differs from key comm {comm:016x}")
    if key_job and obj.get("job") not in (None, key_job):
        raise WireError("job_mismatch", f"message job {obj.get('job')!r} differs from key job {key_job!r}")
    return obj
