"""Wait-for chains across communicators (stage 2): from ranks that wait to the root.

A `wait` report of a comm lists the ranks inside a call and the ranks that never entered
it (`missing`). A missing rank that is itself inside a call of another comm is a victim:
follow that comm's missing ranks, and so on. The chain ends at ranks inside no call (the
root: a `hang`) or at a comm whose members all entered and none completes (`comm_hang`).

>>> waits = {"aa": {"inside": [[0, 1, -1]], "missing": [1], "unknown": 0, "since_ns": 1, "seq": 4},
...          "bb": {"inside": [[1, 2, -1]], "missing": [2], "unknown": 0, "since_ns": 2, "seq": 9}}
>>> walk(waits, inside_map(waits), ["aa"])
({2: ('bb', 9)}, [], 2)
"""

from __future__ import annotations


def inside_map(waits: dict[str, dict]) -> dict[int, tuple[str, int]]:
    """rank -> (comm, since) of the call it waits in (the oldest, if several)."""
    out: dict[int, tuple[str, int]] = {}
    for comm in sorted(waits):
        for r, since, _peer in waits[comm]["inside"]:
            if r not in out or since < out[r][1]:
                out[r] = (comm, since)
    return out


def walk(waits: dict[str, dict], inside: dict[int, tuple[str, int]], starts: list[str]):
    """Follow the chains from the comms `starts` together (one breadth-first pass).

    Returns (root ranks -> (comm, seq) where they are missing, root comms (all entered,
    none completes), the number of comms reached).
    """
    roots: dict[int, tuple[str, int]] = {}
    root_comms: list[str] = []
    seen = set(starts)
    queue = list(starts)
    while queue:
        comm = queue.pop(0)
        w = waits[comm]
        if not w["missing"]:
            root_comms.append(comm)
            continue
        for m in w["missing"]:
            where = inside.get(m)
            if where is not None and where[0] != comm and where[0] in waits:
                if where[0] not in seen:
                    seen.add(where[0])
                    queue.append(where[0])
            elif where is None:
                roots.setdefault(m, (comm, w["seq"]))
    return roots, root_comms, len(seen)
