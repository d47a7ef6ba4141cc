"""The strict scoring of `commwatch bench detect`, on hand-made incidents whose score is obvious."""

from __future__ import annotations

import json

from commwatch.streams.bench_scenarios import JobInfo
from commwatch.streams.bench_score import S, score, summarize

T0 = 1_767_225_600 * S


def ev(job, iid, kind, sev, ts, status="open", ranks=(), nodes=(), comm="", evidence=None, opened=None):
    return {"v": 1, "job": job, "incident": iid, "kind": kind, "severity": sev, "status": status, "ts_ns": ts,
            "opened_ns": opened if opened is not None else ts, "culprit_ranks": list(ranks),
            "culprit_nodes": list(nodes), "comm": comm, "summary": "", "evidence": evidence or {}}


def truth(job, kind, ranks, onset_s, **kw):
    return {"job": job, "kind": kind, "ranks": ranks, "nodes": [], "comm": kw.pop("comm", None),
            "at_ns": T0 + round(onset_s * S), "onset_ns": T0 + round(onset_s * S), "expect_incident": True,
            "step_s": 2.0, **kw}


def info(control="", ended=None):
    return JobInfo(step_s=2.0, control=control, start_ns=T0, end_ns=T0 + 60 * S, ended_ns=ended)


def test_a_right_hang_a_named_victim_and_an_extra_p0():
    # scenario 1: the hang is named exactly, 6 s after onset, threshold 5 s from evidence
    s1 = score([ev("a", "a-h", "hang", "P0", T0 + 26 * S, ranks=[3], evidence={"threshold_s": 5.0}),
                ev("a", "a-h", "hang", "P0", T0 + 27 * S, status="update", ranks=[3])],
               [truth("a", "hang", [3], 20.0)], {"a": info()}, hang_floor_s=5.0)
    (t,) = s1["truths"]
    assert t["hit"] and t["delay_s"] == 6.0 and t["delay_it"] == 3.0 and t["over_threshold_s"] == 1.0
    assert t["one_p0"] and s1["false"] == []

    # scenario 2: the slow rank is named with its TP peer first (false: a victim), then alone (the hit)
    s2 = score([ev("b", "b-1", "slow_rank", "P1", T0 + 17 * S, ranks=[5, 6]),
                ev("b", "b-2", "slow_rank", "P1", T0 + 19 * S, ranks=[5]),
                ev("b", "b-3", "slow_rank", "P3", T0 + 30 * S)],  # an advisory: apart
               [truth("b", "slow_rank", [5], 15.0, factor=1.3)], {"b": info()}, hang_floor_s=5.0)
    (t,) = s2["truths"]
    assert t["hit"] and t["delay_s"] == 4.0 and t["delay_it"] == 2.0
    assert [(f["kind"], f["reason"]) for f in s2["false"]] == [("slow_rank", "victim named")]
    assert len(s2["advisories"]) == 1

    # scenario 3: the hang's root is named, but a comm_hang P0 opens too; the job then ends and the
    # hang resolves, but an update follows the resolution
    end = T0 + 40 * S
    s3 = score([ev("c", "c-h", "hang", "P0", T0 + 16 * S, ranks=[2]),
                ev("c", "c-c", "comm_hang", "P0", T0 + 17 * S, comm="00000000000000aa"),
                ev("c", "c-h", "hang", "P0", end + 2 * S, status="resolved", ranks=[2], opened=T0 + 16 * S),
                ev("c", "c-h", "hang", "P0", end + 3 * S, status="update", ranks=[2], opened=T0 + 16 * S),
                ev("c", "c-c", "comm_hang", "P0", end + 2 * S, status="resolved", opened=T0 + 17 * S)],
               [truth("c", "hang", [2], 10.0)], {"c": info(ended=end)}, hang_floor_s=5.0)
    (t,) = s3["truths"]
    assert t["hit"] and t["p0"] == 2 and not t["one_p0"]
    assert t["threshold_from"] == "hang_floor_s" and t["over_threshold_s"] == 1.0
    assert [(f["kind"], f["severity"], f["reason"]) for f in s3["false"]] == [("comm_hang", "P0", "another kind")]
    (e,) = s3["ends"]
    assert e == {"job": "c", "open_at_end": 2, "resolved": 1, "events_after_resolve": 1, "opened_after_end": 0,
                 "resolve_delay_s": [2.0]}

    # a healthy control with one P1
    s4 = score([ev("d", "d-1", "slow_rank", "P1", T0 + 5 * S, ranks=[1])], [], {"d": info("healthy")}, 5.0)
    assert s4["controls"] == {"d": {"control": "healthy", "p0_p1": 1}}
    assert s4["false"][0]["reason"] == "no fault injected"

    out = summarize([s1, s2, s3, s4], healthy_hours=2.0)
    k = out["kinds"]
    assert (k["hang"]["expected"], k["hang"]["hits"], k["hang"]["false"], k["hang"]["precision"]) == (2, 2, 0, 1.0)
    assert (k["slow_rank"]["hits"], k["slow_rank"]["false"], k["slow_rank"]["false_p0_p1"]) == (1, 2, 2)
    assert k["slow_rank"]["precision"] == round(1 / 3, 3) and k["slow_rank"]["recall"] == 1.0
    assert k["slow_rank"]["false_p0_p1_per_healthy_job_hour"] == 1.0
    assert k["comm_hang"]["false_p0_p1_per_healthy_job_hour"] == 0.5
    assert out["hang"]["exactly_one_p0"] == 1 and out["hang"]["p0_per_hang"] == 1.5
    assert out["controls"] == {"healthy": {"jobs": 1, "p0_p1": 1}}
    assert out["advisories"]["total"] == 1
    verdicts = {t["target"]: t["pass"] for t in out["targets"]}
    assert verdicts["hang exact root"] is True and verdicts["hang exactly one P0"] is False
    assert verdicts["slow_rank precision"] is False and verdicts["P0/P1 on healthy controls (1 jobs)"] is False
    assert verdicts["ended jobs: open incidents resolved, nothing after"] is False


