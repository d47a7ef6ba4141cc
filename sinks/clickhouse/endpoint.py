"""The history while the stack runs: a loopback ClickHouse HTTP endpoint over embedded chdb.

chdb admits one process per database directory. The process that owns it (the sink)
serves this endpoint, and every other process (`commwatch sql`, `incidents`, `query`,
`trace`, the live page) reaches the same database through it with an ordinary
clickhouse-connect HTTP client: `commwatch.embedded.clickhouse_client(settings)` picks
it up from the owner record next to the database directory (`commwatch.discovery`).

It speaks the part of ClickHouse's HTTP interface that clickhouse-connect uses: the SQL
in the `query` parameter and/or the body, `database`, `default_format`, server-side
parameters as `param_<name>`, the query's own `FORMAT` clause, errors as HTTP 500 with
`X-ClickHouse-Exception-Code`. It listens on 127.0.0.1 only and answers only requests
that carry the owner record's token as their password (the record is readable by the
data directory's owner only). Each request runs on its own chdb connection handle.
"""

from __future__ import annotations

import base64
import hmac
import http.server
import json
import logging
import os
import re
import secrets
import tempfile
import threading
import urllib.parse
from typing import Any

from commwatch.settings import SettingsError

log = logging.getLogger(__name__)

# Parameters of the HTTP transport itself, never passed to the engine.
TRANSPORT = frozenset({
    "query", "database", "default_format", "user", "password", "query_id", "session_id", "session_timeout",
    "session_check", "compress", "decompress", "enable_http_compression", "wait_end_of_query", "buffer_size",
    "send_progress_in_http_headers", "http_headers_progress_interval_ms", "client_protocol_version", "quota_key",
    "role", "cancel_http_readonly_queries_on_client_close",
})
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CODE = re.compile(r"Code: (\d+)")
INSERT_DATA = re.compile(r"^\s*INSERT\s+INTO\s.*\bFORMAT\s+\w+\s*$", re.IGNORECASE | re.DOTALL)
MAX_BODY = 64 * 1024 * 1024


