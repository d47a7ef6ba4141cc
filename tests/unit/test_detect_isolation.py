"""One job never changes another job's detection: a capture of several jobs replayed
together and each job's messages replayed alone give that job the same incidents, at the
same times (up to its last message: after it, time runs on only in the longer capture)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from commwatch.capture import read_sorted
from commwatch.decode import decode_messages
from commwatch.streams.detect import Detector

GEN_B = Path(__file__).resolve().parents[1] / "independent" / "jobs" / "gen.py"


def _events(settings, msgs) -> list[tuple]:
    det = Detector(settings)
    events = det.feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes)) + det.finish()
    return [(e["job"], e["kind"], e["severity"], e["status"], tuple(e["culprit_ranks"]), e["ts_ns"]) for e in events]


@pytest.mark.parametrize("drill", [False, True])
def test_a_job_replayed_alone_gets_what_it_got_among_others(settings, tmp_path, monkeypatch, drill):
    """Generator B's three jobs drawn with SEED 9 (an FSDP job whose rank 10 hangs, its clocks
    60 s fast; an MoE and a DDP job, healthy): replayed alone, the FSDP job opened its P0 a
    second later than among the others. Its ticks came only with its own messages, a
    heartbeat a second apart once its ranks stopped, while the others' messages ticked it
    on time. Each job is ticked on its own clock's schedule now. Drill: ticks only at
    messages, the hang's P0 comes later alone."""
    if drill:
        monkeypatch.setattr(Detector, "_due_before", lambda self, ref_ns: [])
    cap = tmp_path / "multi_hang.cwcap"
    subprocess.run([sys.executable, str(GEN_B), "multi_hang", str(cap)], check=True, capture_output=True,
                   env={**os.environ, "SEED": "9"})
    msgs = read_sorted(cap)
    together = _events(settings, msgs)
    job = "mA-fsdp"
    mine = [m for m in msgs if m.key.split("/")[0] == job]
    alone = [e for e in _events(settings, mine) if e[-1] <= mine[-1].ts_ns]
    among = [e for e in together if e[0] == job and e[-1] <= mine[-1].ts_ns]
    assert [e[1:5] for e in among if e[3] == "open"] == [("hang", "P0", "open", (10,))]
    assert (alone == among) is not drill
