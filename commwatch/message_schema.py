"""Typed decoders (msgspec) for the JSON messages that arrive at rate: progress, steps, hw,
topology. One call parses and checks a message in C, about 20 times faster than `json`
plus the field checks of `messages`, and gives the same plain dicts.

The rules of `messages` stay the authority: every bound here is that of the matching
`validate_*`, so what these decoders accept the validators accept too (a test runs both
over valid and hostile messages). Rules across fields (a step that ends before it began,
a rank beyond the world size) are checked after decoding, as there. A message these
decoders refuse is decoded again the slow way, which names the field and the reason.
Unknown fields are dropped (the validators ignore them too).
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired, TypedDict, Union

import msgspec

from commwatch import topics
from commwatch.wire import MAX_RANKS, MAX_SEQ, MAX_TS_NS

# Bounds of a sane message (`messages` checks the same; the call record's are in wire)
MAX_JOB_LEN = 256  # a job id: 1-256 characters, no control character, no '/' (it ends at the key's '/')
MAX_NAME_LEN = 256  # node names, GPU ids, incident ids, map keys
MAX_ITEMS = 4096  # entries of a map (phases, coords, ib devices) or of a p2p list
MAX_PHASE_MS = 1e9  # a phase of one iteration longer than 11 days is not a measurement
MAX_READING = 1e18  # any hardware reading (bytes, counters, watts, MHz)
MAX_INT = 2**63 - 1
JOB_CHARS = r"[^\x00-\x1f\x7f/]{1,%d}" % MAX_JOB_LEN
NAME_CHARS = r"[^\x00-\x1f\x7f]{0,%d}" % MAX_NAME_LEN
HEX16 = r"[0-9a-f]{16}"

Job = Annotated[str, msgspec.Meta(pattern=rf"^{JOB_CHARS}\Z")]
Name = Annotated[str, msgspec.Meta(pattern=rf"^{NAME_CHARS}\Z")]
Key = Annotated[str, msgspec.Meta(pattern=rf"^(?=.){NAME_CHARS}\Z")]  # a non-empty name
Hex16 = Annotated[str, msgspec.Meta(pattern=rf"^{HEX16}\Z")]
Time = Annotated[int, msgspec.Meta(ge=0, lt=MAX_TS_NS)]
Rank = Annotated[int, msgspec.Meta(ge=0, lt=MAX_RANKS)]
Seq = Annotated[int, msgspec.Meta(ge=-1, lt=MAX_SEQ)]
Count = Annotated[int, msgspec.Meta(ge=0, lt=MAX_INT)]
Reading = Union[Annotated[int, msgspec.Meta(ge=0, lt=int(MAX_READING))], Annotated[float, msgspec.Meta(ge=0, lt=MAX_READING)]]
PhaseMs = Union[Annotated[int, msgspec.Meta(ge=0, lt=int(MAX_PHASE_MS))],
                Annotated[float, msgspec.Meta(ge=0, lt=MAX_PHASE_MS)]]


class P2P(TypedDict):
    peer: Rank
    op: Literal["send", "recv"]
    started: Seq
    completed: Seq


class RankProgress(TypedDict):
    rank: Rank
    started: Seq
    completed: Seq
    t_last_start_ns: NotRequired[Time | None]
    t_last_end_ns: NotRequired[Time | None]
    p2p: NotRequired[Annotated[list[P2P], msgspec.Meta(max_length=MAX_ITEMS)] | None]
    exited: NotRequired[bool | None]


class Progress(TypedDict):
    v: Literal[1]
    job: Job
    node: Name
    ts_ns: Time
    comm: Hex16
    ranks: Annotated[list[RankProgress], msgspec.Meta(max_length=MAX_RANKS)]


class Topology(TypedDict):
    v: Literal[1]
    job: Job
    ts_ns: Time
    rank: Annotated[int, msgspec.Meta(ge=0)]
    world_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_RANKS)]
    node: Name
    local_rank: NotRequired[Rank | None]
    gpu: NotRequired[Name | None]
    coords: NotRequired[Annotated[dict[Key, Rank], msgspec.Meta(max_length=MAX_ITEMS)] | None]


class Steps(TypedDict):
    v: Literal[1]
    job: Job
    rank: Rank
    iteration: Annotated[int, msgspec.Meta(ge=0, lt=MAX_SEQ)]
    t_start_ns: Time
    t_end_ns: Time
    phases: NotRequired[Annotated[dict[Key, PhaseMs], msgspec.Meta(max_length=MAX_ITEMS)] | None]


class IbCounters(TypedDict):
    tx_bytes: NotRequired[Count | None]
    rx_bytes: NotRequired[Count | None]
    symbol_errors: NotRequired[Count | None]


class Hw(TypedDict):
    v: Literal[1]
    job: Job
    node: Name
    ts_ns: Time
    rank: NotRequired[Rank | None]
    gpu: NotRequired[Name | None]
    ib: NotRequired[Annotated[dict[Key, IbCounters], msgspec.Meta(max_length=MAX_ITEMS)] | None]
    nvml_timeout: NotRequired[bool | None]
    sm_clock_mhz: NotRequired[Reading | None]
    mem_clock_mhz: NotRequired[Reading | None]
    power_w: NotRequired[Reading | None]
    temp_c: NotRequired[Reading | None]
    util_pct: NotRequired[Reading | None]
    cpu_pct: NotRequired[Reading | None]
    mem_used_bytes: NotRequired[Reading | None]
    throttle_reasons: NotRequired[Count | None]
    ecc_dbe: NotRequired[Count | None]
    xid: NotRequired[Count | None]
    nvlink_errors: NotRequired[Count | None]


def _steps_ok(msg: dict) -> bool:
    return msg["t_end_ns"] >= msg["t_start_ns"]


def _topology_ok(msg: dict) -> bool:
    return msg["rank"] < msg["world_size"]


# topic -> (decoder, the check across fields: False sends the message the slow way)
DECODERS = {
    topics.PROGRESS: (msgspec.json.Decoder(Progress).decode, None),
    topics.TOPOLOGY: (msgspec.json.Decoder(Topology).decode, _topology_ok),
    topics.STEPS: (msgspec.json.Decoder(Steps).decode, _steps_ok),
    topics.HW: (msgspec.json.Decoder(Hw).decode, None),
}

Refused = (msgspec.MsgspecError, ValueError, RecursionError)  # invalid UTF-8 raises UnicodeDecodeError
