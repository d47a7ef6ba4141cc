"""Per-job health gauges: bounded cardinality whatever the job's size, no rank or node label,
series of jobs that are gone go away."""

from __future__ import annotations

from commwatch.metrics import JOB_STATES, TOP_BLOCKED, TOP_LATE, StreamMetrics
from commwatch.metrics import JobHealthGauges

ALLOWED_LABELS = {"job_name", "comm", "kind", "severity", "slot", "state"}


def big_snapshot(job: str = "big") -> dict:
    """What the detector publishes for a 10k-rank job in a hang: capped lists, at their caps."""
    return {
        "v": 1, "type": "health", "job": job, "ts_ns": 5, "state": "hang", "world_size": 10240, "ranks": 10240,
        "nodes": [f"n{i}" for i in range(1280)], "exited_ranks": [],
        "step": {"iteration": 900, "median_s": 2.0, "rate_per_s": 0.5, "slowdown": None},
        "comms": [{"comm": f"{c:016x}", "members": 8, "nodes": [], "started": 10, "completed": 9, "inside": 7,
                   "blocked_s": float(c % 37), "last_progress_ns": 1} for c in range(256)],
        "lateness": {"bin": 10, "values_ms": [0.0] * 1024},
        "late_ranks": [{"rank": 9000 + r, "lag_ms": 50.0 - r, "slowdown": 0.1} for r in range(16)],
        "incidents": [{"kind": "hang", "severity": "P0"}, {"kind": "slow_rank", "severity": "P2"},
                      {"kind": "slow_rank", "severity": "P2"}],
        "wait_chain": {"roots": [9000], "edges": [], "blocked_comms": []}, "drops": {},
    }


def samples(m: StreamMetrics) -> list:
    return [s for fam in m.registry.collect() if fam.name.startswith("commwatch_job_") for s in fam.samples]


def value(m: StreamMetrics, name: str, **labels) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_a_10k_rank_job_makes_a_bounded_number_of_series():
    m = StreamMetrics()
    m.observe_health(big_snapshot())
    got = samples(m)
    # states + ranks, rate, step + 2 incident kinds + 2 x slots + hang wait + blocked comms
    assert len(got) == len(JOB_STATES) + 3 + 2 + 2 * TOP_LATE + 1 + TOP_BLOCKED
    for s in got:
        assert set(s.labels) <= ALLOWED_LABELS, s
        assert s.labels["job_name"] == "big"
    assert value(m, "commwatch_job_state", job_name="big", state="hang") == 1
    assert value(m, "commwatch_job_state", job_name="big", state="running") == 0
    assert value(m, "commwatch_job_incidents_open", job_name="big", kind="slow_rank", severity="P2") == 2
    assert value(m, "commwatch_job_late_rank", job_name="big", slot="1") == 9000
    assert value(m, "commwatch_job_late_rank_lag_seconds", job_name="big", slot="1") == 0.05
    assert value(m, "commwatch_job_hang_wait_seconds", job_name="big") == 36.0
    assert value(m, "commwatch_job_iterations_per_second", job_name="big") == 0.5
    blocked = {s.labels["comm"]: s.value for s in got if s.name == "commwatch_job_comm_blocked_seconds"}
    assert sorted(blocked.values(), reverse=True) == [36.0] * TOP_BLOCKED


def test_a_later_snapshot_replaces_the_series_of_its_job():
    m = StreamMetrics()
    m.observe_health(big_snapshot())
    calm = {**big_snapshot(), "state": "running", "incidents": [], "late_ranks": [],
            "comms": [{"comm": "00000000000000aa", "blocked_s": 0.0}], "step": {}}
    m.observe_health(calm)
    assert value(m, "commwatch_job_hang_wait_seconds", job_name="big") == 0.0
    assert value(m, "commwatch_job_incidents_open", job_name="big", kind="hang", severity="P0") is None
    assert value(m, "commwatch_job_late_rank", job_name="big", slot="1") is None
    assert value(m, "commwatch_job_iterations_per_second", job_name="big") is None


def test_jobs_without_a_snapshot_for_a_while_go_away():
    now = [0.0]
    g = JobHealthGauges(expiry_s=30, monotonic=lambda: now[0])
    g.observe(big_snapshot("a"))
    now[0] = 20.0
    g.observe(big_snapshot("b"))
    jobs = lambda: {s.labels["job_name"] for fam in g.collect() for s in fam.samples}  # noqa: E731
    assert jobs() == {"a", "b"}
    now[0] = 31.0
    assert jobs() == {"b"}
    now[0] = 51.0
    assert jobs() == set()


def test_names_follow_the_convention_even_before_any_snapshot():
    m = StreamMetrics()
    names = {fam.name for fam in m.registry.collect() if fam.name.startswith("commwatch_job_")}
    assert names == {"commwatch_job_state", "commwatch_job_ranks", "commwatch_job_iterations_per_second",
                     "commwatch_job_step_seconds", "commwatch_job_incidents_open", "commwatch_job_late_rank",
                     "commwatch_job_late_rank_lag_seconds", "commwatch_job_hang_wait_seconds",
                     "commwatch_job_comm_blocked_seconds"}
    assert samples(m) == []
