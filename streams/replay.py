"""`commwatch replay FILE.cwcap`: the live detectors over a capture, alerts as JSON Lines.

Messages are read with `capture.read_sorted` (stable by `ts_ns`), fed to the `Detector`,
and time advances with them (a tick at every message time); at the end every job judges
what it received once more (`Detector.finish`), time standing still. Every incident event is
written to stdout, one JSON object a line.

A capture ends, and it ends for each node at its own clock's reading of the end: sorted by
stamp, a node whose clock runs 3 s ahead of the others goes on for 3 s after they stop, and
they would seem lost (a P0 `node_lost` each). Live, arrival times say how far each node's
clock runs off (`node_lag.py`); a capture has none. So a node whose heartbeats run to within
`END_SPAN_S` of its job's last message is not judged lost after its last one
(`capture_ends`): a node lost in a capture's last `END_SPAN_S` is not reported (the hang of
its ranks is); one lost earlier is judged as live would.

Malformed lines and messages are skipped exactly as the live pipeline would dead-letter
them, counted by reason and reported on stderr; the exit status is 0 unless the file cannot
be read at all.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter

from commwatch import collector, messages, topics
from commwatch.capture import CaptureStats, read_sorted
from commwatch.decode import CallBatch, decode_messages
from commwatch.settings import Settings
from commwatch.streams.detect import Detector
from commwatch.wire import WireError

log = logging.getLogger(__name__)

CHUNK = 4096  # messages decoded together (their call batches validated in one pass)
END_SPAN_S = 15.0  # node clocks that disagree by up to this much end a capture "together" (`capture_ends`)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="capture file (.cwcap, JSON Lines)")
    p.add_argument("--stats", action="store_true", help="print records/s and counts to stderr")


def replay(path: str, settings: Settings, out, err, settle: bool = False) -> dict:
    """Replay `path`, writing alerts to `out`; returns counts. Raises OSError if unreadable.
    `settle`: a process of its own (`commwatch replay`): the collector is settled once the
    capture is read (`collector.settle`)."""
    stats = CaptureStats()
    t0 = time.perf_counter()
    msgs = read_sorted(path, stats)
    if settle:
        collector.settle()  # the capture, read: long-lived, left out of the collector's passes
    t1 = time.perf_counter()
    det = Detector(settings)
    skipped: Counter = Counter(f"line: {e.reason}" for e in stats.bad_lines)
    alerts = 0
    decoded = [d for lo in range(0, len(msgs), CHUNK) for d in decode_messages(msgs[lo:lo + CHUNK],
                                                                               settings.max_message_bytes)]
    det.job_stage.capture_ends = capture_ends(msgs, decoded)
    for msg, d in zip(msgs, decoded):
        if isinstance(d, WireError) and msg.topic != topics.ALERTS:
            skipped[f"{msg.topic}: {d.reason}"] += 1
    for lo in range(0, len(msgs), CHUNK):
        alerts += _write(out, det.feed_stream(msgs[lo:lo + CHUNK], decoded[lo:lo + CHUNK]))
    alerts += _write(out, det.finish())
    out.flush()
    t2 = time.perf_counter()
    if skipped:
        total = sum(skipped.values())
        err.write(f"commwatch replay: skipped {total} malformed line(s)/message(s): "
                  + ", ".join(f"{k} x{v}" for k, v in sorted(skipped.items())) + "\n")
    return {"lines": stats.lines, "messages": len(msgs), "records": det.stats["records"], "alerts": alerts,
            "skipped": dict(skipped), "ignored_alerts": det.stats["ignored_alerts"],
            "read_s": t1 - t0, "detect_s": t2 - t1}


def _write(out, events: list[dict]) -> int:
    for ev in events:
        out.write(messages.dumps(ev).decode("utf-8") + "\n")
    return len(events)


def capture_ends(msgs: list, decoded: list) -> dict[str, dict[str, int]]:
    """Per job, its nodes whose last heartbeat is within `END_SPAN_S` of the job's last
    message in the capture, with that heartbeat's stamp."""
    last: dict[str, int] = {}
    beats: dict[str, dict[str, int]] = {}
    for m, d in zip(msgs, decoded):
        if isinstance(d, WireError) or m.topic == topics.ALERTS:
            continue
        job = d.job if isinstance(d, CallBatch) else d.get("job")
        if not isinstance(job, str):
            continue
        last[job] = max(last.get(job, 0), m.ts_ns)
        if m.topic == topics.PROGRESS and isinstance(d.get("node"), str):
            nodes = beats.setdefault(job, {})
            nodes[d["node"]] = max(nodes.get(d["node"], 0), m.ts_ns)
    return {job: {n: t for n, t in nodes.items() if t >= last[job] - END_SPAN_S * 1e9}
            for job, nodes in beats.items()}


def run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        res = replay(args.file, settings, sys.stdout, sys.stderr, settle=True)
    except (OSError, UnicodeError) as exc:
        print(f"commwatch replay: cannot read {args.file}: {exc}", file=sys.stderr)
        return 1
    if args.stats:
        rate = res["records"] / res["detect_s"] if res["detect_s"] > 0 else 0.0
        total = res["read_s"] + res["detect_s"]
        print(f"commwatch replay: {res['messages']} messages, {res['records']} call records, {res['alerts']} alerts; "
              f"read {res['read_s']:.2f} s, detect {res['detect_s']:.2f} s ({rate:,.0f} records/s decode+detect, "
              f"{res['records'] / total if total else 0:,.0f} records/s end to end)", file=sys.stderr)
    return 0
