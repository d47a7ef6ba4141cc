"""Capture files (`.cwcap`, wire contract section 4): JSON Lines, one Kafka message a line.

Binary values (`cw.calls.v1`) are stored base64 in `value_b64`; JSON values inline as
`value`. Topics are stored under their contract names (without a deployment prefix).

>>> import io
>>> buf = io.StringIO()
>>> w = CaptureWriter(buf)
>>> w.write(Message("cw.steps.v1", "j1", 5, b'{"v":1}'))
>>> [m.topic for m in read_messages(io.StringIO(buf.getvalue()))]
['cw.steps.v1']
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Annotated, Iterator, NamedTuple

try:  # the pipeline extra; without it (a training image) lines are parsed by the checked parser
    import msgspec
except ImportError:  # pragma: no cover - exercised by the lean-install test
    msgspec = None

from commwatch import topics
from commwatch.wire import MAX_TS_NS

log = logging.getLogger(__name__)

BINARY_TOPICS = frozenset({topics.CALLS})


class Message(NamedTuple):
    """One Kafka message: contract topic name, key, produce time, raw value bytes."""

    topic: str
    key: str | None
    ts_ns: int
    value: bytes


class CaptureLineError(ValueError):
    """A capture line that is not a message; replay skips and counts it."""

    def __init__(self, lineno: int, reason: str):
        super().__init__(f"line {lineno}: {reason}")
        self.lineno = lineno
        self.reason = reason


class CaptureWriter:
    """Writes messages as capture lines to a text stream or a path."""

    def __init__(self, out: IO[str] | str | Path):
        self._own = not hasattr(out, "write")
        self.out: IO[str] = open(out, "w", encoding="utf-8") if self._own else out  # type: ignore[arg-type]
        self.count = 0

    def write(self, msg: Message) -> None:
        line: dict = {"topic": msg.topic, "key": msg.key, "ts_ns": int(msg.ts_ns)}
        if msg.topic in BINARY_TOPICS:
            line["value_b64"] = base64.b64encode(msg.value).decode("ascii")
        else:
            try:
                line["value"] = json.loads(msg.value)
            except (ValueError, RecursionError):  # keep what cannot be parsed, exactly as produced
                line["value_b64"] = base64.b64encode(msg.value).decode("ascii")
        self.out.write(json.dumps(line, separators=(",", ":")) + "\n")
        self.count += 1

    def close(self) -> None:
        if self._own:
            self.out.close()
        else:
            self.out.flush()

    def __enter__(self) -> "CaptureWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if msgspec is not None:
    class _Line(msgspec.Struct):
        """A well-formed capture line, parsed in C; a JSON `value` stays its raw bytes (it is
        decoded once, by the detector's decoder, not parsed here and written back)."""

        topic: str
        ts_ns: Annotated[int, msgspec.Meta(ge=0, lt=MAX_TS_NS)]
        key: str | None = None
        value_b64: str | msgspec.UnsetType = msgspec.UNSET
        value: msgspec.Raw = msgspec.Raw()

    _decode_line = msgspec.json.Decoder(_Line).decode
    _LINE_REFUSED: tuple = (msgspec.MsgspecError, ValueError, RecursionError)


def parse_line(line: str, lineno: int = 0) -> Message:
    """One capture line to a Message; raises `CaptureLineError`. A line the typed parser
    refuses is parsed again by `_parse_line_checked`, which names what is wrong."""
    if msgspec is None:
        return _parse_line_checked(line, lineno)
    try:
        obj = _decode_line(line)
    except _LINE_REFUSED:
        return _parse_line_checked(line, lineno)
    if obj.value_b64 is not msgspec.UNSET:
        try:
            value = base64.b64decode(obj.value_b64, validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise CaptureLineError(lineno, "value_b64 is not base64") from None
    elif len(obj.value):
        value = bytes(obj.value)
    else:
        raise CaptureLineError(lineno, "neither value nor value_b64")
    return Message(obj.topic, obj.key, obj.ts_ns, value)


def _parse_line_checked(line: str, lineno: int) -> Message:
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise CaptureLineError(lineno, f"not JSON ({exc.msg})") from None
    except RecursionError:
        raise CaptureLineError(lineno, "JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise CaptureLineError(lineno, "not a JSON object")
    topic, ts = obj.get("topic"), obj.get("ts_ns")
    if not isinstance(topic, str):
        raise CaptureLineError(lineno, "topic missing or not a string")
    if not isinstance(ts, int) or isinstance(ts, bool):
        raise CaptureLineError(lineno, "ts_ns missing or not an integer")
    if not 0 <= ts < MAX_TS_NS:  # the clock of replay: an absurd one would move every job's time
        raise CaptureLineError(lineno, "ts_ns negative or far in the future")
    key = obj.get("key")
    if key is not None and not isinstance(key, str):
        raise CaptureLineError(lineno, "key is not a string")
    if "value_b64" in obj:
        try:
            value = base64.b64decode(obj["value_b64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise CaptureLineError(lineno, "value_b64 is not base64") from None
    elif "value" in obj:
        try:
            value = json.dumps(obj["value"], separators=(",", ":")).encode("utf-8")
        except (RecursionError, ValueError):
            raise CaptureLineError(lineno, "value cannot be written back as JSON") from None
    else:
        raise CaptureLineError(lineno, "neither value nor value_b64")
    return Message(topic, key, ts, value)


@dataclass
class CaptureStats:
    lines: int = 0
    messages: int = 0
    bad_lines: list[CaptureLineError] = field(default_factory=list)


def read_messages(src: IO[str] | str | Path, stats: CaptureStats | None = None) -> Iterator[Message]:
    """Messages in file order; malformed lines are skipped and recorded in `stats`."""
    stats = stats if stats is not None else CaptureStats()
    own = not hasattr(src, "read")
    f: IO[str] = open(src, encoding="utf-8", errors="replace") if own else src  # type: ignore[arg-type]
    try:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            stats.lines += 1
            try:
                msg = parse_line(line, lineno)
            except CaptureLineError as exc:
                stats.bad_lines.append(exc)
                continue
            stats.messages += 1
            yield msg
    finally:
        if own:
            f.close()


def read_sorted(src: IO[str] | str | Path, stats: CaptureStats | None = None) -> list[Message]:
    """All messages sorted by `ts_ns` (stable), as replay consumes them."""
    msgs = list(read_messages(src, stats))
    msgs.sort(key=lambda m: m.ts_ns)
    return msgs
