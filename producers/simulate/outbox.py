"""A run's pending messages, released in (``ts_ns``, creation order) up to a time.

Items take one of two forms, chosen up front: `Message` tuples (`Simulation.messages()`,
Kafka) or finished capture lines (contract section 4, compact JSON, the exact bytes
`commwatch.capture.read_messages` reads back into those Messages). In the line form no
Message is built, the call batches of one flush are base64-encoded with one call, and the
batches a node agent flushes at one time are one item.

>>> import numpy as np
>>> box = Outbox(lines=False)
>>> box.json("cw.steps.v1", "j", [5, 3], ['{"a":1}', '{"a":2}'])
>>> [m.ts_ns for m in box.release(5)], [m.ts_ns for m in box.release(None)]
([3], [5])
"""

from __future__ import annotations

import binascii
import collections
import json

import numpy as np

from commwatch import topics
from commwatch.capture import Message
from commwatch.producers.simulate.records import Packed

try:  # SIMD base64 where installed (``pip install pybase64``): about 3x binascii's speed
    from pybase64 import b64encode as b64

    B64_IMPL = "pybase64"
except ImportError:
    B64_IMPL = "binascii"

    def b64(data: memoryview) -> bytes:
        return binascii.b2a_base64(data, newline=False)

B64_TAIL = tuple(b"=" * pad + b'"}\n' for pad in range(3))


class _Prefixes(dict):
    def __init__(self, topic: str):
        super().__init__()
        self.topic = json.dumps(topic)

    def __missing__(self, key: str) -> str:
        p = self[key] = f'{{"topic":{self.topic},"key":{json.dumps(key)},"ts_ns":'
        return p


class Outbox:
    def __init__(self, lines: bool):
        self.lines = lines
        self.by_topic: collections.Counter = collections.Counter()
        self.released = 0
        self._ts = np.zeros(0, dtype=np.int64)  # pending, sorted
        self._items: list = []
        self._new_ts: list[np.ndarray] = []
        self._new_items: list = []
        self._n = np.zeros(0, dtype=np.int64)  # messages per pending item
        self._new_n: list[np.ndarray] = []
        self._prefixes: dict[str, _Prefixes] = {}
        self._calls_prefixes: dict[str, bytes] = {}

    def prefixes(self, topic: str) -> _Prefixes:
        """key -> the start of a capture line of `topic`, up to ``"ts_ns":``."""
        p = self._prefixes.get(topic)
        if p is None:
            p = self._prefixes[topic] = _Prefixes(topic)
        return p

    # --- building items --------------------------------------------------------------------
    def json_items(self, topic: str, keys: str | list[str], ts: list[int], values: list[str]) -> list:
        """Items of JSON messages (values: compact JSON text); `keys` is one key for all or
        one per message."""
        if self.lines:
            pre = self.prefixes(topic)
            if isinstance(keys, str):
                p = pre[keys]
                return [f'{p}{t},"value":{v}}}\n'.encode() for t, v in zip(ts, values)]
            return [f'{pre[k]}{t},"value":{v}}}\n'.encode() for k, t, v in zip(keys, ts, values)]
        if isinstance(keys, str):
            return [Message(topic, keys, t, v.encode()) for t, v in zip(ts, values)]
        return [Message(topic, k, t, v.encode()) for k, t, v in zip(keys, ts, values)]

    def batch_items(self, keys: list[str], ts: list[int], packed: Packed, group: np.ndarray) -> tuple[list, list, list]:
        """`cw.calls.v1` messages, one per batch of `packed`, as one item per run of batches
        with the same `group` id (all of one run share a ``ts_ns``): returns the runs' ts,
        items and message counts.
        An item is a list of Messages, or a list of the pieces of the run's capture lines
        (views into one base64 text: nothing is copied until the lines are written)."""
        buf, start, size = packed.buf, packed.start, packed.size
        calls = topics.CALLS
        first = np.flatnonzero(np.diff(group, prepend=-1)) if len(group) else np.zeros(0, dtype=np.int64)
        bounds = np.append(first, len(group)).tolist()
        run_ts = [ts[i] for i in bounds[:-1]]
        run_n = np.diff(bounds).tolist()
        if not self.lines:
            msgs = [Message(calls, k, t, bytes(buf[a:a + n])) for k, t, a, n in
                    zip(keys, ts, start.tolist(), size.tolist())]
            return run_ts, [msgs[a:b] for a, b in zip(bounds, bounds[1:])], run_n
        # each batch starts at a multiple of 3 and is followed by zeros: its base64 is a slice
        # of the whole buffer's, with the last `pad` characters made '='
        enc = memoryview(b64(buf))
        pad = -size % 3
        enc_start = start // 3 * 4
        enc_end = enc_start + (size + pad) // 3 * 4 - pad
        pre = self._calls_prefixes
        for k in set(keys) - pre.keys():
            pre[k] = self.prefixes(calls)[k].encode()
        # a line is 4 pieces: prefix with the key, the run's time, base64 text, '"}' and newline
        run_ts_text = np.array([b'%d,"value_b64":"' % t for t in run_ts], dtype=object)
        pieces: list = [None] * (4 * len(keys))
        pieces[0::4] = [pre[k] for k in keys]
        pieces[1::4] = np.repeat(run_ts_text, run_n).tolist()
        pieces[2::4] = list(map(enc.__getitem__, map(slice, enc_start.tolist(), enc_end.tolist())))
        pieces[3::4] = [B64_TAIL[p] for p in pad.tolist()]
        return run_ts, [pieces[4 * a:4 * b] for a, b in zip(bounds, bounds[1:])], run_n

    # --- queue -----------------------------------------------------------------------------
    def add(self, ts: list[int] | np.ndarray, items: list, counts: list[int] | np.ndarray | None = None) -> None:
        """Queue `items` (each `counts` messages; one if None) stamped `ts`."""
        if items:
            self._new_ts.append(np.asarray(ts, dtype=np.int64))
            self._new_items += items
            self._new_n.append(np.ones(len(items), dtype=np.int64) if counts is None
                               else np.asarray(counts, dtype=np.int64))

    def json(self, topic: str, keys: str | list[str], ts: list[int], values: list[str]) -> None:
        self.add(ts, self.json_items(topic, keys, ts, values))
        self.by_topic[topic] += len(values)

    def batches(self, keys: list[str], ts: list[int], packed: Packed, group: np.ndarray) -> None:
        self.add(*self.batch_items(keys, ts, packed, group))
        self.by_topic[topics.CALLS] += len(keys)

    def release(self, before_ns: int | None) -> list:
        """Every pending message stamped before `before_ns` (all if None), in order: Messages,
        or bytes-like pieces of capture lines."""
        ts = np.concatenate([self._ts, *self._new_ts])
        counts = np.concatenate([self._n, *self._new_n])
        items = self._items + self._new_items
        self._new_ts, self._new_items, self._new_n = [], [], []
        order = np.argsort(ts, kind="stable")  # ties keep creation order
        ts = ts[order]
        n = len(ts) if before_ns is None else int(np.searchsorted(ts, before_ns, "left"))
        counts = counts[order]
        order = order.tolist()
        out = [items[i] for i in order[:n]]
        self._items = [items[i] for i in order[n:]]
        self._ts, self._n = ts[n:], counts[n:]
        self.released += int(counts[:n].sum())
        flat: list = []
        for x in out:
            if type(x) is list:
                flat += x
            else:
                flat.append(x)
        return flat
