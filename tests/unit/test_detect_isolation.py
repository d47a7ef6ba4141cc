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


@pytest.mark.parametrize("drill", [False, True])
def test_a_hung_job_gone_quiet_among_others_ends_for_want_of_data_not_cleared(settings, tmp_path, monkeypatch, drill):
    """Generator B's FSDP job whose rank 10 hangs, drawn with SEED 9 beside an MoE job whose
    clocks run 60 s ahead: the FSDP job's messages end at 70 s (its heartbeats ran to
    then), the other's a minute later. Its P0 resolved 'cleared', 'not seen for 10 s', as if
    the hang had ended by itself; the job had only gone quiet. Now it stays open till the job
    ends for want of data, and says so. Drill: a quiet job's incidents expire as before, and
    a hang nobody reports for is not kept open (`IncidentBook.keep`)."""
    from commwatch.streams.detect import incidents, job_stage

    if drill:
        monkeypatch.setattr(job_stage, "QUIET_JOB_PERIODS", float("inf"))
        monkeypatch.setattr(incidents.IncidentBook, "keep", lambda self, key, now_ns: None)
    cap = tmp_path / "multi_hang_shifted_other.cwcap"
    subprocess.run([sys.executable, str(GEN_B), "multi_hang_shifted_other", str(cap)], check=True,
                   capture_output=True, env={**os.environ, "SEED": "9"})
    msgs = read_sorted(cap)
    det = Detector(settings)
    events = det.feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes)) + det.finish()
    last = max(m.ts_ns for m in msgs if m.key.split("/")[0] == "mA-fsdp")
    hang = [e for e in events if e["job"] == "mA-fsdp" and e["kind"] == "hang"]
    assert [(e["status"], e["culprit_ranks"]) for e in hang] == [("open", [10]), ("resolved", [10])]
    assert hang[0]["ts_ns"] < last
    reason = hang[1]["evidence"]["resolved_reason"]
    assert reason == ("cleared" if drill else "no_data")
    assert (hang[1]["ts_ns"] - last >= 60 * 10**9) is not drill
