"""The sink's batch: decoded messages buffered per table until a flush.

`SinkBatch.add()` decodes one message (raising `WireError` for the dead-letter topic),
`flush(target)` inserts every table's rows with a token derived from the Kafka offsets
the batch covers, so retrying a failed flush never doubles a row. A flush that raises
keeps the batch intact for the next attempt; once sealed, a batch takes no new messages,
so its tokens stay the same until it is written.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from commwatch import topics
from commwatch.capture import Message
from commwatch.decode import CallBatch, decode_message
from commwatch.sinks.clickhouse.rows import MS, ROW_TABLES, call_columns, calls_block, decode_window
from commwatch.sinks.clickhouse.writer import InsertTarget

SINK_TOPICS = (topics.ALERTS, topics.CALLS, topics.STEPS, topics.HW, topics.TOPOLOGY, topics.WINDOWS)


@dataclass
class SinkBatch:
    max_message_bytes: int | None = None
    calls: list[tuple[str, dict[str, np.ndarray]]] = field(default_factory=list)
    rows: dict[str, list[list]] = field(default_factory=lambda: defaultdict(list))
    n_rows: int = 0
    # (topic, partition) -> [first offset, next offset]
    spans: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    # job -> rank -> clock offset (ns), learned from window statistics; shared across batches
    offsets_ns: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))

    def note(self, topic: str, partition: int, offset: int) -> None:
        span = self.spans.get((topic, partition))
        if span is None:
            self.spans[(topic, partition)] = [offset, offset + 1]
        else:
            span[1] = max(span[1], offset + 1)

    def add(self, msg: Message) -> int:
        """Decode and buffer one message; returns the rows it added. Raises `WireError`."""
        if msg.topic == topics.WINDOWS:
            rows = decode_window(msg.value, msg.key)
            table, _cols, build = ROW_TABLES[topics.WINDOWS]
            for row in rows:
                self.offsets_ns[row["job"]][row["rank"]] = int(round(float(row.get("clock_offset_ms") or 0.0) * MS))
                self.rows[table].append(build(row))
            self.n_rows += len(rows)
            return len(rows)
        decoded = decode_message(msg, self.max_message_bytes)
        if isinstance(decoded, CallBatch):
            cols = call_columns(decoded, self.offsets_ns.get(decoded.job))
            n = len(cols["seq"])
            if n:
                self.calls.append((decoded.job, cols))
                self.n_rows += n
            return n
        table, _cols, build = ROW_TABLES[msg.topic]
        self.rows[table].append(build(decoded))
        self.n_rows += 1
        return 1

    def table_rows(self) -> dict[str, int]:
        """Rows buffered, by table."""
        out = {table: len(rows) for table, rows in self.rows.items() if rows}
        if self.calls:
            out["calls"] = sum(len(cols["seq"]) for _job, cols in self.calls)
        return out

    def token(self, table: str) -> str:
        spans = ",".join(f"{t}:{p}:{a}-{b}" for (t, p), (a, b) in sorted(self.spans.items()))
        return f"{table}-{hashlib.sha1(spans.encode()).hexdigest()}"

    def flush(self, target: InsertTarget) -> int:
        """Insert everything buffered; returns rows written. Raises on failure (batch kept)."""
        if self.calls:
            _n, block = calls_block(self.calls)
            target.insert_block("calls", block, self.token("calls"))
        for topic, (table, columns, _build) in ROW_TABLES.items():
            if self.rows.get(table):
                target.insert_rows(table, columns, self.rows[table], self.token(table))
        written = self.n_rows
        self.clear()
        return written

    def clear(self) -> None:
        self.calls = []
        self.rows = defaultdict(list)
        self.n_rows = 0
        self.spans = {}

    def commit_positions(self) -> dict[tuple[str, int], int]:
        return {k: b for k, (_a, b) in self.spans.items()}
