"""One frozen settings object per process, built once from `COMMWATCH_*` and CLI flags.

Every field `name` is read from the environment variable `COMMWATCH_<NAME>`; CLI flags
override it (`--set name=value`, or the dedicated flags of `commwatch.cli`). Values are
validated at start-up and a bad one raises `SettingsError` naming the key. Nothing else in
commwatch reads `os.environ` for configuration. Secrets never appear in `repr()`.

>>> s = Settings.load(env={"COMMWATCH_HANG_FLOOR_S": "7"})
>>> s.hang_floor_s
7.0
>>> Settings.load(env={"COMMWATCH_HANG_FLOOR_S": "soon"})
Traceback (most recent call last):
...
commwatch.settings.SettingsError: COMMWATCH_HANG_FLOOR_S: 'soon' is not a number
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from commwatch.topics import Topics

ENV_PREFIX = "COMMWATCH_"


class SettingsError(ValueError):
    """A configuration value that cannot be used; the message starts with the key."""


def _secret(default: str = "") -> Any:
    return field(default=default, metadata={"secret": True})


def _opt(default: Any, *, minimum: float | None = None, choices: tuple | None = None, doc: str = "") -> Any:
    return field(default=default, metadata={"min": minimum, "choices": choices, "doc": doc})


def _default_data_dir() -> str:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "commwatch")


@dataclass(frozen=True)
class Settings:
    # --- Kafka -------------------------------------------------------------------------
    kafka_bootstrap: str = _opt("", doc="bootstrap servers; empty = the stack's under data_dir (`commwatch up`)")
    kafka_security_protocol: str = _opt(
        "PLAINTEXT", choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
    )
    kafka_sasl_mechanism: str = _opt("", choices=("", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"))
    kafka_sasl_username: str = ""
    kafka_sasl_password: str = _secret()
    kafka_ssl_ca_location: str = ""
    kafka_ssl_certificate_location: str = ""
    kafka_ssl_key_location: str = ""
    kafka_ssl_key_password: str = _secret()
    kafka_partitions: int = _opt(4, minimum=1, doc="partitions of topics that commwatch creates")
    kafka_replication: int = _opt(1, minimum=1)
    kafka_session_timeout_ms: int = _opt(6000, minimum=1000)
    max_message_bytes: int = _opt(8 * 1024 * 1024, minimum=1024, doc="larger messages are dead-lettered")
    topic_prefix: str = ""
    # --- ClickHouse --------------------------------------------------------------------
    clickhouse_dsn: str = _opt("", doc="empty = embedded chdb:// under data_dir; or http(s)://host:port")
    clickhouse_user: str = "default"
    clickhouse_password: str = _secret()
    clickhouse_database: str = "commwatch"
    clickhouse_ttl_calls_days: int = _opt(14, minimum=1)
    clickhouse_ttl_days: int = _opt(400, minimum=1)
    sink_flush_rows: int = _opt(10_000, minimum=1)
    sink_flush_s: float = _opt(1.0, minimum=0.01)
    sink_max_buffer_rows: int = _opt(2_000_000, minimum=1000, doc="bound on rows held while ClickHouse is down")
    # --- local state and endpoints -----------------------------------------------------
    data_dir: str = field(default_factory=_default_data_dir)
    metrics_host: str = "127.0.0.1"
    metrics_port: int = _opt(9464, minimum=0)
    page_host: str = _opt("127.0.0.1", doc="bind address of the live page (`commwatch page`)")
    page_port: int = _opt(8470, minimum=0, doc="port of the live page; 0 = a free one")
    log_level: str = _opt("INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    liveness_stall_s: float = _opt(30.0, minimum=1.0, doc="/livez fails after the loop made no progress this long")
    # --- the local stack (`commwatch up`): each component's port, 0 = a free one ----------
    broker_port: int = _opt(0, minimum=0, doc="embedded broker's port on 127.0.0.1 (0 = a free one)")
    query_port: int = _opt(0, minimum=0, doc="history endpoint of the embedded ClickHouse's owner (0 = a free one)")
    worker_metrics_port: int = _opt(0, minimum=0, doc="the stack's worker metrics port (0 = a free one)")
    sink_metrics_port: int = _opt(0, minimum=0, doc="the stack's sink metrics port (0 = a free one)")
    notify_metrics_port: int = _opt(0, minimum=0, doc="the stack's notifier metrics port (0 = a free one)")
    agent_metrics_port: int = _opt(0, minimum=0, doc="the stack's agent metrics port (0 = a free one)")
    # --- detectors ---------------------------------------------------------------------
    hang_floor_s: float = _opt(5.0, minimum=0.1, doc="minimum time inside a call before a hang")
    hang_gap_factor: float = _opt(3.0, minimum=1.0, doc="hang threshold = max(floor, factor x p99 gap); "
                                  "where steps are known, at most the step factor x max(step, gap)")
    hang_step_factor: float = _opt(2.0, minimum=0.0, doc="hang threshold >= factor x the job's median step time")
    hang_warmup_s: float = _opt(60.0, minimum=0.0,
                                doc="a comm that never completed a call is judged hung only after this long")
    stall_floor_s: float = _opt(60.0, minimum=1.0)
    stall_step_factor: float = _opt(10.0, minimum=1.0)
    heartbeat_period_s: float = _opt(1.0, minimum=0.05)
    node_lost_periods: float = _opt(3.0, minimum=1.0)
    slow_impact: float = _opt(0.10, minimum=0.0, doc="share of step time lost before slow_rank opens")
    slow_windows: int = _opt(2, minimum=1, doc="consecutive windows above slow_impact")
    window_instances: int = _opt(64, minimum=4, doc="collective instances per slow-detection window")
    slow_model: str = _opt("river", choices=("river", "numpy"),
                           doc="what decides a slow rank's onset: river drift detectors or fixed numpy rules")
    resolve_after_s: float = _opt(10.0, minimum=0.0, doc="condition gone this long resolves an incident")
    state_idle_s: float = _opt(600.0, minimum=1.0, doc="drop detector state of a comm or job idle this long")
    # --- agent / probes ----------------------------------------------------------------
    ring_dir: str = "/dev/shm/commwatch"
    job_id: str = ""
    node_name: str = ""
    agent_flush_s: float = _opt(0.1, minimum=0.001)
    agent_buffer_bytes: int = _opt(64 * 1024 * 1024, minimum=1024)
    hw_period_s: float = _opt(1.0, minimum=0.05)
    agent_ring_uids: str = _opt("any", doc="uids whose rings the agent reads: 'any', or a comma list of uids "
                                "and 'self' (files must be regular, inside ring_dir, not symlinks, either way)")
    agent_nvml_timeout_s: float = _opt(5.0, minimum=0.1, doc="an NVML call this long is a GPU that stopped "
                                       "answering (nvml_timeout in cw.hw.v1)")
    # --- notifications -----------------------------------------------------------------
    notify_webhook_url: str = _secret()
    notify_slack_url: str = _secret()
    notify_feishu_url: str = _secret()
    notify_alertmanager_url: str = ""
    notify_webhook_headers: str = _secret()  # "Name: value" pairs, ";"-separated, sent with the generic webhook
    notify_alertmanager_headers: str = _secret()  # the same for Alertmanager (e.g. "Authorization: Basic ...")
    notify_alertmanager_resend_s: float = _opt(60.0, minimum=0.5, doc="open incidents are re-sent to "
                                               "Alertmanager this often; each send holds for 3 periods")
    notify_min_severity: str = _opt("P3", choices=("P0", "P1", "P2", "P3"))
    notify_kinds: str = _opt("", doc="comma-separated incident kinds to deliver; empty = all")
    notify_group_s: float = _opt(5.0, minimum=0.0)
    notify_repeat_p0_s: float = _opt(300.0, minimum=1.0)

    # ------------------------------------------------------------------------------------
    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            key = env_key(f.name)
            lo = f.metadata.get("min")
            if lo is not None and value < lo:
                raise SettingsError(f"{key}: {value!r} is below the minimum {lo}")
            choices = f.metadata.get("choices")
            if choices and value not in choices:
                raise SettingsError(f"{key}: {value!r} is not one of {', '.join(map(repr, choices))}")
        if self.kafka_security_protocol.startswith("SASL") and not self.kafka_sasl_mechanism:
            raise SettingsError("COMMWATCH_KAFKA_SASL_MECHANISM: required with a SASL security protocol")
        if self.clickhouse_dsn and not re.match(r"^(chdb|https?|clickhouses?)://", self.clickhouse_dsn):
            raise SettingsError("COMMWATCH_CLICKHOUSE_DSN: must start with chdb://, http:// or https://")
        if not re.fullmatch(r"\s*(any|(self|\d+)(\s*,\s*(self|\d+))*)\s*", self.agent_ring_uids):
            raise SettingsError(f"COMMWATCH_AGENT_RING_UIDS: {self.agent_ring_uids!r} is not 'any' or a comma "
                                "list of uids and 'self'")
        if self.topic_prefix and not re.fullmatch(r"[A-Za-z0-9._-]+", self.topic_prefix):
            raise SettingsError(f"COMMWATCH_TOPIC_PREFIX: {self.topic_prefix!r} has characters Kafka refuses")

    def _shown(self, f: dataclasses.Field) -> Any:
        """A field's value as it may be shown: secrets masked, URL passwords redacted."""
        value = getattr(self, f.name)
        if f.metadata.get("secret") and value:
            return "***"
        return redact_url(value) if f.name == "clickhouse_dsn" else value

    def __repr__(self) -> str:
        parts = [f"{f.name}={self._shown(f)!r}" for f in dataclasses.fields(self)]
        return f"Settings({', '.join(parts)})"

    __str__ = __repr__

    # ------------------------------------------------------------------------------------
    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> "Settings":
        """Environment first, then `overrides` (from CLI flags, already named by field)."""
        env = os.environ if env is None else env
        names = {f.name: f for f in dataclasses.fields(cls)}
        known = {env_key(n) for n in names}
        for key in env:
            if key.startswith(ENV_PREFIX) and key not in known and key not in IGNORED_ENV:
                raise SettingsError(f"{key}: unknown setting (known: see `commwatch config`)")
        values: dict[str, Any] = {}
        for name, f in names.items():
            key = env_key(name)
            if key in env:
                values[name] = _convert(key, env[key], f.type)
        for name, raw in overrides.items():
            if raw is None:
                continue
            if name not in names:
                raise SettingsError(f"{env_key(name)}: unknown setting")
            values[name] = _convert(env_key(name), raw, names[name].type) if isinstance(raw, str) else raw
        return cls(**values)

    def replace(self, **changes: Any) -> "Settings":
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------------------------
    @property
    def topics(self) -> Topics:
        return Topics(self.topic_prefix)

    def ring_uids(self, own_uid: int) -> frozenset[int] | None:
        """The uids of `agent_ring_uids` ('self' = `own_uid`), or None for any uid."""
        parts = [p.strip() for p in self.agent_ring_uids.split(",")]
        if parts == ["any"]:
            return None
        return frozenset(own_uid if p == "self" else int(p) for p in parts)

    @property
    def embedded_kafka(self) -> bool:
        return not self.kafka_bootstrap

    @property
    def clickhouse_url(self) -> str:
        """The DSN in force: the given one, or the embedded database under data_dir."""
        return self.clickhouse_dsn or f"chdb://{Path(self.data_dir).absolute() / 'clickhouse'}"

    def kafka_config(self, bootstrap: str | None = None) -> dict[str, Any]:
        """librdkafka settings shared by every client (security passed through)."""
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap or self.kafka_bootstrap}
        if self.kafka_security_protocol != "PLAINTEXT":
            conf["security.protocol"] = self.kafka_security_protocol
        if self.kafka_sasl_mechanism:
            conf["sasl.mechanism"] = self.kafka_sasl_mechanism
            conf["sasl.username"] = self.kafka_sasl_username
            conf["sasl.password"] = self.kafka_sasl_password
        for name, key in (
            ("kafka_ssl_ca_location", "ssl.ca.location"),
            ("kafka_ssl_certificate_location", "ssl.certificate.location"),
            ("kafka_ssl_key_location", "ssl.key.location"),
            ("kafka_ssl_key_password", "ssl.key.password"),
        ):
            if getattr(self, name):
                conf[key] = getattr(self, name)
        return conf

    def describe(self) -> list[tuple[str, str, str]]:
        """(env key, value as shown, doc) for `commwatch config`; secrets masked."""
        return [(env_key(f.name), str(self._shown(f)), f.metadata.get("doc", "")) for f in dataclasses.fields(self)]


# Variables that share the prefix but are read by other parts (the C probe, the hook).
IGNORED_ENV = frozenset({"COMMWATCH_RING_CAPACITY", "COMMWATCH_TEST_KEEP"})


def env_key(name: str) -> str:
    return ENV_PREFIX + name.upper()


def redact_url(url: str) -> str:
    """Hide a password embedded in a URL (`http://user:pw@host` -> `http://user:***@host`)."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def _convert(key: str, raw: str, typ: Any) -> Any:
    typ = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
    raw = raw.strip()
    if typ == "int":
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"{key}: {raw!r} is not an integer") from None
    if typ == "float":
        try:
            value = float(raw)
        except ValueError:
            raise SettingsError(f"{key}: {raw!r} is not a number") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise SettingsError(f"{key}: {raw!r} is not a finite number")
        return value
    if typ == "bool":
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off", ""):
            return False
        raise SettingsError(f"{key}: {raw!r} is not a boolean")
    return raw
