"""Fault schedules: `--fault` specs and YAML/JSON schedule files.

Spec forms (times take ``s``, ``ms`` or ``m``; a bare number is seconds of simulated time
from the job's start):

- ``hang:rank=17,at=30s``: rank 17 stops issuing calls at 30 s
- ``comm_hang:comm=dp0,at=20s``: every member of ``dp0`` enters its next call after 20 s and
  none completes (``comm`` is a name ``tp3``/``pp5``/``dp0``/``cp1``/``ep2`` or a 16-hex id)
- ``slow:rank=5,factor=1.5,at=10s[,for=20s]``: rank 5 computes 1.5x slower
- ``slow_link:nodes=node-00+node-01,factor=3,at=10s[,for=20s]``: transfers of every
  communicator spanning both nodes take 3x longer
- ``downclock:rank=9,at=10s,mhz=1100[,factor=1.6][,for=20s]``: slow rank with its SM clock
  dropped in hardware samples (factor defaults to 1980/mhz)
- ``node_lost:node=node-03,at=40s``: the node's agent goes silent and its ranks stop
- ``blip:rank=3,at=12s,ms=400``: one transient pause of one rank (no incident expected)

A schedule file holds a list of specs or of objects with the same keys plus ``kind``
(``{"faults": [...]}`` also accepted)::

    faults:
      - hang:rank=17,at=30s
      - {kind: slow, rank: 5, factor: 1.5, at: 10s}

>>> parse_fault("slow:rank=5,factor=1.5,at=10s,for=20s")
Fault(kind='slow', at_s=10.0, for_s=20.0, rank=5, comm=None, nodes=(), factor=1.5, mhz=None, ms=None)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = ("hang", "comm_hang", "slow", "slow_link", "downclock", "node_lost", "blip")
_KEYS = {
    "hang": ({"rank", "at"}, set()),
    "comm_hang": ({"comm", "at"}, set()),
    "slow": ({"rank", "factor", "at"}, {"for"}),
    "slow_link": ({"nodes", "factor", "at"}, {"for"}),
    "downclock": ({"rank", "at"}, {"mhz", "factor", "for"}),
    "node_lost": ({"node", "at"}, set()),
    "blip": ({"rank", "at"}, {"ms"}),
}


class FaultError(ValueError):
    """A fault spec that cannot be used; the message names the spec and the key."""


@dataclass(frozen=True)
class Fault:
    kind: str
    at_s: float
    for_s: float | None = None
    rank: int | None = None
    comm: str | None = None
    nodes: tuple[str, ...] = ()
    factor: float | None = None
    mhz: float | None = None
    ms: float | None = None

    @property
    def until_s(self) -> float | None:
        return None if self.for_s is None else self.at_s + self.for_s


def parse_time(text: Any, what: str = "time") -> float:
    """``30s``, ``500ms``, ``2m`` or a number of seconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m)?\s*", str(text))
        if not m:
            raise FaultError(f"{what}={text!r} is not a time like 30s, 500ms or 2m")
        value = float(m.group(1)) * {"ms": 1e-3, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]
    if value < 0:
        raise FaultError(f"{what}={text!r} is negative")
    return value


def _number(value: Any, what: str, minimum: float = 0.0) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise FaultError(f"{what}={value!r} is not a number") from None
    if not v > minimum:
        raise FaultError(f"{what}={value!r} must be > {minimum:g}")
    return v


def fault_from_dict(kind: str, fields: dict[str, Any], where: str) -> Fault:
    if kind not in KINDS:
        raise FaultError(f"{where}: unknown fault kind {kind!r} (known: {', '.join(KINDS)})")
    required, optional = _KEYS[kind]
    keys = set(fields)
    if missing := sorted(required - keys):
        raise FaultError(f"{where}: {kind} needs {', '.join(missing)}")
    if extra := sorted(keys - required - optional):
        raise FaultError(f"{where}: {kind} takes no {', '.join(extra)}")
    kw: dict[str, Any] = {"kind": kind, "at_s": parse_time(fields["at"], f"{where}: at")}
    if "for" in fields:
        kw["for_s"] = parse_time(fields["for"], f"{where}: for")
    if "rank" in fields:
        try:
            kw["rank"] = int(fields["rank"])
        except (TypeError, ValueError):
            raise FaultError(f"{where}: rank={fields['rank']!r} is not an integer") from None
        if kw["rank"] < 0:
            raise FaultError(f"{where}: rank={kw['rank']} is negative")
    if "comm" in fields:
        kw["comm"] = str(fields["comm"])
    if "nodes" in fields:
        nodes = fields["nodes"]
        nodes = tuple(nodes) if isinstance(nodes, (list, tuple)) else tuple(str(nodes).split("+"))
        if len(nodes) != 2 or nodes[0] == nodes[1]:
            raise FaultError(f"{where}: nodes={fields['nodes']!r} must name two different nodes A+B")
        kw["nodes"] = tuple(str(n) for n in nodes)
    if "node" in fields:
        kw["nodes"] = (str(fields["node"]),)
    if "factor" in fields:
        kw["factor"] = _number(fields["factor"], f"{where}: factor")
    if "mhz" in fields:
        kw["mhz"] = _number(fields["mhz"], f"{where}: mhz")
    if "ms" in fields:
        kw["ms"] = _number(fields["ms"], f"{where}: ms")
    if kind == "downclock":
        kw.setdefault("mhz", 1100.0)
        kw.setdefault("factor", 1980.0 / kw["mhz"])
    if kind == "blip":
        kw.setdefault("ms", 400.0)
    return Fault(**kw)


def parse_fault(spec: str) -> Fault:
    """One ``kind:key=value,...`` spec; raises `FaultError` naming the spec."""
    where = f"--fault {spec!r}"
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise FaultError(f"{where}: expected KIND:key=value,... (e.g. hang:rank=17,at=30s)")
    fields: dict[str, str] = {}
    for item in rest.split(","):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise FaultError(f"{where}: {item!r} is not key=value")
        fields[key.strip()] = value.strip()
    return fault_from_dict(kind.strip(), fields, where)


def load_schedule(path: str | Path) -> list[Fault]:
    """Faults from a YAML (``.yaml``/``.yml``) or JSON file."""
    path = Path(path)
    where = f"--faults {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FaultError(f"{where}: cannot read ({exc.strerror})") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise FaultError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise FaultError(f"{where}: not valid JSON ({exc})") from None
    if isinstance(data, dict):
        data = data.get("faults")
    if not isinstance(data, list):
        raise FaultError(f"{where}: expected a list of faults or {{faults: [...]}}")
    faults = []
    for i, item in enumerate(data):
        if isinstance(item, str):
            faults.append(parse_fault(item))
        elif isinstance(item, dict) and "kind" in item:
            fields = {k: v for k, v in item.items() if k != "kind"}
            faults.append(fault_from_dict(str(item["kind"]), fields, f"{where} [{i}]"))
        else:
            raise FaultError(f"{where} [{i}]: expected a spec string or an object with 'kind'")
    return faults
