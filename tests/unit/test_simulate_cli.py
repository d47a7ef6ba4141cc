"""`commwatch simulate` and `commwatch bench simulate` on the command line."""

from __future__ import annotations

import json

from commwatch import cli, topics
from commwatch.capture import read_messages


def test_simulate_writes_capture_and_truth(tmp_path, capsys):
    out = tmp_path / "run.cwcap"
    rc = cli.main(["--data-dir", str(tmp_path), "simulate", "--ranks", "16", "--tp", "2", "--pp", "2", "--dp", "4",
                   "--duration", "3", "--fault", "hang:rank=9,at=2s", "--fault", "blip:rank=1,at=1s,ms=200",
                   "--out", str(out)])
    assert rc == 0
    msgs = list(read_messages(out))
    assert {m.topic for m in msgs} >= {topics.CALLS, topics.PROGRESS}
    truth = json.loads((tmp_path / "run.cwcap.truth.json").read_text())
    assert [f["kind"] for f in truth["faults"]] == ["hang", "blip"]
    assert truth["faults"][0]["nodes"] == ["node-01"] and truth["spec"]["dp"] == 4
    assert truth["layout"]["comms"]["tp0"]["ranks"] == [0, 1]
    assert f"{len(msgs)} messages" in capsys.readouterr().out


def test_simulate_rejects_bad_flags(tmp_path, capsys):
    base = ["--data-dir", str(tmp_path), "simulate", "--tp", "2", "--pp", "2", "--dp", "2", "--duration", "1",
            "--out", str(tmp_path / "x.cwcap")]
    assert cli.main(base + ["--ranks", "9"]) == 2
    assert "--ranks 9" in capsys.readouterr().err
    assert cli.main(base + ["--ranks", "8", "--fault", "hang:rank=8,at=1s"]) == 2
    assert "rank=8" in capsys.readouterr().err
    assert cli.main(base + ["--ranks", "8", "--fault", "slow:rank=1,at=1s"]) == 2
    assert "factor" in capsys.readouterr().err
    assert not (tmp_path / "x.cwcap").exists()


def test_bench_simulate_prints_rate(tmp_path, capsys):
    rc = cli.main(["--data-dir", str(tmp_path), "bench", "simulate", "--tp", "2", "--pp", "2", "--dp", "2",
                   "--duration", "2", "--json"])
    assert rc == 0
    result = json.loads(capsys.readouterr().out)
    assert result["records"] > 1000 and result["records_per_s"] > 0
