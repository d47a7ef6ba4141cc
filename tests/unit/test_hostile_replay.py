"""`commwatch replay` over a capture that mixes a real simulated job (one hang) with every
case of the hostile catalogue: each case is skipped and counted by its reason, replay
exits 0, and the alerts are exactly those of the clean capture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

from hostile_inputs import CASES, MAX_BYTES

from commwatch.capture import CaptureWriter, Message
from commwatch.producers.simulate import JobSpec, parse_fault, simulate


def _captures(tmp_path):
    sim = simulate(JobSpec(job="jreal", tp=2, pp=2, dp=2, duration_s=16, step_s=0.5),
                   [parse_fault("hang:rank=5,at=6s")])
    msgs = list(sim.messages())
    clean, dirty = tmp_path / "clean.cwcap", tmp_path / "dirty.cwcap"
    with CaptureWriter(clean) as c, CaptureWriter(dirty) as d:
        every = max(1, len(msgs) // len(CASES))
        hostile = iter(CASES)
        for i, m in enumerate(msgs):
            c.write(m)
            d.write(m)
            if i % every == 0 and (case := next(hostile, None)) is not None:
                d.write(Message(case.topic, case.key, at(case, m.ts_ns), case.value))
        for case in hostile:
            d.write(Message(case.topic, case.key, at(case, msgs[-1].ts_ns), case.value))
        for line in BAD_LINES:
            d.out.write(line + "\n")
    return clean, dirty


def at(case, ts_ns: int) -> int:
    return case.ts_ms * 1_000_000 if case.ts_ms else ts_ns


def counted_as(case) -> str:
    """How replay counts a case: an absurd message time is a bad capture line (it would be
    replay's clock), anything else a refused message of its topic."""
    return "line: ts_ns negative or far in the future" if case.ts_ms else f"{case.topic}: {case.reason}"


# capture lines that are not messages at all, and how replay counts them
BAD_LINES = {
    "[" * 100_000: "line: JSON nested too deeply",
    "42": "line: not a JSON object",
    '{"topic": "cw.steps.v1", "key": "j"}': "line: ts_ns missing or not an integer",
    '{"topic": "cw.steps.v1", "ts_ns": 1, "value_b64": "***"}': "line: value_b64 is not base64",
}


def _replay(path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_")}
    env["COMMWATCH_MAX_MESSAGE_BYTES"] = str(MAX_BYTES)
    return subprocess.run([sys.executable, "-m", "commwatch.cli", "replay", str(path)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_every_hostile_case_is_skipped_and_counted_and_changes_nothing_else(tmp_path):
    clean, dirty = _captures(tmp_path)
    ok, hostile = _replay(clean), _replay(dirty)
    assert ok.returncode == 0, ok.stderr
    assert hostile.returncode == 0, hostile.stderr
    alerts = [json.loads(line) for line in ok.stdout.splitlines()]
    assert any(a["kind"] == "hang" and a["culprit_ranks"] == [5] for a in alerts), alerts
    assert hostile.stdout == ok.stdout  # the hostile messages changed no alert
    # "skipped N malformed line(s)/message(s): cw.calls.v1: bad_rank x2, ..."
    summary = hostile.stderr.split("malformed line(s)/message(s): ", 1)[1].strip()
    got = Counter()
    for part in summary.split(", "):
        where, _, count = part.rpartition(" x")
        got[where] += int(count)
    want = Counter(counted_as(c) for c in CASES) + Counter(BAD_LINES.values())
    assert got == want
    assert f"skipped {len(CASES) + len(BAD_LINES)} malformed" in hostile.stderr
