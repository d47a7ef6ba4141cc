"""Topic names (wire contract section 2) with the optional deployment prefix, and key helpers."""

from __future__ import annotations

from dataclasses import dataclass

from commwatch.wire import WireError, comm_hex, parse_comm

CALLS = "cw.calls.v1"
PROGRESS = "cw.progress.v1"
TOPOLOGY = "cw.topology.v1"
STEPS = "cw.steps.v1"
HW = "cw.hw.v1"
ALERTS = "cw.alerts.v1"
DEADLETTER = "cw.deadletter.v1"

# internal (docs/architecture.md): job health snapshots from the worker that runs a job's stage 2
HEALTH = "cw.internal.health.v1"
WINDOWS = "cw.internal.windows.v2"  # one message per communicator window (streams/window_message.py)

ALL = (CALLS, PROGRESS, TOPOLOGY, STEPS, HW, ALERTS, DEADLETTER)
INPUTS = (CALLS, PROGRESS, TOPOLOGY, STEPS, HW)
ERROR_HEADER = "cw-error"


@dataclass(frozen=True)
class Topics:
    """The contract's topics under one prefix (`""` for none)."""

    prefix: str = ""

    def name(self, base: str) -> str:
        return f"{self.prefix}.{base}" if self.prefix else base

    def base(self, name: str) -> str:
        """The contract name of a (possibly prefixed) topic."""
        if self.prefix and name.startswith(self.prefix + "."):
            return name[len(self.prefix) + 1 :]
        return name

    @property
    def calls(self) -> str:
        return self.name(CALLS)

    @property
    def progress(self) -> str:
        return self.name(PROGRESS)

    @property
    def topology(self) -> str:
        return self.name(TOPOLOGY)

    @property
    def steps(self) -> str:
        return self.name(STEPS)

    @property
    def hw(self) -> str:
        return self.name(HW)

    @property
    def alerts(self) -> str:
        return self.name(ALERTS)

    @property
    def deadletter(self) -> str:
        return self.name(DEADLETTER)

    def all(self) -> list[str]:
        return [self.name(t) for t in ALL]

    def inputs(self) -> list[str]:
        return [self.name(t) for t in INPUTS]


def comm_key(job: str, comm: int) -> str:
    """`{job}/{comm}` with comm as 16 lowercase hex digits."""
    return f"{job}/{comm_hex(comm)}"


def split_comm_key(key: str | bytes | None) -> tuple[str, int]:
    """Parse a `{job}/{comm}` key; raises `WireError("bad_key")`."""
    if isinstance(key, bytes):
        try:
            key = key.decode("utf-8")
        except UnicodeDecodeError:
            raise WireError("bad_key", "key is not UTF-8") from None
    if not key or "/" not in key:
        raise WireError("bad_key", f"key {key!r} is not '{{job}}/{{comm}}'")
    job, _, comm = key.rpartition("/")
    if not job:
        raise WireError("bad_key", f"key {key!r} has an empty job")
    return job, parse_comm(comm)
