"""A job's incident history for the page, from ClickHouse (the `incidents` table).

The client comes from `commwatch.embedded.clickhouse_client(settings)`, the one function that
hands them out (in embedded mode it reaches the database through the process that owns it).
History is optional: when ClickHouse cannot be reached, or has no schema yet, the page says
so (`status()`) and shows the live state alone; it tries again after `RETRY_S`. Answers are
cached for `CACHE_S` so that a page refreshing every second costs one query per job per
`CACHE_S`, whatever the number of viewers.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from commwatch.settings import Settings

log = logging.getLogger(__name__)

CACHE_S = 5.0
RETRY_S = 10.0
LIMIT = 50
COLUMNS = ("incident", "kind", "severity", "status", "ts_ns", "opened_ns", "culprit_ranks", "culprit_nodes",
           "comm", "summary")


class History:
    def __init__(self, settings: Settings, monotonic: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.monotonic = monotonic
        self.lock = threading.Lock()
        self.client: Any = None
        self.error: str | None = None
        self.failed_at: float | None = None
        self.cache: dict[str, tuple[float, list[dict[str, Any]]]] = {}

    def status(self) -> dict[str, Any]:
        return {"available": self.error is None, "error": self.error}

    def _client(self) -> Any:
        from commwatch.embedded import clickhouse_client

        if self.client is None:
            self.client = clickhouse_client(self.settings)
        return self.client

    def incidents(self, job: str) -> list[dict[str, Any]]:
        """The latest state of the job's most recent incidents; [] when history is unavailable."""
        with self.lock:
            now = self.monotonic()
            hit = self.cache.get(job)
            if hit is not None and now - hit[0] < CACHE_S:
                return hit[1]
            if self.failed_at is not None and now - self.failed_at < RETRY_S:
                return hit[1] if hit else []
            try:
                rows = self._query(job)
            except Exception as exc:  # unreachable, no schema yet, the owner process gone: say so
                self.client, self.failed_at = None, now
                self.error = " ".join(str(exc).split())[:300] or type(exc).__name__
                log.warning("history unavailable: %s", self.error)
                return hit[1] if hit else []
            self.error, self.failed_at = None, None
            if len(self.cache) > 256:
                self.cache.clear()
            self.cache[job] = (now, rows)
            return rows

    def _query(self, job: str) -> list[dict[str, Any]]:
        from commwatch.sinks.clickhouse.schema import check_database_name

        db = check_database_name(self.settings.clickhouse_database)
        result = self._client().query(
            f"SELECT {', '.join(COLUMNS)} FROM {db}.incidents FINAL WHERE job = {{job:String}} "
            f"ORDER BY opened_ns DESC, incident LIMIT {LIMIT}",
            parameters={"job": job},
        )
        out = []
        for row in result.result_rows:
            inc = dict(zip(COLUMNS, row))
            inc["culprit_ranks"] = [int(r) for r in inc["culprit_ranks"]]
            inc["culprit_nodes"] = list(inc["culprit_nodes"])
            inc["ts_ns"], inc["opened_ns"] = int(inc["ts_ns"]), int(inc["opened_ns"])
            out.append(inc)
        return out
