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
import re
from typing import Any, Callable

from commwatch import topics
from commwatch.bounds import (HEX16, JOB_CHARS, MAX_INT, MAX_ITEMS, MAX_JOB_LEN, MAX_NAME_LEN, MAX_PHASE_MS,
                                      MAX_READING, NAME_CHARS)
from commwatch.wire import MAX_RANKS, MAX_SEQ, MAX_TS_NS, WireError

INT = "int"
NUM = "number"
STR = "str"
OBJ = "object"
LIST = "list"
BOOL = "bool"
INC_KINDS = ("hang", "comm_hang", "slow_rank", "slow_link", "node_lost", "hw_fault", "job_stalled")
SEVERITIES = ("P0", "P1", "P2", "P3")
STATUSES = ("open", "update", "resolved")
P2P_OPS = ("send", "recv")

MAX_SUMMARY_LEN = 8192
_JOB_RE = re.compile(JOB_CHARS)
_NAME_RE = re.compile(NAME_CHARS)
_SUMMARY_BAD = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_HEX16 = re.compile(HEX16)


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
            raise WireError("bad_field", f"{where}.{name} is {_show(msg[name])}, expected {kind}")
    for name, kind in optional.items():
        if name in msg and msg[name] is not None and not _type_ok(msg[name], kind):
            raise WireError("bad_field", f"{where}.{name} is {_show(msg[name])}, expected {kind}")


