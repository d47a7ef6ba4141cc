"""Dead-lettering: a message that cannot be decoded goes to `cw.deadletter.v1` unchanged.

The original key and value are kept byte for byte; headers say why and where it came from:

- `cw-error`: `<reason>: <detail>` (the `WireError` of `commwatch.decode`)
- `cw-source-topic`, `cw-source-partition`, `cw-source-offset`: where it was consumed

>>> from commwatch.wire import WireError
>>> h = dict(error_headers(WireError("bad_magic", "got b'junk'"), "cw.calls.v1", 3, 17))
>>> h["cw-error"], h["cw-source-offset"]
(b"bad_magic: got b'junk'", b'17')
>>> parse_error(h["cw-error"])
('bad_magic', "got b'junk'")
"""

from __future__ import annotations

from commwatch.topics import ERROR_HEADER
from commwatch.wire import WireError

SOURCE_TOPIC = "cw-source-topic"
SOURCE_PARTITION = "cw-source-partition"
SOURCE_OFFSET = "cw-source-offset"


def error_headers(err: WireError, topic: str, partition: int, offset: int) -> list[tuple[str, bytes]]:
    """The headers of a dead-lettered message (source topic as consumed, prefix included)."""
    return [
        (ERROR_HEADER, f"{err.reason}: {err.detail}".encode("utf-8", "replace")),
        (SOURCE_TOPIC, topic.encode()),
        (SOURCE_PARTITION, str(partition).encode()),
        (SOURCE_OFFSET, str(offset).encode()),
    ]


def parse_error(header: bytes | str) -> tuple[str, str]:
    """(reason, detail) from a `cw-error` header value."""
    text = header.decode("utf-8", "replace") if isinstance(header, bytes) else header
    reason, _, detail = text.partition(": ")
    return reason, detail
