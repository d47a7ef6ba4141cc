"""JSON messages of wire contract v1 (sections 2.2-2.6): validation and construction.

Messages stay plain dicts (cheap to build, to dump and to pass around); `validate()`
checks them against the contract and raises `WireError` naming the field.

>>> validate_steps({"v": 1, "job": "j", "rank": 0, "iteration": 3,
...                 "t_start_ns": 10, "t_end_ns": 20})["iteration"]
3
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

from commwatch import topics
from commwatch.wire import WireError

# Times beyond this (year ~2262 is int64's limit; 2200 is generous) are rejected as far-future.
MAX_TS_NS = 7_258_118_400_000_000_000

INT = "int"
NUM = "number"
STR = "str"
OBJ = "object"
LIST = "list"
BOOL = "bool"
INC_KINDS = ("hang", "comm_hang", "slow_rank", "slow_link", "node_lost", "hw_fault", "job_stalled")
SEVERITIES = ("P0", "P1", "P2", "P3")
STATUSES = ("open", "update", "resolved")


def _type_ok(value: Any, kind: str) -> bool:
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == STR:
        return isinstance(value, str)
    if kind == OBJ:
        return isinstance(value, dict)
    if kind == LIST:
        return isinstance(value, list)
    if kind == BOOL:
        return isinstance(value, bool)
    raise AssertionError(kind)


def _check(msg: Any, where: str, required: dict[str, str], optional: dict[str, str]) -> None:
    if not isinstance(msg, dict):
        raise WireError("not_object", f"{where} is {type(msg).__name__}, not a JSON object")
    for name, kind in required.items():
        if name not in msg:
            raise WireError("missing_field", f"{where}.{name} is missing")
        if not _type_ok(msg[name], kind):
            raise WireError("bad_field", f"{where}.{name} is {msg[name]!r}, expected {kind}")
    for name, kind in optional.items():
        if name in msg and msg[name] is not None and not _type_ok(msg[name], kind):
            raise WireError("bad_field", f"{where}.{name} is {msg[name]!r}, expected {kind}")


def _version(msg: dict) -> None:
    if msg.get("v") != 1:
        raise WireError("bad_version", f"message version {msg.get('v')!r} is not 1")


def _time(msg: dict, where: str, *names: str) -> None:
    for name in names:
        t = msg.get(name)
        if t is not None and not (0 <= t <= MAX_TS_NS):
            raise WireError("bad_time", f"{where}.{name} = {t} is negative or far in the future")


def _nonempty(msg: dict, where: str, name: str) -> None:
    if not msg[name]:
        raise WireError("bad_field", f"{where}.{name} is empty")


def validate_progress(msg: Any) -> dict:
    _check(msg, "progress", {"v": INT, "job": STR, "node": STR, "ts_ns": INT, "comm": STR, "ranks": LIST}, {})
    _version(msg)
    _nonempty(msg, "progress", "job")
    _time(msg, "progress", "ts_ns")
    if len(msg["comm"]) != 16:
        raise WireError("bad_field", f"progress.comm {msg['comm']!r} is not 16 hex digits")
    try:
        int(msg["comm"], 16)
    except ValueError:
        raise WireError("bad_field", f"progress.comm {msg['comm']!r} is not 16 hex digits") from None
    for i, r in enumerate(msg["ranks"]):
        where = f"progress.ranks[{i}]"
        _check(r, where, {"rank": INT, "started": INT, "completed": INT},
               {"t_last_start_ns": INT, "t_last_end_ns": INT, "p2p": LIST, "exited": BOOL})
        _time(r, where, "t_last_start_ns", "t_last_end_ns")
        if r["started"] < -1 or r["completed"] < -1:
            raise WireError("bad_field", f"{where}: started/completed below -1")
        for j, p in enumerate(r.get("p2p") or ()):
            _check(p, f"{where}.p2p[{j}]", {"peer": INT, "op": STR, "started": INT, "completed": INT}, {})
    return msg


def validate_topology(msg: Any) -> dict:
    _check(
        msg,
        "topology",
        {"v": INT, "job": STR, "ts_ns": INT, "rank": INT, "world_size": INT, "node": STR},
        {"local_rank": INT, "gpu": STR, "coords": OBJ},
    )
    _version(msg)
    _nonempty(msg, "topology", "job")
    _time(msg, "topology", "ts_ns")
    if not (0 <= msg["rank"] < msg["world_size"]):
        raise WireError("bad_field", f"topology.rank {msg['rank']} outside world_size {msg['world_size']}")
    for k, v in (msg.get("coords") or {}).items():
        if not _type_ok(v, INT):
            raise WireError("bad_field", f"topology.coords.{k} is {v!r}, expected int")
    return msg


def validate_steps(msg: Any) -> dict:
    _check(
        msg,
        "steps",
        {"v": INT, "job": STR, "rank": INT, "iteration": INT, "t_start_ns": INT, "t_end_ns": INT},
        {"phases": OBJ},
    )
    _version(msg)
    _nonempty(msg, "steps", "job")
    _time(msg, "steps", "t_start_ns", "t_end_ns")
    if msg["t_end_ns"] < msg["t_start_ns"]:
        raise WireError("bad_time", "steps.t_end_ns is before t_start_ns")
    for k, v in (msg.get("phases") or {}).items():
        if not _type_ok(v, NUM):
            raise WireError("bad_field", f"steps.phases.{k} is {v!r}, expected a finite number")
    return msg


HW_NUMBERS = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temp_c", "util_pct", "cpu_pct", "mem_used_bytes")
HW_INTS = ("throttle_reasons", "ecc_dbe", "xid", "nvlink_errors")


def validate_hw(msg: Any) -> dict:
    _check(
        msg,
        "hw",
        {"v": INT, "job": STR, "node": STR, "ts_ns": INT},
        {"rank": INT, "gpu": STR, "ib": OBJ, "nvml_timeout": BOOL, **{k: NUM for k in HW_NUMBERS},
         **{k: INT for k in HW_INTS}},
    )
    _version(msg)
    _nonempty(msg, "hw", "job")
    _time(msg, "hw", "ts_ns")
    for dev, counters in (msg.get("ib") or {}).items():
        _check(counters, f"hw.ib.{dev}", {}, {"tx_bytes": INT, "rx_bytes": INT, "symbol_errors": INT})
    return msg


def validate_incident(msg: Any) -> dict:
    _check(
        msg,
        "incident",
        {
            "v": INT, "job": STR, "incident": STR, "kind": STR, "severity": STR, "status": STR,
            "ts_ns": INT, "opened_ns": INT, "culprit_ranks": LIST, "culprit_nodes": LIST,
            "comm": STR, "summary": STR, "evidence": OBJ,
        },
        {},
    )
    _version(msg)
    _time(msg, "incident", "ts_ns", "opened_ns")
    if msg["kind"] not in INC_KINDS:
        raise WireError("bad_field", f"incident.kind {msg['kind']!r} is not one of {INC_KINDS}")
    if msg["severity"] not in SEVERITIES:
        raise WireError("bad_field", f"incident.severity {msg['severity']!r} is not P0..P3")
    if msg["status"] not in STATUSES:
        raise WireError("bad_field", f"incident.status {msg['status']!r} is not one of {STATUSES}")
    if not all(_type_ok(r, INT) for r in msg["culprit_ranks"]):
        raise WireError("bad_field", "incident.culprit_ranks holds a non-integer")
    if not all(isinstance(n, str) for n in msg["culprit_nodes"]):
        raise WireError("bad_field", "incident.culprit_nodes holds a non-string")
    return msg


VALIDATORS: dict[str, Callable[[Any], dict]] = {
    topics.PROGRESS: validate_progress,
    topics.TOPOLOGY: validate_topology,
    topics.STEPS: validate_steps,
    topics.HW: validate_hw,
    topics.ALERTS: validate_incident,
}


def _reject_constant(name: str) -> None:
    raise WireError("bad_number", f"JSON constant {name} is not allowed")


def loads(value: bytes | str) -> Any:
    """Parse JSON strictly: NaN and Infinity are errors, as is invalid UTF-8."""
    try:
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        return json.loads(value, parse_constant=_reject_constant)
    except WireError:
        raise
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError("bad_json", str(exc)[:200]) from None
    except RecursionError:
        raise WireError("bad_json", "JSON nested too deeply") from None


def decode(base_topic: str, value: bytes | str) -> dict:
    """Parse and validate a JSON message of `base_topic` (a contract topic name)."""
    try:
        validator = VALIDATORS[base_topic]
    except KeyError:
        raise WireError("unknown_topic", f"{base_topic} carries no JSON message") from None
    return validator(loads(value))


def dumps(msg: dict) -> bytes:
    return json.dumps(msg, separators=(",", ":"), allow_nan=False).encode("utf-8")
