"""Discovery through the data directory: the stack record, the database owner record, and
the error a command gets when it needs Kafka and finds none."""

from __future__ import annotations

import logging
import os
import subprocess
from types import SimpleNamespace

import pytest

from commwatch import discovery
from commwatch.settings import Settings, SettingsError


def record(data_dir, pid=None, started=None, **env) -> discovery.StackRecord:
    pid = pid or os.getpid()
    return discovery.StackRecord(
        pid=pid, started=started if started is not None else discovery.process_started(pid), data_dir=str(data_dir),
        env={"COMMWATCH_RING_DIR": "/dev/shm/x y", "COMMWATCH_DATA_DIR": str(data_dir),
             "COMMWATCH_KAFKA_BOOTSTRAP": "127.0.0.1:4242", **env},
        page="http://127.0.0.1:8000/", query="http://127.0.0.1:8001", children={"worker": 11, "sink": 12})


def test_stack_record_round_trips_and_a_shell_can_source_it(tmp_path):
    rec = record(tmp_path, COMMWATCH_TOPIC_PREFIX="p1")
    path = discovery.write_stack(rec)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    back = discovery.read_stack(tmp_path)
    assert back == rec and back.bootstrap == "127.0.0.1:4242"
    out = subprocess.run(["bash", "-c", f'. "{path}" && echo "$COMMWATCH_RING_DIR|$COMMWATCH_KAFKA_BOOTSTRAP|'
                                        '$COMMWATCH_TOPIC_PREFIX" && env | grep -c "^commwatch_stack_" || true'],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "/dev/shm/x y|127.0.0.1:4242|p1"
    assert out[1] == "0", "the stack's own lines are shell variables, not exported to the training job"


def test_a_record_of_a_dead_or_reused_pid_is_stale(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    discovery.write_stack(record(tmp_path, pid=dead.pid, started=1.0))
    assert discovery.read_stack(tmp_path) is not None
    assert discovery.running_stack(tmp_path) is None
    # a live pid that started at another time is another process (pid reuse)
    discovery.write_stack(record(tmp_path, started=discovery.process_started(os.getpid()) - 100))
    assert discovery.running_stack(tmp_path) is None
    live = record(tmp_path)
    discovery.write_stack(live)
    assert discovery.running_stack(tmp_path) == live
    discovery.remove_stack(live)
    assert discovery.read_stack(tmp_path) is None


def test_with_kafka_prefers_the_setting_then_the_stack_else_names_the_setting(tmp_path):
    s = Settings.load(env={}, data_dir=str(tmp_path))
    with pytest.raises(SettingsError, match=r"^COMMWATCH_KAFKA_BOOTSTRAP: `commwatch agent` needs Kafka.*commwatch up"):
        discovery.with_kafka(s, "commwatch agent")
    assert discovery.with_kafka(s.replace(kafka_bootstrap="k:9092"), "x").kafka_bootstrap == "k:9092"
    discovery.write_stack(record(tmp_path))
    assert discovery.with_kafka(s, "x").kafka_bootstrap == "127.0.0.1:4242"
    assert discovery.with_kafka(s.replace(kafka_bootstrap="k:9092"), "x").kafka_bootstrap == "k:9092"
    discovery.write_stack(record(tmp_path, started=1.0))
    with pytest.raises(SettingsError, match=r"is gone"):
        discovery.with_kafka(s, "commwatch worker")
    # a shell that sourced the dead stack's stack.env: its bootstrap is recognised as stale
    with pytest.raises(SettingsError, match=r"^COMMWATCH_KAFKA_BOOTSTRAP: 127.0.0.1:4242 is the broker of the stack"):
        discovery.with_kafka(s.replace(kafka_bootstrap="127.0.0.1:4242"), "commwatch agent")


def test_owner_record_names_a_live_owner_only(tmp_path):
    db = tmp_path / "clickhouse"
    assert discovery.read_owner(db) is None
    rec = discovery.write_owner(db, "http://127.0.0.1:9", "secret", "commwatch sink")
    assert discovery.owner_file(db) == tmp_path / "clickhouse.owner"
    assert oct(discovery.owner_file(db).stat().st_mode & 0o777) == "0o600"
    assert discovery.read_owner(db) == rec and rec.pid == os.getpid()
    discovery.remove_owner(db)
    assert discovery.read_owner(db) is None
    discovery.owner_file(db).write_text('{"pid": 1, "started": 5.0, "url": "u", "token": "t"}')
    assert discovery.read_owner(db) is None  # pid 1 did not start at 5.0


def test_the_hook_says_when_the_stack_reads_rings_elsewhere(tmp_path, caplog):
    from commwatch.producers.hook.runtime import Hook

    rank = SimpleNamespace(settings=Settings.load(env={}, data_dir=str(tmp_path), ring_dir=str(tmp_path / "mine")))
    with caplog.at_level(logging.INFO, logger="commwatch.producers.hook.runtime"):
        Hook.check_reader(rank)
        assert "no commwatch stack runs under" in caplog.text
        discovery.write_stack(record(tmp_path))  # its rings are in /dev/shm/x y
        Hook.check_reader(rank)
    assert "set COMMWATCH_RING_DIR=/dev/shm/x y" in caplog.text
