"""Dead-lettering: the headers, and the pipeline's verdict on bad input (counted, and the
next good message is still processed)."""

from __future__ import annotations

import pytest

from commwatch import topics
from commwatch.capture import Message
from commwatch.metrics import StreamMetrics
from commwatch.producers.simulate import JobSpec, simulate
from commwatch.streams.app import REPORTS, Pipeline, to_message
from commwatch.streams.deadletter import error_headers, parse_error
from commwatch.wire import WireError


def test_headers_carry_reason_and_source():
    h = dict(error_headers(WireError("not_json", "line 1: é"), "p.cw.hw.v1", 2, 41))
    assert h[topics.ERROR_HEADER] == "not_json: line 1: é".encode()
    assert (h["cw-source-topic"], h["cw-source-partition"], h["cw-source-offset"]) == (b"p.cw.hw.v1", b"2", b"41")
    assert parse_error(h[topics.ERROR_HEADER]) == ("not_json", "line 1: é")


def test_key_that_is_not_utf8_is_a_bad_key():
    with pytest.raises(WireError) as exc:
        to_message(topics.CALLS, b"\xff\xfe/00", 1, b"")
    assert exc.value.reason == "bad_key"


@pytest.fixture
def pipeline(settings):
    return Pipeline(settings, StreamMetrics())


def test_bad_messages_raise_and_good_ones_still_flow(pipeline):
    m = pipeline.metrics
    bad = [
        (topics.CALLS, Message(topics.CALLS, "j/00000000000000ab", 5, b"junkjunkjunkjunkjunk"), "bad_magic"),
        (topics.PROGRESS, Message(topics.PROGRESS, "j/00000000000000ab", 5, b"{not json"), "bad_json"),
        (topics.HW, Message(topics.HW, "j", 5, b"[1, 2]"), "not_object"),
        (REPORTS, Message(REPORTS, "j", 5, b"\x00"), "bad_json"),
    ]
    good = [msg for msg in simulate(JobSpec(job="j", tp=2, duration_s=1)).messages() if msg.topic == topics.CALLS]
    # the comm half takes a poll's messages at once: the bad ones among them are refused,
    # each with its reason, and the good ones around them are fed
    comm = [(b, msg, None) for b, msg, _ in bad[:2]]
    _, errors = pipeline.comm_messages([comm[0], (topics.CALLS, good[0], None), comm[1]])
    assert [e.reason if e else None for e in errors] == ["bad_magic", None, "bad_json"]
    for e in errors:
        if e:
            pipeline.dead(e)
    for base, msg, reason in bad[2:]:
        with pytest.raises(WireError) as exc:
            pipeline.job_message(base, msg)
        assert exc.value.reason == reason, (base, exc.value)
        pipeline.dead(exc.value)
    assert sum(s.value for f in m.registry.collect() if f.name == "commwatch_stream_deadletter"
               for s in f.samples if s.name.endswith("_total")) == 4
    assert m.registry.get_sample_value("commwatch_stream_records_total") > 0
    assert pipeline.jobs == {"j"}


def test_each_job_runs_on_its_own_clock_and_nothing_is_judged_before_every_partition_read(settings):
    """Per-job event time in the worker: a job whose clocks run 60 s fast never moves
    another job's now; at start-up, until every partition delivered, jobs are held (their
    clocks do not age with the wall clock)."""
    wall = [1_000 * 10**9]
    p = Pipeline(settings, StreamMetrics(), wall_ns=lambda: wall[0])
    assert p.held("any"), "held from the start, until the first lag check finds every partition read"
    p.unread = False  # what that check concludes once they are
    fast = [m for m in simulate(JobSpec(job="fast", tp=2, duration_s=1, start_ns=wall[0] + 60 * 10**9)).messages()
            if m.topic == topics.PROGRESS][0]
    slow = [m for m in simulate(JobSpec(job="slow", tp=2, duration_s=1, start_ns=wall[0])).messages()
            if m.topic == topics.PROGRESS][0]
    p.comm_messages([(topics.PROGRESS, fast, "part-0"), (topics.PROGRESS, slow, "part-1")])
    wall[0] += 2 * 10**9
    clocks = p.detector.comm_clocks
    assert clocks.now("slow", wall[0]) == slow.ts_ns + 2 * 10**9
    assert clocks.now("fast", wall[0]) == fast.ts_ns + 2 * 10**9
    assert not p.held("fast") and not p.held("slow")
    p.unread = True
    assert p.held("fast") and p.held("slow")
    assert clocks.now("slow", wall[0], not p.held("slow")) == slow.ts_ns
    # released: the job ages from then on; the time it was held is not counted as its silence
    # (a backlog read while held and judged after would find every node silent otherwise)
    wall[0] += 30 * 10**9
    assert clocks.now("slow", wall[0], not p.held("slow")) == slow.ts_ns
    p.unread = False
    wall[0] += 10**9
    assert clocks.now("slow", wall[0], not p.held("slow")) == slow.ts_ns + 10**9
