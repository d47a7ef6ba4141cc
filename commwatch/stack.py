"""The stack on one machine: broker, stream worker(s), ClickHouse sink, notifier, node
agent and live page as one supervised process group (`commwatch up`, `commwatch demo`).

- Kafka: the configured `COMMWATCH_KAFKA_BOOTSTRAP`, else an embedded broker run by this
  process (restarted on its port if it dies).
- Ports: each component has its own setting (`broker_port`, `worker_metrics_port`,
  `sink_metrics_port`, `query_port`, `notify_metrics_port`, `agent_metrics_port`, the
  page's `page_port`); 0 picks a free port. A port that is set and taken fails at once
  with an error naming its setting; a default port that is taken (the page's, by another
  stack) gives way to a free one. A free port the stack picked can be taken by another
  process before the component binds it: the component then moves to another free port
  and starts again (`PORT_MOVES` times at most). A port the user set never moves.
- Order: broker, then the sink (it owns the embedded ClickHouse and serves the history
  endpoint that every other process queries), then the others; the stack is ready when
  each answers on its port.
- Discovery: `<data_dir>/stack.env` (see `commwatch.discovery`) is written as soon as the
  ports are known and rewritten when a child restarts; it is removed at exit.
- Children are supervised (`commwatch.supervise`): restarted when they die, within a
  bound; `check()` raises `StackFailed` past it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any, Callable

from commwatch import discovery
from commwatch.embedded import EmbeddedBroker, EmbeddedError, check_port, free_port
from commwatch.settings import Settings, SettingsError, env_key
from commwatch.supervise import Child, ChildFailed, Supervisor

log = logging.getLogger(__name__)

COMPONENTS = ("worker", "sink", "notify", "agent", "page")
STOP_ORDER = ("agent", "simulate", "worker", "notify", "sink", "page")  # producers first, the sink drains last
PORT_MOVES = 3  # a component whose port is taken at start-up moves to a free one this many times

PORT_KEYS = {  # component -> the setting that fixes its port
    "broker": "broker_port", "worker": "worker_metrics_port", "sink": "sink_metrics_port", "query": "query_port",
    "notify": "notify_metrics_port", "agent": "agent_metrics_port", "page": "page_port",
}
BROKER_RESTARTS = 5
BROKER_WINDOW_S = 300.0


def _default(key: str) -> object:
    f = Settings.__dataclass_fields__.get(key)
    return f.default if f is not None else None


def _free(host: str, port: int) -> bool:
    try:
        check_port(host, port, "")
    except SettingsError:
        return False
    return True


class StackFailed(RuntimeError):
    """A component of the stack died for good; the message says which and why."""


def page_available() -> bool:
    """Whether this installation has the live page (`commwatch page`)."""
    from commwatch.cli import COMMANDS

    return "page" in COMMANDS and importlib.util.find_spec(COMMANDS["page"][0]) is not None


def child_env(settings: Settings, **changes: Any) -> dict[str, str]:
    """The environment that gives a child process these settings (secrets included)."""
    s = settings.replace(**changes)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMWATCH_")}
    defaults = Settings.load(env={})
    for f in dataclasses.fields(s):
        value = getattr(s, f.name)
        if value != getattr(defaults, f.name) or f.name in ("data_dir", "kafka_bootstrap"):
            env[env_key(f.name)] = str(value)
    return env


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` itself has a listening TCP socket on `port`."""
    import psutil

    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns)


