"""`commwatch up` as one supervised process group: restarts, bounds, no orphans, errors
that name the setting, discovery instead of private brokers, two stacks side by side."""

from __future__ import annotations

import os
import signal
import socket
import time
import urllib.request

import pytest

from commwatch import discovery
from commwatch.supervise import ChildFailed, Supervisor

from stackkit import RunningStack, alive, clean_env, cli

pytestmark = pytest.mark.integration


def wait_for(cond, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


# --- the supervisor ----------------------------------------------------------------------
def test_supervisor_restarts_a_child_within_a_bound_then_gives_up(tmp_path):
    sup = Supervisor(tmp_path, max_restarts=2, window_s=120)
    first = sup.start("cfg", ["config"], clean_env(COMMWATCH_DATA_DIR=str(tmp_path)))  # exits at once, status 0
    pids = {first.pid}

    def restarted_or_failed():
        sup.poll()
        pids.add(first.pid)
        return False

    with pytest.raises(ChildFailed, match=r"cfg .*died 3 times in 120 s; giving up") as failed:
        wait_for(restarted_or_failed, 90, "the restart bound")
    assert len(pids) == 3, "started once, then restarted twice"
    assert "COMMWATCH_NOTIFY_REPEAT_P0_S" in str(failed.value), "the error quotes the end of the child's log"


def test_supervisor_does_not_restart_a_configuration_error(tmp_path):
    sup = Supervisor(tmp_path)
    sup.start("bad", ["--set", "hang_floor_s=soon", "config"], clean_env())
    with pytest.raises(ChildFailed,
                       match=r"(?s)bad .*failed at start-up.*COMMWATCH_HANG_FLOOR_S: 'soon' is not a number"):
        wait_for(lambda: sup.poll() and False, 60, "the failure")


# --- errors that name the setting ------------------------------------------------------------
SIMULATE = ["simulate", "--kafka", "--ranks", "8", "--tp", "2", "--pp", "2", "--dp", "2", "--duration", "1"]


@pytest.mark.parametrize("argv", [["agent", "--duration", "1"], ["worker"], ["sink"], ["notify"], ["page"],
                                  ["record", "--out", "x.cwcap"], SIMULATE])
def test_a_forgotten_bootstrap_names_the_setting_and_starts_no_broker(tmp_path, argv):
    got = cli(clean_env(COMMWATCH_DATA_DIR=str(tmp_path), COMMWATCH_METRICS_PORT="0",
                        COMMWATCH_NOTIFY_WEBHOOK_URL="http://127.0.0.1:9/x"), *argv)
    assert got.returncode == 2, got.stderr
    assert "COMMWATCH_KAFKA_BOOTSTRAP" in got.stderr and "commwatch up" in got.stderr
    assert "Traceback" not in got.stderr and "embedded broker" not in got.stdout + got.stderr


def test_status_without_a_stack_says_what_to_start(tmp_path):
    got = cli(clean_env(COMMWATCH_DATA_DIR=str(tmp_path)), "status", "--once")
    assert got.returncode == 1 and "no commwatch stack runs under" in got.stderr and "commwatch up" in got.stderr


def test_an_unreachable_broker_names_the_setting(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    got = cli(clean_env(COMMWATCH_DATA_DIR=str(tmp_path), COMMWATCH_METRICS_PORT="0"),
              "--kafka-bootstrap", f"127.0.0.1:{port}", "worker")
    assert got.returncode == 2
    assert f"COMMWATCH_KAFKA_BOOTSTRAP: no Kafka broker answers at 127.0.0.1:{port}" in got.stderr
    assert "Traceback" not in got.stderr


def test_a_taken_port_names_its_setting(tmp_path, broker):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        env = clean_env(COMMWATCH_DATA_DIR=str(tmp_path))
        worker = cli(env, "--kafka-bootstrap", broker.bootstrap, "--set", f"metrics_port={port}", "worker")
        assert worker.returncode == 2 and f"COMMWATCH_METRICS_PORT: cannot serve metrics on 127.0.0.1:{port}" \
            in worker.stderr and "Traceback" not in worker.stderr
        page = cli(env, "--kafka-bootstrap", broker.bootstrap, "--set", f"page_port={port}", "page")
        assert page.returncode == 2 and f"COMMWATCH_PAGE_PORT: cannot listen on 127.0.0.1:{port}" in page.stderr
        for key in ("worker_metrics_port", "broker_port", "query_port", "page_port"):
            up = cli(env, "--set", f"{key}={port}", "up")
            assert up.returncode == 2, up.stderr
            assert f"COMMWATCH_{key.upper()}: cannot listen on 127.0.0.1:{port}" in up.stderr, up.stderr
            assert "Traceback" not in up.stderr
    assert discovery.read_stack(tmp_path) is None


def test_a_component_failing_at_start_stops_the_stack_loudly(tmp_path):
    stack = RunningStack(tmp_path, "--without", "agent", "--without", "page",
                         COMMWATCH_CLICKHOUSE_DATABASE="not-an-identifier")
    assert stack.wait_exit(240) == 1
    text = stack.text()
    assert "FAILED: sink" in text and "COMMWATCH_CLICKHOUSE_DATABASE" in text
    assert discovery.read_stack(tmp_path) is None


# --- the supervised group ------------------------------------------------------------------
def test_a_dead_component_is_restarted_and_sigkill_of_the_stack_leaves_nothing(tmp_path):
    stack = RunningStack(tmp_path / "data", "--without", "page", COMMWATCH_RING_DIR=str(tmp_path / "rings"))
    try:
        rec = stack.wait_ready()
        assert set(rec.children) >= {"broker", "worker", "sink", "agent"}
        old_agent = rec.children["agent"]
        os.kill(old_agent, signal.SIGKILL)
        rec = wait_for(lambda: (r := discovery.running_stack(tmp_path / "data")) and
                       r.children.get("agent") not in (None, old_agent) and r, 60, "the agent's restart")
        assert alive(rec.children["agent"]) and "agent restarted" in stack.text()
        old_broker = rec.children["broker"]
        os.kill(old_broker, signal.SIGKILL)  # the broker keeps its port: the others reconnect
        rec = wait_for(lambda: (r := discovery.running_stack(tmp_path / "data")) and
                       r.children.get("broker") not in (None, old_broker) and r, 60, "the broker's restart")
        sim = cli(stack.env, "simulate", "--kafka", "--ranks", "8", "--tp", "2", "--pp", "2", "--dp", "2",
                  "--duration", "2", "--truth", str(tmp_path / "truth.json"))
        assert sim.returncode == 0 and rec.bootstrap in sim.stdout, sim.stderr
        owner = discovery.read_owner(tmp_path / "data" / "clickhouse")
        assert owner is not None and owner.pid == rec.children["sink"]
        pids = [rec.pid, *rec.children.values()]
        stack.proc.send_signal(signal.SIGKILL)
        stack.wait_exit()
        wait_for(lambda: not any(alive(p) for p in pids), 30, "every child to die with the stack")
        # what the killed stack left behind is recognised as stale
        assert discovery.read_stack(tmp_path / "data") is not None
        assert discovery.running_stack(tmp_path / "data") is None
        assert discovery.read_owner(tmp_path / "data" / "clickhouse") is None
    finally:
        stack.stop()


def test_two_stacks_side_by_side_each_with_its_own_broker_and_history(tmp_path):
    a = RunningStack(tmp_path / "a", "--without", "agent")
    b = RunningStack(tmp_path / "b", "--without", "agent")
    try:
        ra, rb = a.wait_ready(), b.wait_ready()
        assert ra.bootstrap != rb.bootstrap and ra.query != rb.query
        assert ra.page and rb.page and ra.page != rb.page  # the default page port gives way to a free one
        for rec in (ra, rb):
            with urllib.request.urlopen(rec.page + "api/jobs", timeout=10) as r:
                assert r.status == 200
        assert cli(a.env, "up").returncode == 2  # a second stack on the same data directory is refused
        # `simulate --kafka` finds stack a's broker through the data directory alone
        # (in real time: the calls table keeps 14 days, older rows are dropped at insert)
        sim = cli(a.env, "simulate", "--kafka", "--realtime", "--job", "side-a", "--ranks", "8", "--tp", "2",
                  "--pp", "2", "--dp", "2", "--duration", "4", "--truth", str(tmp_path / "truth.json"))
        assert sim.returncode == 0 and ra.bootstrap in sim.stdout, sim.stderr
        agent = cli(b.env, "agent", "--duration", "2", "--no-metrics")  # so does the agent, for stack b
        assert agent.returncode == 0 and rb.bootstrap in agent.stderr, agent.stderr

        def calls(env) -> int:
            got = cli(env, "sql", "SELECT count() FROM calls WHERE job = 'side-a'", "--format", "tsv")
            assert got.returncode == 0, got.stderr
            return int(got.stdout.splitlines()[1])

        wait_for(lambda: calls(a.env) > 0, 120, "stack a's sink to write the job's calls")
        assert calls(b.env) == 0
        hexes = cli(a.env, "sql", "SELECT DISTINCT comm FROM calls WHERE job = 'side-a'", "--format", "tsv")
        assert all(len(c) == 16 and int(c, 16) >= 0 for c in hexes.stdout.splitlines()[1:])
    finally:
        a.stop()
        b.stop()
    assert a.proc.returncode == 0 and b.proc.returncode == 0
    for rec in (ra, rb):
        assert not any(alive(p) for p in [rec.pid, *rec.children.values()])
    assert discovery.read_stack(tmp_path / "a") is None and discovery.read_stack(tmp_path / "b") is None
