"""`commwatch bench throughput`'s engine part feeds every record through both halves."""

from __future__ import annotations

import pytest

from commwatch.streams.bench_pipeline import pipeline_run


@pytest.mark.parametrize("wall_pace", [False, True])
def test_the_engine_bench_feeds_every_record_of_its_job_to_the_detector(settings, wall_pace):
    row = pipeline_run(settings, 2, 2, 2, 4.0, wall_pace)
    assert row["records"] > 1000 and row["records_detected"] == row["records"]
    assert row["records_per_cpu_s"] > 0 and row["incidents"] == 0  # a healthy job
    assert row["pace"] == ("wall clock" if wall_pace else "backlog")
