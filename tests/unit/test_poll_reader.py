"""A half's reader keeps its client through a commit refused by a rebalance, and
restarts it on any other failure. The client is scripted here: a rebalance cannot be timed
in a test (the worker drills run the real client on the real broker)."""

import asyncio

from aiokafka.errors import CommitFailedError, KafkaConnectionError

from commwatch.settings import Settings
from commwatch.streams import poll_reader
from commwatch.streams.poll_reader import PollReader


class ScriptedClient:
    """What `PollReader` calls of an aiokafka consumer: commit fails as told, getmany returns
    one record of partition `tp`."""

    def __init__(self, commit_error=None, poll_error=None):
        self.commit_error, self.poll_error = commit_error, poll_error
        self.commits = self.stops = 0

    async def commit(self):
        self.commits += 1
        if self.commit_error is not None:
            raise self.commit_error

    async def getmany(self, timeout_ms, max_records):
        if self.poll_error is not None:
            raise self.poll_error
        return {("cw.calls.v1", 0): [type("Rec", (), {"offset": 41})()]}

    async def stop(self):
        self.stops += 1


def _poll(reader):
    reader._committed_at = 0.0  # a commit is due
    return asyncio.run(reader.poll())


def test_a_commit_refused_by_a_rebalance_keeps_the_client():
    reader = PollReader(Settings.load(env={}), ["cw.calls.v1"], group="commwatch-comm")
    client = reader.consumer = ScriptedClient(commit_error=CommitFailedError("rebalanced"))
    got = _poll(reader)
    assert client.commits == 1 and client.stops == 0 and reader.consumer is client
    assert [tp for tp, _ in got] == [("cw.calls.v1", 0)] and reader.processed[("cw.calls.v1", 0)] == 41
    assert reader.failures == 0


def test_any_other_failure_closes_the_client_for_a_new_one(monkeypatch):
    monkeypatch.setattr(poll_reader, "RETRY_S", 0.0)
    reader = PollReader(Settings.load(env={}), ["cw.calls.v1"], group="commwatch-comm")
    client = reader.consumer = ScriptedClient(poll_error=KafkaConnectionError("broker gone"))
    assert _poll(reader) == []
    assert client.stops == 1 and reader.consumer is None and reader.failures == 1


def test_a_poll_gives_the_loop_a_turn_when_records_are_ready_at_once():
    """Fetched records come back without the client's getmany ever suspending (the scripted
    client does the same): under load, polls back to back would keep the event loop, and
    the worker's job half, timers and producer (tasks of the same loop) would never run."""
    reader = PollReader(Settings.load(env={}), ["cw.calls.v1"], group="commwatch-comm")
    reader.consumer = ScriptedClient()
    reader._committed_at = float("inf")  # no commit due
    turns = []

    async def other_task():
        while True:
            turns.append(1)
            await asyncio.sleep(0)

    async def main():
        other = asyncio.ensure_future(other_task())
        await asyncio.sleep(0)
        before = len(turns)
        for _ in range(20):
            assert await reader.poll()
        other.cancel()
        return len(turns) - before

    assert asyncio.run(main()) >= 19
