"""The live page's HTTP server: plain HTML/JS from `static/` and the JSON API behind it.

| path | answer |
|---|---|
| `/` | the jobs being watched (`static/index.html`) |
| `/jobs/<job>` | one job, updating by itself (`static/job.html`) |
| `GET /api/jobs` | JSON list, one entry per job (see docs/live-page.md) |
| `GET /api/jobs/<job>` | the job's health snapshot and its incidents (live and history) |
| `GET /api/jobs/<job>/lateness?after=<ts_ns>` | heatmap columns newer than `after` |
| `GET /api/status` | whether Kafka (live state) and ClickHouse (history) are reachable |

Job ids are one URL path segment, percent-encoded (a `/` in a job id is `%2F`).
`PageServer(settings).start()` runs it in-process (daemon threads); `commwatch page` runs
it as its own process.
"""

from __future__ import annotations

import html
import json
import logging
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from commwatch.settings import Settings
from commwatch.sinks.page.history import History
from commwatch.sinks.page.live import LiveFeed
from commwatch.sinks.page.state import LiveState, brief, merge_incidents

log = logging.getLogger(__name__)

CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png"}
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
}


def static_files() -> dict[str, bytes]:
    """Every file under static/, by name, read once."""
    root = resources.files("commwatch.sinks.page") / "static"
    return {f.name: f.read_bytes() for f in root.iterdir() if f.is_file()}


class Page:
    """What the handlers answer, independent of HTTP (tests call it directly too)."""

    def __init__(self, state: LiveState, history: History | None, feed: LiveFeed | None = None):
        self.state = state
        self.history = history
        self.feed = feed

    def status(self) -> dict[str, Any]:
        live = self.feed.status() if self.feed else {"connected": False, "error": "no live feed"}
        hist = self.history.status() if self.history else {"available": False, "error": "no history configured"}
        return {"live": live, "history": hist, "jobs": len(self.state.jobs())}

    def jobs(self) -> list[dict[str, Any]]:
        return self.state.jobs()

    def job(self, job: str) -> dict[str, Any] | None:
        live = self.state.job(job)
        past = self.history.incidents(job) if self.history else []
        if live is None and not past:
            return None
        live = live or {"job": job, "health": None, "age_s": None, "stale": True, "incidents": []}
        snap = live["health"] or {}
        open_now = [brief(i) for i in snap.get("incidents") or ()]
        return {
            "job": job, "health": live["health"], "age_s": live["age_s"], "stale": live["stale"],
            "incidents": merge_incidents(past, live["incidents"], open_now),
            "history": self.history.status() if self.history else {"available": False, "error": "not configured"},
        }

    def lateness(self, job: str, after_ns: int) -> dict[str, Any] | None:
        return self.state.lateness(job, after_ns)


class Handler(BaseHTTPRequestHandler):
    server: "PageHTTPServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), fmt % args)

    def _send(self, status: int, body: bytes, content_type: str, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=60" if cache else "no-store")
        for k, v in SECURITY_HEADERS.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, value: Any, status: int = 200) -> None:
        self._send(status, json.dumps(value, separators=(",", ":")).encode(), "application/json")

    def _not_found(self, what: str) -> None:
        self._json({"error": f"{what} not found"}, HTTPStatus.NOT_FOUND)

    def do_HEAD(self) -> None:  # noqa: N802 - the name http.server dispatches to
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/")[1:]]
        if parts and parts[-1] == "" and len(parts) > 1:
            parts.pop()
        page: Page = self.server.page
        files = self.server.files
        try:
            if parts in ([], [""]):
                self._send(200, files["index.html"], CONTENT_TYPES[".html"])
            elif len(parts) == 2 and parts[0] == "jobs" and parts[1]:
                body = files["job.html"].replace(b"__JOB__", html.escape(parts[1]).encode())
                self._send(200, body, CONTENT_TYPES[".html"])
            elif len(parts) == 2 and parts[0] == "static" and parts[1] in files:
                ext = "." + parts[1].rsplit(".", 1)[-1]
                self._send(200, files[parts[1]], CONTENT_TYPES.get(ext, "application/octet-stream"), cache=True)
            elif parts == ["api", "jobs"]:
                self._json(page.jobs())
            elif parts == ["api", "status"]:
                self._json(page.status())
            elif len(parts) == 3 and parts[:2] == ["api", "jobs"] and parts[2]:
                found = page.job(parts[2])
                self._json(found) if found is not None else self._not_found(f"job {parts[2]!r}")
            elif len(parts) == 4 and parts[:2] == ["api", "jobs"] and parts[3] == "lateness":
                after = parse_qs(url.query).get("after", ["0"])[0]
                try:
                    after_ns = int(after)
                except ValueError:
                    self._json({"error": f"after={after!r} is not an integer (ns)"}, HTTPStatus.BAD_REQUEST)
                    return
                found = page.lateness(parts[2], after_ns)
                self._json(found) if found is not None else self._not_found(f"job {parts[2]!r}")
            else:
                self._not_found(url.path)
        except (BrokenPipeError, ConnectionResetError):
            pass


class PageHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], page: Page):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.page = page
        self.files = static_files()
        super().__init__(address, Handler)


class PageServer:
    """The live page of `settings`: the Kafka reader, the history, the HTTP server.

    >>> srv = PageServer(settings).start()   # doctest: +SKIP
    >>> srv.url                              # doctest: +SKIP
    'http://127.0.0.1:8470/'
    """

    def __init__(self, settings: Settings, live: bool = True, history: bool = True):
        self.settings = settings
        self.state = LiveState()
        self.feed = LiveFeed(settings, self.state) if live else None
        self.history = History(settings) if history else None
        self.page = Page(self.state, self.history, self.feed)
        self.httpd: PageHTTPServer | None = None
        self.thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self.httpd is not None, "not started"
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        host = self.settings.page_host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/"

    def bind(self) -> "PageServer":
        self.httpd = PageHTTPServer((self.settings.page_host, self.settings.page_port), self.page)
        if self.feed is not None:
            self.feed.start()
        return self

    def start(self) -> "PageServer":
        """Bind and serve in a daemon thread."""
        self.bind()
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.1,), name="page-http", daemon=True)
        self.thread.start()
        log.info("live page on %s", self.url)
        return self

    def stop(self) -> None:
        if self.httpd is not None:
            if self.thread is not None:
                self.httpd.shutdown()
            self.httpd.server_close()
        if self.feed is not None:
            self.feed.stop()