def http_ok(url: str, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return 200 <= r.status < 300
    except (OSError, urllib.error.URLError, ValueError):
        return False


class Stack:
    """Start with `start()`, call `check()` every second or so, `stop()` at the end."""

    def __init__(self, settings: Settings, *, components: tuple[str, ...] = COMPONENTS, workers: int = 1,
                 log_dir: str | Path | None = None, command: str = "commwatch up",
                 say: Callable[[str], None] = lambda line: None):
        data_dir = Path(settings.data_dir).absolute()
        self.settings = settings.replace(data_dir=str(data_dir))
        self.command = command
        self.say = say
        self.workers = workers if "worker" in components else 0
        self.components = [c for c in components if c != "worker"]
        self.log_dir = Path(log_dir) if log_dir else data_dir / "logs"
        self.supervisor = Supervisor(self.log_dir, on_restart=self._restarted)
        self.own_broker = settings.embedded_kafka
        self.broker: EmbeddedBroker | None = None
        self.broker_restarts: deque = deque()
        self.ports: dict[str, int] = {}
        self.skipped: dict[str, str] = {}  # component -> why it does not run
        self.preferred: set[str] = set()  # components on a default port, which may move to a free one
        self.chosen: set[str] = set()  # ports the stack picked free itself: another process may take one
        self.moves: dict[str, int] = {}  # times a component moved to another port
        self.record: discovery.StackRecord | None = None

    # --- set-up -------------------------------------------------------------------------
    @property
    def embedded_clickhouse(self) -> bool:
        return self.settings.clickhouse_url.startswith("chdb://")

    def _plan(self) -> None:
        """Decide what runs and on which port; a taken fixed port fails here, by its key."""
        from commwatch.sinks.notify.destinations import from_settings

        s = self.settings
        if "notify" in self.components and not from_settings(s):
            self.skipped["notify"] = ("off: no destination (set COMMWATCH_NOTIFY_WEBHOOK_URL, _SLACK_URL, "
                                      "_FEISHU_URL or _ALERTMANAGER_URL)")
        if "page" in self.components and not page_available():
            self.skipped["page"] = "not part of this installation (no `commwatch page` command)"
        wanted = [c for c in self.components if c not in self.skipped]
        if self.workers:
            wanted.append("worker")
        if self.own_broker:
            wanted.append("broker")
        if "sink" in wanted and self.embedded_clickhouse:
            wanted.append("query")
        for name in wanted:
            key = PORT_KEYS[name]
            fixed = int(getattr(s, key, 0) or 0)
            count = self.workers if name == "worker" else 1
            for i in range(count):
                label = name if count == 1 else f"{name}-{i}"
                if fixed and not (fixed == _default(key) and not _free(self._host(name), fixed)):
                    check_port(self._host(name), fixed + i, env_key(key))
                    self.ports[label] = fixed + i
                    if fixed == _default(key):
                        self.preferred.add(label)
                else:  # 0, or a default port that is taken (another stack's page): a free one
                    self.ports[label] = free_port(self._host(name))
                    self.chosen.add(label)

    def _host(self, name: str) -> str:
        if name == "page":
            return getattr(self.settings, "page_host", "127.0.0.1")
        if name in ("broker", "query"):
            return "127.0.0.1"
        return self.settings.metrics_host

    def worker_names(self) -> list[str]:
        return ["worker"] if self.workers == 1 else [f"worker-{i}" for i in range(self.workers)]

    def _start_broker(self) -> None:
        from commwatch.kafka import ensure_topics
        from commwatch.streams.app import stream_topics

        if self.own_broker:
            self.broker = EmbeddedBroker(port=self.ports["broker"], log_path=self.log_dir / "broker.log")
            self.broker.start()
            self.settings = self.settings.replace(kafka_bootstrap=self.broker.bootstrap)
        ensure_topics(self.settings, self.settings.kafka_bootstrap, stream_topics(self.settings))

    def start(self, ready_timeout_s: float = 180.0) -> None:
        """Start everything and wait until each component answers; raises `StackFailed`
        (or `SettingsError` for a port or broker problem) and then stops what started."""
        running = discovery.running_stack(self.settings.data_dir)
        if running is not None:
            raise SettingsError(
                f"COMMWATCH_DATA_DIR: a commwatch stack already runs under {self.settings.data_dir} (pid "
                f"{running.pid}); stop it, or give this one another data directory (--data-dir)")
        if not self.own_broker:
            discovery.check_not_stale(self.settings)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._plan()
        try:
            self._start_broker()
        except EmbeddedError as exc:
            raise StackFailed(f"broker: {exc} (see {self.log_dir / 'broker.log'})") from None
        self.say(f"{self.command}: Kafka at {self.settings.kafka_bootstrap}"
                 + (" (embedded broker)" if self.broker else ""))
        self._write_record()
        deadline = time.monotonic() + ready_timeout_s
        try:
            if "sink" in self.ports:
                self._start_child("sink")
                self._wait_ready(["sink"], deadline)
            for name in self.worker_names() + [c for c in ("notify", "agent") if c in self.ports]:
                self._start_child(name)
            if "page" in self.ports:
                self._start_child("page")
            self._wait_ready([n for n in self.supervisor.children], deadline)
        except BaseException:
            self.stop()
            raise
        self._write_record()

    def _child_argv_env(self, name: str) -> tuple[list[str], dict[str, str]]:
        s = self.settings
        port = self.ports[name]
        if name.startswith("worker"):
            return ["worker"], child_env(s, metrics_port=port)
        if name == "sink":
            return ["sink"], child_env(s, metrics_port=port, **({"query_port": self.ports["query"]}
                                                                  if "query" in self.ports else {}))
        if name == "page":
            return ["page"], child_env(s, page_port=port)
        return [name], child_env(s, metrics_port=port)

    def _start_child(self, name: str) -> Child:
        argv, env = self._child_argv_env(name)
        child = self.supervisor.start(name, argv, env)
        self.say(f"{self.command}: {name} starting (pid {child.pid}, log {child.log_path})")
        return child

    def ready(self, name: str) -> bool:
        """Whether a component listens on its port itself and answers there (the sink: its
        history endpoint too)."""
        child = self.supervisor.children.get(name)
        if child is None or not child.running() or not listens(child.pid, self.ports[name]):
            return False
        if name == "page":
            return http_ok(f"{self.url('page')}api/jobs")
        if not http_ok(f"http://{self._host(name)}:{self.ports[name]}/metrics"):
            return False
        if name == "sink" and "query" in self.ports:
            owner = discovery.read_owner(self.settings.clickhouse_url[len("chdb://"):])
            return owner is not None and owner.pid == child.pid and http_ok(f"{owner.url}/ping")
        return True

    def _wait_ready(self, names: list[str], deadline: float) -> None:
        waiting = list(names)
        while waiting:
            self.check()
            waiting = [n for n in waiting if not self.ready(n)]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise StackFailed(f"{', '.join(waiting)} did not become ready in time (see {self.log_dir})")
            time.sleep(0.25)

    # --- running ------------------------------------------------------------------------
    def check(self) -> None:
        """Restart what died (within bounds); raises `StackFailed` past them."""
        try:
            self.supervisor.poll()
        except ChildFailed as exc:
            movable = [label for label in self._port_labels(exc.name) if label in self.preferred | self.chosen]
            if movable and self._port_taken(str(exc)) and self.moves.get(exc.name, 0) < PORT_MOVES:
                # a port it was given went to another process between the stack's choice and its
                # bind (a stack starting beside this one, any program asking for a free port)
                self.moves[exc.name] = self.moves.get(exc.name, 0) + 1
                for label in movable:
                    self.preferred.discard(label)
                    self.chosen.add(label)
                    self.ports[label] = free_port(self._host(label.split("-")[0]))
                    log.warning("%s: its port was taken; moving it to %d", label, self.ports[label])
                self._start_child(exc.name)
                self._write_record()
                return
            hint = self._port_hint(str(exc))
            raise StackFailed(str(exc) + hint) from None
        if self.broker is not None and not self.broker.alive():
            now = time.monotonic()
            while self.broker_restarts and now - self.broker_restarts[0] > BROKER_WINDOW_S:
                self.broker_restarts.popleft()
            if len(self.broker_restarts) >= BROKER_RESTARTS:
                raise StackFailed(f"the embedded broker died {BROKER_RESTARTS + 1} times in {BROKER_WINDOW_S:.0f} s; "
                                  f"giving up (see {self.log_dir / 'broker.log'})")
            self.broker_restarts.append(now)
            log.warning("the embedded broker died; restarting it on %s (its topics start empty)",
                        self.broker.bootstrap)
            try:
                self._start_broker()
            except (EmbeddedError, SettingsError) as exc:
                raise StackFailed(f"broker: could not restart it: {exc}") from None
            self.say(f"{self.command}: broker restarted (pid {self.broker.proc.pid})")
            self._write_record()

    @staticmethod
    def _port_labels(child: str) -> list[str]:
        """The ports a child listens on, by label: the sink also serves the history (query)."""
        return [child, "query"] if child == "sink" else [child]

    @staticmethod
    def _port_taken(text: str) -> bool:
        return "already in use" in text or "COMMWATCH_PAGE_PORT" in text

    def _port_hint(self, text: str) -> str:
        if "COMMWATCH_METRICS_PORT" in text:
            keys = ", ".join(env_key(PORT_KEYS[c]) for c in ("worker", "sink", "notify", "agent"))
            return f"\n(the stack sets each component's metrics port from {keys})"
        return ""

    def _restarted(self, child: Child) -> None:
        self.say(f"{self.command}: {child.name} restarted (pid {child.pid})")
        self._write_record()

    # --- what the user needs --------------------------------------------------------------
    def url(self, name: str) -> str:
        if name == "page":
            return f"http://{self._host('page')}:{self.ports['page']}/"
        if name == "query":
            return f"http://127.0.0.1:{self.ports['query']}"
        return f"http://{self._host(name)}:{self.ports[name]}/metrics"

    def env(self) -> dict[str, str]:
        """The exported lines of `stack.env`: what the training side and agents need."""
        s = self.settings
        env = {"COMMWATCH_RING_DIR": s.ring_dir, "COMMWATCH_DATA_DIR": s.data_dir,
               "COMMWATCH_KAFKA_BOOTSTRAP": s.kafka_bootstrap}
        if s.topic_prefix:
            env["COMMWATCH_TOPIC_PREFIX"] = s.topic_prefix
        return env

    def _write_record(self) -> None:
        pid = os.getpid()
        children = self.supervisor.pids()
        if self.broker is not None and self.broker.proc is not None:
            children = {"broker": self.broker.proc.pid, **children}
        self.record = discovery.StackRecord(
            pid=pid, started=discovery.process_started(pid) or time.time(), data_dir=self.settings.data_dir,
            env=self.env(), page=self.url("page") if "page" in self.ports else "",
            query=self.url("query") if "query" in self.ports else "", children=children)
        discovery.write_stack(self.record)

    def summary(self) -> list[str]:
        """What runs where, and what the training side needs."""
        s = self.settings
        rows: list[tuple[str, str, str]] = []
        if self.broker is not None:
            rows.append(("broker", self.broker.bootstrap, env_key("broker_port")))
        else:
            rows.append(("kafka", s.kafka_bootstrap, "COMMWATCH_KAFKA_BOOTSTRAP"))
        for w in self.worker_names():
            rows.append((w, self.url(w), env_key("worker_metrics_port")))
        if "sink" in self.ports:
            rows.append(("sink", self.url("sink"), env_key("sink_metrics_port")))
            if "query" in self.ports:
                rows.append(("history", f"{self.url('query')} for commwatch sql, incidents, query, trace",
                             env_key("query_port")))
            else:
                rows.append(("history", "ClickHouse at COMMWATCH_CLICKHOUSE_DSN", ""))
        for name in ("notify", "agent", "page"):
            if name in self.ports:
                where = self.url(name)
                if name == "agent":
                    where = f"rings under {s.ring_dir}; {where}"
                rows.append((name, where, env_key(PORT_KEYS[name])))
            elif name in self.skipped:
                rows.append((name, self.skipped[name], ""))
        lines = [f"commwatch stack under {s.data_dir} (pid {os.getpid()}); logs in {self.log_dir}"]
        lines += [f"  {n:<8} {w}" + (f"  ({k})" if k else "") for n, w, k in rows]
        if "page" in self.ports:
            lines.append(f"live page: {self.url('page')}")
        env = self.env()
        lines += ["", "The training job on this host (hook or NCCL profiler plugin) needs in its environment:"]
        lines += [f"  export {k}={env[k]}" for k in discovery.TRAINING_KEYS]
        lines.append("  export COMMWATCH_JOB_ID=<a name for the job>")
        lines.append("`commwatch agent` elsewhere on this host finds the stack through COMMWATCH_DATA_DIR, or use:")
        lines += [f"  export {k}={v}" for k, v in env.items() if k not in discovery.TRAINING_KEYS]
        lines.append(f"All of them are in {discovery.stack_file(s.data_dir)} (`. {discovery.stack_file(s.data_dir)}` "
                     "loads them).")
        return lines

    def stop(self) -> None:
        """Stop the children in order, then the broker; remove the discovery record."""
        rank = {n: i for i, n in enumerate(STOP_ORDER)}
        names = sorted(self.supervisor.children, key=lambda n: rank.get(n.split("-")[0], len(STOP_ORDER)))
        self.supervisor.stop(names)
        if self.broker is not None:
            self.broker.stop()
        if self.record is not None:
            discovery.remove_stack(self.record)