def test_a_hang_naming_its_root_and_a_victim_is_false():
    s = score([ev("g", "g-1", "hang", "P0", T0 + 16 * S, ranks=[2, 5]),
               ev("g", "g-2", "hang", "P0", T0 + 17 * S, ranks=[2])],
              [truth("g", "hang", [2], 10.0)], {"g": info()}, hang_floor_s=5.0)
    (t,) = s["truths"]
    assert t["hit"] and t["delay_s"] == 7.0 and t["p0"] == 2 and not t["one_p0"]
    assert [(f["ranks"], f["reason"]) for f in s["false"]] == [([2, 5], "victim named")]
    grown = score([ev("g", "g-1", "hang", "P0", T0 + 16 * S, ranks=[2]),
                   ev("g", "g-1", "hang", "P0", T0 + 18 * S, status="update", ranks=[2, 5])],
                  [truth("g", "hang", [2], 10.0)], {"g": info()}, hang_floor_s=5.0)
    assert not grown["truths"][0]["hit"]  # a victim named in an update counts as well


def test_two_slow_ranks_may_be_named_together_or_apart_but_not_twice():
    truths = [truth("e", "slow_rank", [1], 15.0, factor=1.5), truth("e", "slow_rank", [9], 15.0, factor=1.5)]
    together = score([ev("e", "e-1", "slow_rank", "P1", T0 + 18 * S, ranks=[1, 9])], truths, {"e": info()}, 5.0)
    assert [t["hit"] for t in together["truths"]] == [True, True] and together["false"] == []
    apart = score([ev("e", "e-1", "slow_rank", "P1", T0 + 18 * S, ranks=[1]),
                   ev("e", "e-2", "slow_rank", "P1", T0 + 20 * S, ranks=[9]),
                   ev("e", "e-3", "slow_rank", "P1", T0 + 30 * S, ranks=[1])],  # the same fault paged again
                  truths, {"e": info()}, 5.0)
    assert [t["delay_s"] for t in apart["truths"]] == [3.0, 5.0]
    assert [f["reason"] for f in apart["false"]] == ["duplicate"]
    early = score([ev("e", "e-1", "slow_rank", "P1", T0 + 5 * S, ranks=[1])], truths[:1], {"e": info()}, 5.0)
    assert not early["truths"][0]["hit"] and early["false"][0]["reason"] == "before onset"