class QueryEndpoint:
    """Serve the chdb database at `path` on http://host:port until `stop()`.

    >>> ep = QueryEndpoint("/tmp/db").start()   # doctest: +SKIP
    >>> ep.url                                   # doctest: +SKIP
    'http://127.0.0.1:40125'
    """

    def __init__(self, path: str, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 port_key: str = "COMMWATCH_QUERY_PORT"):
        self.path = str(path)
        self.host = host
        self.port = port
        self.port_key = port_key
        self.token = token or secrets.token_urlsafe(24)
        self.server: http.server.ThreadingHTTPServer | None = None
        self.queries = 0
        self.errors = 0
        self.timezone = "UTC"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> "QueryEndpoint":
        import chdb

        conn = chdb.connect(self.path)
        try:
            self.timezone = _run(conn, "SELECT timezone()", "TabSeparated", None).decode().strip() or "UTC"
        finally:
            conn.close()
        try:
            self.server = http.server.ThreadingHTTPServer((self.host, self.port), _handler(self))
        except OSError as exc:
            raise SettingsError(f"{self.port_key}: cannot listen on {self.host}:{self.port} ({exc.strerror}); "
                                f"set {self.port_key}=0 for a free port") from None
        self.server.daemon_threads = True
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, name="cw-query-endpoint", daemon=True).start()
        log.info("history endpoint on %s (database %s)", self.url, self.path)
        return self

    def stop(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    # ------------------------------------------------------------------------------------
    def authorised(self, headers: Any, params: dict[str, str]) -> bool:
        given = headers.get("X-ClickHouse-Key") or params.get("password")
        auth = headers.get("Authorization") or ""
        if not given and auth.startswith("Basic "):
            try:
                given = base64.b64decode(auth[6:]).decode().partition(":")[2]
            except (ValueError, UnicodeDecodeError):
                return False
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    def execute(self, sql: str, params: dict[str, str], data: bytes | None = None) -> tuple[bytes, str]:
        """Run one request's SQL (with `data` for an `INSERT ... FORMAT F`); returns (body,
        format). Raises `QueryError`."""
        import chdb

        fmt = params.get("default_format") or "TabSeparated"
        query_params = {k[6:]: v for k, v in params.items() if k.startswith("param_")}
        settings = {k: v for k, v in params.items() if k not in TRANSPORT and not k.startswith("param_")}
        found = re.search(r"\bFORMAT\s+(\w+)\s*;?\s*$", sql, re.IGNORECASE)
        if found:
            fmt = found.group(1)
        conn = chdb.connect(self.path)
        tmp = None
        try:
            if params.get("database"):
                _run(conn, f"USE `{_identifier(params['database'])}`", "TabSeparated", None)
            for key, value in settings.items():
                _run(conn, f"SET {_identifier(key)} = '{_quote(value)}'", "TabSeparated", None)
            if data is not None:  # chdb takes insert data from a file
                with tempfile.NamedTemporaryFile(prefix="cw-insert-", delete=False) as f:
                    f.write(data)
                    tmp = f.name
                sql = sql[:found.start()] + f" FROM INFILE '{_quote(tmp)}' FORMAT {fmt}"
            return _run(conn, sql, fmt, query_params), fmt
        finally:
            conn.close()
            if tmp:
                os.unlink(tmp)


class QueryError(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        m = CODE.search(message)
        self.code = m.group(1) if m else "1"


def split_request(query: str, body: bytes) -> tuple[str, bytes | None]:
    """(SQL, insert data or None) from the `query` parameter and the body, as ClickHouse reads
    them: the body is an `INSERT ... FORMAT F`'s data (after the statement's first line when
    the statement itself is in the body), or else more SQL text."""
    if query:
        if body and INSERT_DATA.match(query):
            return query, body
        return "\n".join(p for p in (query, body.decode("utf-8")) if p), None
    head, sep, rest = body.partition(b"\n")
    statement = head.decode("utf-8")
    if sep and rest and INSERT_DATA.match(statement):
        return statement, rest
    return body.decode("utf-8"), None


def _identifier(name: str) -> str:
    if not NAME.match(name):
        raise QueryError(f"Code: 36. DB::Exception: {name!r} is not a plain identifier")
    return name


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _run(conn: Any, sql: str, fmt: str, params: dict[str, str] | None) -> bytes:
    try:
        result = conn.query(sql, fmt, params=params or None)
    except Exception as exc:  # chdb raises ChdbError (a RuntimeError) with the server's message
        text = str(exc)
        i = text.find("Code: ")
        raise QueryError(text[i:] if i >= 0 else text) from None
    return result.bytes() if hasattr(result, "bytes") else bytes(result or b"")


def _handler(endpoint: QueryEndpoint) -> type:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._answer()

        def do_POST(self) -> None:  # noqa: N802
            self._answer()

        def _answer(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            params = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
            try:
                body = self._body()
            except ValueError as exc:
                self._reply(400, f"Code: 1. DB::Exception: {exc}\n".encode(), code="1")
                self.close_connection = True
                return
            if url.path in ("/ping", "/") and not params and not body:
                self._reply(200, b"Ok.\n")
                return
            if not endpoint.authorised(self.headers, params):
                self._reply(401, b"Code: 516. DB::Exception: commwatch: wrong or missing token\n", code="516")
                return
            if self.headers.get("Content-Encoding", "identity") != "identity":
                self._reply(415, b"Code: 1. DB::Exception: compressed requests are not supported here\n", code="1")
                return
            try:
                sql, data = split_request(params.get("query", ""), body)
            except UnicodeDecodeError:
                self._reply(400, b"Code: 1. DB::Exception: the query is not UTF-8\n", code="1")
                return
            endpoint.queries += 1
            try:
                data, fmt = endpoint.execute(sql, params, data)
            except QueryError as exc:
                endpoint.errors += 1
                self._reply(500, (str(exc).strip() + "\n").encode(), code=exc.code)
                return
            self._reply(200, data, fmt=fmt)

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                parts, size = [], 0
                while True:
                    n = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if n == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                            pass
                        return b"".join(parts)
                    size += n
                    if size > MAX_BODY:
                        raise ValueError("request body too large")
                    parts.append(self.rfile.read(n))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                raise ValueError("request body too large")
            return self.rfile.read(length) if length else b""

        def _reply(self, status: int, data: bytes, code: str | None = None, fmt: str | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Content-Type", "text/plain; charset=UTF-8")
            self.send_header("X-ClickHouse-Server-Display-Name", "commwatch-chdb")
            self.send_header("X-ClickHouse-Timezone", endpoint.timezone)
            self.send_header("X-ClickHouse-Summary", json.dumps({"read_rows": "0", "written_rows": "0"}))
            if fmt:
                self.send_header("X-ClickHouse-Format", fmt)
            if code:
                self.send_header("X-ClickHouse-Exception-Code", code)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("history endpoint: " + fmt, *args)

    return Handler