def _show(value: Any) -> str:
    """A value for an error message, cut short (an error never carries a whole payload)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _version(msg: dict) -> None:
    if msg.get("v") != 1:
        raise WireError("bad_version", f"message version {_show(msg.get('v'))} is not 1")


def _time(msg: dict, where: str, *names: str) -> None:
    for name in names:
        t = msg.get(name)
        if t is not None and not (0 <= t < MAX_TS_NS):
            raise WireError("bad_time", f"{where}.{name} = {t} is negative or far in the future")


def _range(msg: dict, where: str, name: str, lo: int | float, hi: int | float, reason: str = "bad_field") -> None:
    """`msg[name]`, when present, lies in [lo, hi)."""
    value = msg.get(name)
    if value is not None and not (lo <= value < hi):
        raise WireError(reason, f"{where}.{name} = {_show(value)} is outside [{lo}, {hi})")


def _job(msg: dict, where: str) -> None:
    job_id_ok(msg["job"], f"{where}.job")


def job_id_ok(job: str, where: str = "job") -> str:
    """`job` if it is a valid job id; raises `WireError("bad_job")`."""
    if not _JOB_RE.fullmatch(job):
        raise WireError("bad_job", f"{where} {_show(job)} is not 1-{MAX_JOB_LEN} characters without '/' "
                                   "or control characters")
    return job


def _name(msg: dict, where: str, name: str, empty_ok: bool = True) -> None:
    value = msg.get(name)
    if value is None:
        return
    if not _NAME_RE.fullmatch(value) or (not value and not empty_ok):
        least = 1 if not empty_ok else 0
        raise WireError("bad_name", f"{where}.{name} {_show(value)} is not {least}-{MAX_NAME_LEN} characters "
                                    "without control characters")


def _items(obj: dict, where: str) -> None:
    if len(obj) > MAX_ITEMS:
        raise WireError("too_many", f"{where} has {len(obj)} entries (at most {MAX_ITEMS})")
    for key in obj:
        if not _NAME_RE.fullmatch(key) or not key:
            raise WireError("bad_name", f"{where} has the key {_show(key)}")


def _comm_hex(value: str, where: str) -> None:
    if not _HEX16.fullmatch(value):
        raise WireError("bad_field", f"{where} {_show(value)} is not 16 lowercase hex digits")


def validate_progress(msg: Any) -> dict:
    _check(msg, "progress", {"v": INT, "job": STR, "node": STR, "ts_ns": INT, "comm": STR, "ranks": LIST}, {})
    _version(msg)
    _job(msg, "progress")
    _name(msg, "progress", "node")
    _time(msg, "progress", "ts_ns")
    _comm_hex(msg["comm"], "progress.comm")
    if len(msg["ranks"]) > MAX_RANKS:
        raise WireError("too_many", f"progress.ranks has {len(msg['ranks'])} entries (at most {MAX_RANKS})")
    for i, r in enumerate(msg["ranks"]):
        where = f"progress.ranks[{i}]"
        _check(r, where, {"rank": INT, "started": INT, "completed": INT},
               {"t_last_start_ns": INT, "t_last_end_ns": INT, "p2p": LIST, "exited": BOOL})
        _range(r, where, "rank", 0, MAX_RANKS, "bad_rank")
        _range(r, where, "started", -1, MAX_SEQ, "bad_seq")
        _range(r, where, "completed", -1, MAX_SEQ, "bad_seq")
        _time(r, where, "t_last_start_ns", "t_last_end_ns")
        p2p = r.get("p2p") or ()
        if len(p2p) > MAX_ITEMS:
            raise WireError("too_many", f"{where}.p2p has {len(p2p)} entries (at most {MAX_ITEMS})")
        for j, p in enumerate(p2p):
            pw = f"{where}.p2p[{j}]"
            _check(p, pw, {"peer": INT, "op": STR, "started": INT, "completed": INT}, {})
            _range(p, pw, "peer", 0, MAX_RANKS, "bad_peer")
            if p["op"] not in P2P_OPS:
                raise WireError("bad_field", f"{pw}.op {_show(p['op'])} is not 'send' or 'recv'")
            _range(p, pw, "started", -1, MAX_SEQ, "bad_seq")
            _range(p, pw, "completed", -1, MAX_SEQ, "bad_seq")
    return msg


def validate_topology(msg: Any) -> dict:
    _check(
        msg,
        "topology",
        {"v": INT, "job": STR, "ts_ns": INT, "rank": INT, "world_size": INT, "node": STR},
        {"local_rank": INT, "gpu": STR, "coords": OBJ},
    )
    _version(msg)
    _job(msg, "topology")
    _name(msg, "topology", "node")
    _name(msg, "topology", "gpu")
    _time(msg, "topology", "ts_ns")
    _range(msg, "topology", "world_size", 1, MAX_RANKS + 1, "bad_rank")
    if not (0 <= msg["rank"] < msg["world_size"]):
        raise WireError("bad_rank", f"topology.rank {msg['rank']} outside world_size {msg['world_size']}")
    _range(msg, "topology", "local_rank", 0, MAX_RANKS, "bad_rank")
    coords = msg.get("coords") or {}
    _items(coords, "topology.coords")
    for k, v in coords.items():
        if not _type_ok(v, INT) or not (0 <= v < MAX_RANKS):
            raise WireError("bad_field", f"topology.coords.{k} is {_show(v)}, expected an int in [0, {MAX_RANKS})")
    return msg


def validate_steps(msg: Any) -> dict:
    _check(
        msg,
        "steps",
        {"v": INT, "job": STR, "rank": INT, "iteration": INT, "t_start_ns": INT, "t_end_ns": INT},
        {"phases": OBJ},
    )
    _version(msg)
    _job(msg, "steps")
    _range(msg, "steps", "rank", 0, MAX_RANKS, "bad_rank")
    _range(msg, "steps", "iteration", 0, MAX_SEQ, "bad_seq")
    _time(msg, "steps", "t_start_ns", "t_end_ns")
    if msg["t_end_ns"] < msg["t_start_ns"]:
        raise WireError("bad_time", "steps.t_end_ns is before t_start_ns")
    phases = msg.get("phases") or {}
    _items(phases, "steps.phases")
    for k, v in phases.items():
        if not _type_ok(v, NUM) or not (0 <= v < MAX_PHASE_MS):
            raise WireError("bad_field", f"steps.phases.{k} is {_show(v)}, expected milliseconds in "
                                         f"[0, {MAX_PHASE_MS:.0e})")
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
    _job(msg, "hw")
    _name(msg, "hw", "node")
    _name(msg, "hw", "gpu")
    _time(msg, "hw", "ts_ns")
    _range(msg, "hw", "rank", 0, MAX_RANKS, "bad_rank")
    for k in HW_NUMBERS:
        _range(msg, "hw", k, 0, MAX_READING)
    for k in HW_INTS:
        _range(msg, "hw", k, 0, MAX_INT)
    ib = msg.get("ib") or {}
    _items(ib, "hw.ib")
    for dev, counters in ib.items():
        _check(counters, f"hw.ib.{dev}", {}, {"tx_bytes": INT, "rx_bytes": INT, "symbol_errors": INT})
        for k in ("tx_bytes", "rx_bytes", "symbol_errors"):
            _range(counters, f"hw.ib.{dev}", k, 0, MAX_INT)
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
    _job(msg, "incident")
    _name(msg, "incident", "incident", empty_ok=False)
    _time(msg, "incident", "ts_ns", "opened_ns")
    if msg["ts_ns"] < msg["opened_ns"]:
        raise WireError("bad_time", "incident.ts_ns is before opened_ns")
    if msg["kind"] not in INC_KINDS:
        raise WireError("bad_field", f"incident.kind {_show(msg['kind'])} is not one of {INC_KINDS}")
    if msg["severity"] not in SEVERITIES:
        raise WireError("bad_field", f"incident.severity {_show(msg['severity'])} is not P0..P3")
    if msg["status"] not in STATUSES:
        raise WireError("bad_field", f"incident.status {_show(msg['status'])} is not one of {STATUSES}")
    if msg["comm"]:
        _comm_hex(msg["comm"], "incident.comm")
    if len(msg["summary"]) > MAX_SUMMARY_LEN or _SUMMARY_BAD.search(msg["summary"]):
        raise WireError("bad_field", f"incident.summary is longer than {MAX_SUMMARY_LEN} or holds control characters")
    ranks, nodes = msg["culprit_ranks"], msg["culprit_nodes"]
    if len(ranks) > MAX_RANKS or len(nodes) > MAX_RANKS:
        raise WireError("too_many", f"incident names {len(ranks)} ranks and {len(nodes)} nodes")
    if not all(_type_ok(r, INT) and 0 <= r < MAX_RANKS for r in ranks):
        raise WireError("bad_rank", f"incident.culprit_ranks holds something not a rank in [0, {MAX_RANKS})")
    if not all(isinstance(n, str) and _NAME_RE.fullmatch(n) for n in nodes):
        raise WireError("bad_name", "incident.culprit_nodes holds something not a node name")
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


_typed_decoders: dict | None = None
_REFUSED: tuple = ()


def _typed() -> dict:
    """The typed decoders, when msgspec is installed (the pipeline and agent extras); the
    base install (a training image) decodes with the checks alone."""
    global _typed_decoders, _REFUSED
    if _typed_decoders is None:
        try:
            from commwatch import message_schema
        except ImportError:
            _typed_decoders = {}
        else:
            _typed_decoders, _REFUSED = message_schema.DECODERS, message_schema.Refused
    return _typed_decoders


def decode(base_topic: str, value: bytes | str) -> dict:
    """Parse and validate a JSON message of `base_topic` (a contract topic name). The topics
    that arrive at rate take the typed decoders of `message_schema` first; a message they
    refuse is parsed again here, which names the field and the reason."""
    fast = _typed().get(base_topic)
    if fast is not None:
        decode_typed, across = fast
        try:
            msg = decode_typed(value)
        except _REFUSED:
            pass
        else:
            if across is None or across(msg):
                return msg
    try:
        validator = VALIDATORS[base_topic]
    except KeyError:
        raise WireError("unknown_topic", f"{base_topic} carries no JSON message") from None
    return validator(loads(value))


def dumps(msg: dict) -> bytes:
    return json.dumps(msg, separators=(",", ":"), allow_nan=False).encode("utf-8")
