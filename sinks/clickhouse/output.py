"""Query results as text: an aligned table, TSV, or JSON lines."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Sequence

FORMATS = ("table", "tsv", "json")


def _plain(v: Any) -> Any:
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


def _cell(v: Any) -> str:
    v = _plain(v)
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def render(names: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str = "table") -> str:
    if fmt == "json":
        return "".join(json.dumps(dict(zip(names, map(_plain, r)))) + "\n" for r in rows)
    cells = [[_cell(v) for v in r] for r in rows]
    if fmt == "tsv":
        return "".join("\t".join(r) + "\n" for r in [list(names)] + cells)
    widths = [max([len(n)] + [len(r[i]) for r in cells]) for i, n in enumerate(names)]
    lines = ["  ".join(n.ljust(w) for n, w in zip(names, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines) + "\n"
