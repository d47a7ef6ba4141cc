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
from commwatch.bounds import HEX16, JOB_CHARS, MAX_INT, MAX_ITEMS, MAX_PHASE_MS, MAX_READING, NAME_CHARS
from commwatch.wire import MAX_RANKS, MAX_SEQ, MAX_TS_NS

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
