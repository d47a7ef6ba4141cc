"""`commwatch up` gives each component a free port it picks itself; another process may take
that port before the component binds it. The stack then moves the component to another free
port (a bounded number of times); a port the user fixed is never moved."""

from __future__ import annotations

import contextlib
import socket

import pytest

from commwatch.settings import Settings
from commwatch.stack import PORT_MOVES, Stack, StackFailed
from commwatch.supervise import ChildFailed

TAKEN = ("agent (pid 7, exit status 2) failed at start-up (configuration error): commwatch: bad configuration: "
         "COMMWATCH_METRICS_PORT: cannot serve metrics on 127.0.0.1:{port} (Address already in use)")


def planned(tmp_path, **changes) -> tuple[Stack, list[str]]:
    stack = Stack(Settings.load().replace(data_dir=str(tmp_path), **changes), components=("agent", "sink"), workers=0)
    stack._plan()
    started: list[str] = []
    stack._start_child = started.append  # the children themselves are not under test
    stack._write_record = lambda: None
    return stack, started


def fail_with(stack: Stack, name: str, text: str) -> None:
    def poll():
        raise ChildFailed(name, text)

    stack.supervisor.poll = poll


@contextlib.contextmanager
def taken(*ports: int):
    """The ports held meanwhile, as the process that took them would: the OS does not hand a
    taken port out as a free one (a free one it may give back again)."""
    with contextlib.ExitStack() as stack:
        for port in set(ports):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", port))
        yield


def test_a_component_whose_chosen_port_was_taken_moves_to_another_then_gives_up(tmp_path):
    stack, started = planned(tmp_path, agent_metrics_port=0)
    for k in range(PORT_MOVES):
        before = stack.ports["agent"]
        fail_with(stack, "agent", TAKEN.format(port=before))
        with taken(before):
            stack.check()
        assert started == ["agent"] * (k + 1) and stack.ports["agent"] != before
    fail_with(stack, "agent", TAKEN.format(port=stack.ports["agent"]))
    with pytest.raises(StackFailed, match="COMMWATCH_METRICS_PORT"):
        stack.check()


def test_the_sink_moves_its_history_port_with_its_metrics_port(tmp_path):
    stack, started = planned(tmp_path, sink_metrics_port=0, query_port=0)
    before = (stack.ports["sink"], stack.ports["query"])
    fail_with(stack, "sink", "sink failed at start-up: COMMWATCH_QUERY_PORT: cannot listen on 127.0.0.1:1 "
                             "(Address already in use)")
    with taken(*before):
        stack.check()
    assert started == ["sink"] and stack.ports["sink"] != before[0] and stack.ports["query"] != before[1]


def test_a_port_the_user_fixed_is_never_moved(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    stack, started = planned(tmp_path, agent_metrics_port=free)
    fail_with(stack, "agent", TAKEN.format(port=free))
    with pytest.raises(StackFailed, match="COMMWATCH_METRICS_PORT"):
        stack.check()
    assert started == [] and stack.ports["agent"] == free


def test_other_failures_are_not_port_moves(tmp_path):
    stack, started = planned(tmp_path, agent_metrics_port=0)
    fail_with(stack, "agent", "agent (pid 7, exit status 2) failed at start-up: COMMWATCH_RING_DIR is not a directory")
    with pytest.raises(StackFailed, match="COMMWATCH_RING_DIR"):
        stack.check()
    assert started == []