def test_bench_detect_runs_a_scenario_through_the_detector(tmp_path, capsys):
    from commwatch import cli

    out = tmp_path / "bench.json"
    rc = cli.main(["--data-dir", str(tmp_path), "bench", "detect", "--only", "jm/hang-blocking-1x1x8", "--no-speed",
                   "--json", str(out), "--save", str(tmp_path / "caps")])
    assert rc == 0
    text = capsys.readouterr().out
    assert "targets:" in text and "hang exact root" in text and "records/s" in text
    result = json.loads(out.read_text())
    assert result["scenarios"] == 1 and result["kinds"]["hang"]["expected"] == 1
    (run,) = result["runs"]
    assert run["records"] > 300 and run["truths"][0]["kind"] == "hang" and run["truths"][0]["mode"] == "blocking"
    caps = sorted(p.name for p in (tmp_path / "caps").iterdir())
    assert caps == ["jm_hang-blocking-1x1x8.alerts.jsonl", "jm_hang-blocking-1x1x8.cwcap",
                    "jm_hang-blocking-1x1x8.truth.json"]


def test_a_slow_ranks_delay_counts_the_iterations_the_job_ran_under_the_fault():
    # healthy steps of 2 s; from onset (20 s) rank 5's steps take 3 s: named 6 s after onset is
    # 3 healthy iterations but 2 of those the job ran
    from commwatch import messages, topics
    from commwatch.capture import Message
    from commwatch.streams.bench_scenarios import Built, fault_steps

    def step(it, start_s, dur_s):
        msg = {"v": 1, "job": "b", "rank": 5, "iteration": it, "t_start_ns": T0 + round(start_s * S),
               "t_end_ns": T0 + round((start_s + dur_s) * S)}
        return Message(topics.STEPS, "b", msg["t_end_ns"], messages.dumps(msg))

    t = truth("b", "slow_rank", [5], 20.0, factor=1.5)
    built = Built([step(i, 2.0 * i, 2.0) for i in range(10)] + [step(10 + i, 20.0 + 3.0 * i, 3.0) for i in range(5)],
                  [t], {"b": info()})
    fault_steps(built)
    assert t["run_step_s"] == 3.0
    (row,) = score([ev("b", "b-1", "slow_rank", "P2", T0 + 26 * S, ranks=[5])], [t], {"b": info()},
                   hang_floor_s=5.0)["truths"]
    assert row["delay_it"] == 3.0 and row["delay_run_it"] == 2.0


def test_a_routine_control_may_page_once_the_first_time_and_never_again():
    # rank 0's checkpoint, its first time a P0 (nothing tells it from a hang yet), its second a
    # P0 again (false); every rank's checkpoint a P2 stall the first time only
    res = score([ev("r", "r-1", "hang", "P0", T0 + 10 * S, ranks=[0]),
                 ev("r", "r-2", "job_stalled", "P2", T0 + 20 * S),
                 ev("r", "r-3", "hang", "P0", T0 + 40 * S, ranks=[0])],
                [], {"r": info("routine")}, hang_floor_s=5.0)
    assert [(f["kind"], f["reason"]) for f in res["routine_first"]] == [("hang", "a routine, the first time"),
                                                                        ("job_stalled", "a routine, the first time")]
    assert [(f["kind"], f["reason"]) for f in res["false"]] == [("hang", "no fault injected")]
    assert res["controls"] == {"r": {"control": "routine", "p0_p1": 1}}
    targets = {t["target"]: t for t in summarize([{**res, "name": "r", "family": "jobmodel", "ranks": 16,
                                                   "refused": 0, "records": 0, "healthy_s": 60.0}], 1.0)["targets"]}
    assert targets["P0/P1 on routine controls (1 jobs)"]["pass"] is False
