"""`commwatch replay`: alerts as JSON Lines, deterministic, malformed input skipped and counted."""

import io
import json
import subprocess
import sys

import pytest

from commwatch import collector, topics
from commwatch.capture import CaptureWriter, Message, read_sorted
from commwatch.cli import main
from commwatch.decode import decode_messages
from commwatch.messages import validate_incident
from commwatch.streams.replay import replay
from detect_jobs import S, HandJob, steps

TP, DP = 0xA1, 0xB2


class Recorder(HandJob):
    """A hand-made job whose messages are also written to a capture."""

    def __init__(self, settings, path):
        self.writer = CaptureWriter(path)
        super().__init__(settings, {TP: [0, 1, 2, 3], DP: [3, 4]}, {0: "n0", 1: "n0", 2: "n0", 3: "n0", 4: "n1"})

    def send(self, msg):
        self.writer.write(msg)
        super().send(msg)


def _hang_capture(settings, path):
    j = Recorder(settings, path)
    steps(j, 6)
    t = j.now + S
    j.collective(TP, 6, {0: t, 2: t, 3: t}, None)
    j.heartbeats(t + 10 * S)
    # noise: a broken line, a bad batch, an alert (ignored as input), all in the middle
    j.writer.out.write('{"topic": "cw.calls.v1", "ts_ns": 5\n')
    j.writer.write(Message(topics.CALLS, f"j1/{TP:016x}", t + S, b"CWB1garbage"))
    j.writer.write(Message(topics.ALERTS, "j1", t + S, json.dumps({"v": 1}).encode()))
    j.writer.close()
    return j


def test_replay_writes_the_same_alerts_as_live_and_counts_bad_input(settings, tmp_path):
    path = tmp_path / "hang.cwcap"
    live = _hang_capture(settings, path)
    out, err = io.StringIO(), io.StringIO()
    res = replay(str(path), settings, out, err)
    alerts = [validate_incident(json.loads(line)) for line in out.getvalue().splitlines()]
    assert [(a["kind"], a["culprit_ranks"]) for a in alerts] == [("hang", [1])]
    assert [a["incident"] for a in alerts] == [i["incident"] for i in live.incidents]
    assert res["skipped"] == {"line: not JSON (Expecting ',' delimiter)": 1, "cw.calls.v1: truncated": 1}
    assert res["ignored_alerts"] == 1
    assert "skipped 2 malformed" in err.getvalue()
    out2 = io.StringIO()
    replay(str(path), settings, out2, io.StringIO())
    assert out2.getvalue() == out.getvalue()  # deterministic


def test_replay_cli_exit_codes(settings, tmp_path, capsys):
    path = tmp_path / "hang.cwcap"
    _hang_capture(settings, path)
    assert main(["replay", str(path), "--stats"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.splitlines()[0])["kind"] == "hang"
    assert "records/s" in captured.err
    assert main(["replay", str(tmp_path / "missing.cwcap")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_replay_in_its_own_process_settles_the_collector(settings, tmp_path):
    """`commwatch replay` freezes the capture it read and spaces collections out
    (`collector.settle`); the alerts are those of an unsettled replay."""
    path = tmp_path / "hang.cwcap"
    _hang_capture(settings, path)
    code = ("import gc, sys; from commwatch.cli import main; main(['replay', sys.argv[1]]); "
            "print(gc.get_threshold()[0], gc.get_freeze_count() > 0)")
    run = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    lines = run.stdout.splitlines()
    assert lines[-1] == f"{collector.YOUNG} True", run.stderr
    out = io.StringIO()
    replay(str(path), settings, out, io.StringIO())
    assert lines[:-1] == out.getvalue().splitlines()


@pytest.mark.parametrize("drill", [False, True])
def test_a_job_whose_processes_exit_as_the_capture_ends_is_resolved_by_replay(settings, gen_c, tmp_path, monkeypatch,
                                                                              drill):
    """Generator C's watchdog abort (host-enqueue, 32 ranks) drawn with 14000: rank 26 hangs
    at 20 s, every process exits at 60.6 s and its agents flag the exits for 2.5 s; the capture
    ended 70 ms after the last of those exits reached stage 2, before the job's next periodic
    tick: the hang stayed open although the job had ended. Here the capture is cut where the
    last exit reaches stage 2, and the job's periodic tick is made 5 s long so that the cut
    falls before it. At the capture's end every job judges what it received once more
    (`Detector.finish`). Drill: no last judgement."""
    from commwatch.streams.detect import Detector, job_stage

    monkeypatch.setattr(job_stage, "TICK_NS", 5 * S)
    src = gen_c("s11", seed=14000)
    msgs = read_sorted(src)
    det, told = Detector(settings), []
    feed_report = det.job_feed_report

    def spy(rep, ref_ns):  # when stage 2 first knew that every rank's process had exited
        out = feed_report(rep, ref_ns)
        js = det.job_stage.jobs.get(rep.get("job"))
        if not told and js is not None and det.job_stage._ranks(js) <= det.job_stage._exited(js):
            told.append(det.ref_ns)
        return out

    det.job_feed_report = spy
    det.feed_stream(msgs, decode_messages(msgs, settings.max_message_bytes))
    assert told
    cut = tmp_path / "cut.cwcap"  # to the message that ticks stage 1 then (it reports at ticks)
    end = min(m.ts_ns for m in msgs if m.ts_ns > told[0])
    with open(src) as f, open(cut, "w") as w:
        w.writelines(line for line in f if json.loads(line)["ts_ns"] <= end)
    if drill:
        monkeypatch.setattr(Detector, "finish", lambda self: [])
    out = io.StringIO()
    replay(str(cut), settings, out, io.StringIO())
    hang = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(e["kind"], e["status"], e["culprit_ranks"]) for e in hang][:1] == [("hang", "open", [26])]
    assert (hang[-1]["status"] == "resolved" and "process exited" in hang[-1]["summary"]) is not drill
