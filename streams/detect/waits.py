"""The wait-for graph of one job (stage 2): from the ranks that wait to the root cause.

Nodes are ranks and blocked instances (a comm's first instance that no member completed,
or a blocked send/recv channel; `comm_stage.py`'s `wait` reports). Edges:

- rank -> instance: the rank entered the instance and waits in it;
- instance -> rank, *hard*: the rank is a member that never entered it, or that only queued
  it (a host enqueue) while another member is known inside it on its device, and that waits
  in nothing older: its device never reached the call (a kernel before it holds the GPU);
- instance -> rank, *soft*: every member entered it, but this member also waits in another
  blocked instance, which may hold its device: calls queued behind a blocked call on the same
  stream are symptoms, not faults.

Ranks that exited, left the comm, or whose completion path is stuck (their peers completed
what they still report open) wait on nobody: they have no outgoing edge, and an instance they
are in points at them as if they had never entered it (they will never complete it).

Starting from the instances waited in for at least the threshold, the roots are the sink
components of what is reachable: a rank (inside no blocked call: hung, exited, stuck, or
merely slow and still progressing, which the caller tells apart by its silence), an
instance (every member entered it, none is held elsewhere and none completes: the
transport, a `comm_hang`), or a cycle (a real deadlock: the ranks of it that its instances
lack, `_cycle_ranks`).

>>> w = {"aa": {"instances": [{"seq": 4, "op": "AllReduce", "since_ns": 0, "entered": [0, 1], "missing": [2]}]},
...      "bb": {"instances": [{"seq": 9, "op": "AllReduce", "since_ns": 0, "entered": [2, 3], "missing": [4]}]}}
>>> g = analyse(w, now_ns=10**10, threshold_ns=5 * 10**9, terminal=set())
>>> g.roots, g.comm_roots
({4: ('bb', 9, 'AllReduce', False)}, [])
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_CHAIN_EDGES = 256


@dataclass
class Instance:
    comm: str
    seq: int
    op: str
    since_ns: int
    entered: list[int]
    missing: list[int]
    p2p: bool = False
    unknown: int = 0
    t_in: dict[int, int] = field(default_factory=dict)  # rank -> when it entered (its clock; absent: unknown)
    queued: list[int] = field(default_factory=list)  # entered on the host only, while a peer is inside on its device
    inside_ns: int = 0  # since when every member is inside on its device, where known (a transfer); else `since_ns`


@dataclass
class Analysis:
    roots: dict[int, tuple[str, int, str, bool]] = field(default_factory=dict)  # rank -> (comm, seq, op, p2p)
    comm_roots: list[Instance] = field(default_factory=list)
    deadlock: bool = False
    waiting: set[int] = field(default_factory=set)  # ranks inside instances that reach a root
    blocked: list[Instance] = field(default_factory=list)  # instances that reach a root
    edges: list[list] = field(default_factory=list)  # [waiter, waited for, comm] along hard edges
    oldest_since_ns: int = 0
    waiters_of: dict[int, int] = field(default_factory=dict)  # root rank -> ranks waiting on it directly
    not_started: set[int] = field(default_factory=set)  # roots that queued the call their peers wait in
    own: dict[int, tuple[str, int, str]] = field(default_factory=dict)  # a deadlock's root -> the call it waits in


def instances_of(waits: dict[str, dict]) -> list[Instance]:
    out = []
    for comm in sorted(waits):
        w = waits[comm]
        for i in w["instances"]:
            t_in = {r: t for r, t in zip(i["entered"], i.get("t_in") or ()) if t}
            out.append(Instance(comm, i["seq"], i["op"], i["since_ns"], list(i["entered"]), list(i["missing"]),
                                bool(i.get("p2p")), int(w.get("unknown", 0)), t_in, list(i.get("queued") or ()),
                                int(i.get("inside_ns") or i["since_ns"])))
    return out


def analyse(waits: dict[str, dict], now_ns: int, threshold_ns: float, terminal: set[int]) -> Analysis:
    """The graph reachable from the instances waited in for at least `threshold_ns`."""
    # an instance whose members inside are all terminal and that lacks nobody holds no waiter
    # (a stuck rank's own calls, their peers' sides completed): the job may well progress
    insts = [x for x in instances_of(waits) if x.missing or x.unknown or any(r not in terminal for r in x.entered)]
    res = Analysis()
    if not insts:
        return res
    # where each rank waits
    waits_in: dict[int, list[int]] = {}
    for i, x in enumerate(insts):
        for r in x.entered:
            if r not in terminal:
                waits_in.setdefault(r, []).append(i)

    def earlier(m: int, j: int, i: int) -> bool:
        """Whether rank `m` entered instance `j` before `i` (its own clock; unknown: maybe)."""
        tj, ti = insts[j].t_in.get(m), insts[i].t_in.get(m)
        return tj is None or ti is None or tj < ti

    def held_elsewhere(m: int, i: int) -> bool:
        # a device runs a stream's calls in the order they were entered: a call entered earlier
        # holds it; where the order is not known (several streams, entry times not reported),
        # any other may, and only when none leads to a rank that never entered do the
        # instances together form a transport hang
        return any(j != i and earlier(m, j, i) for j in waits_in.get(m, ()))

    # members that only queued an instance their peers are inside on the device, and wait in
    # nothing older: not in it, but holding it (only where every member entered on the host)
    absent: dict[int, list[int]] = {}
    for i, x in enumerate(insts):
        if x.queued and not x.missing and not any(m in terminal for m in x.entered):
            idle = [m for m in x.queued if not held_elsewhere(m, i)]
            if idle:
                absent[i] = idle
    # a rank waits in its oldest blocked instances only: those no other it entered is known
    # (both entry times reported) to precede; calls it queued behind them are symptoms, and
    # an instance it only queued (absent) is not a wait of it
    def behind(m: int, i: int) -> bool:
        ti = insts[i].t_in.get(m)
        return ti is not None and any(j != i and insts[j].t_in.get(m, ti) < ti for j in waits_in[m])

    oldest = {m: [i for i in ins if not behind(m, i)] for m, ins in waits_in.items()}
    for i, idle in absent.items():
        for m in idle:
            if i in oldest[m]:
                oldest[m].remove(i)

    def out_edges(node) -> list:
        if isinstance(node, int):  # a rank
            return [("i", j) for j in oldest.get(node, ())]
        x = insts[node[1]]
        dead = [m for m in x.entered if m in terminal]  # in it, but will never complete it
        if x.missing or dead:
            return list(x.missing) + dead
        if node[1] in absent:
            return list(absent[node[1]])
        return [m for m in x.entered if held_elsewhere(m, node[1])]

    def lacks(i: int, r: int) -> bool:
        return r in insts[i].missing or r in absent.get(i, ())

    starts = [("i", i) for i, x in enumerate(insts) if now_ns - x.since_ns >= threshold_ns]
    if not starts:
        return res
    # reachable subgraph
    adj: dict = {}
    stack = list(starts)
    while stack:
        node = stack.pop()
        if node in adj:
            continue
        adj[node] = out_edges(node)
        stack.extend(e for e in adj[node] if e not in adj)
    sinks = _sink_components(adj)
    for comp in sinks:
        ranks = [n for n in comp if isinstance(n, int)]
        hard = [r for r in ranks if r in terminal or any(not isinstance(n, int) and lacks(n[1], r) for n in comp)]
        # a cycle: per rank, its oldest instances of it, and how many of its ranks wait in each
        here = {n[1] for n in comp if not isinstance(n, int)} if len(comp) > 1 else set()
        held = {r: [i for i in oldest.get(r, ()) if i in here] for r in ranks} if here else {}
        count: dict[int, int] = {}
        for r in held:
            for i in held[r]:
                count[i] = count.get(i, 0) + 1
        inside = {r: [count[i] for i in held[r]] for r in held}
        coll = {r: [count[i] for i in held[r] if not insts[i].p2p] for r in held}
        if not hard and ranks and here and all(
                insts[i].t_in.get(r) is not None for r in ranks for i in waits_in.get(r, ()) if i in here):
            # every member entered each instance, but each rank's own entry times say which of
            # them it entered first, and the ranks disagree: a deadlock of call order, not the
            # transport (the ninth generator's rank 10 under a host-enqueue probe enqueued its
            # second data-parallel comm's all-reduce before its first's, its 7 peers the other
            # way round: a comm_hang naming no rank). Named where a few broke the order
            few = _cycle_ranks(ranks, inside, coll)
            hard = few if len(few) < len(ranks) else []
        if not hard and len(ranks) < len(comp):  # instances every member entered, holding each other
            idx = [n[1] for n in comp if not isinstance(n, int)]
            # the hung one first: the instance each of its members entered before its others
            first = [i for i in idx if not any(j != i and insts[j].t_in.get(m, 1 << 62) < insts[i].t_in.get(m, -1)
                                               for m in insts[i].entered for j in waits_in.get(m, ()) if j in idx)]
            xs = sorted((insts[i] for i in idx), key=lambda x: (insts.index(x) not in first, x.since_ns, x.comm))
            if not any(x.unknown for x in xs):  # a member never seen may be the one missing
                res.comm_roots.extend(xs)
            continue
        if len(comp) > 1:
            res.deadlock = True
            ranks = _cycle_ranks(hard, inside, coll)
            for r in ranks:
                if held.get(r):
                    x = insts[held[r][0]]
                    res.own[r] = (x.comm, x.seq, x.op)
        for r in ranks:
            where = next((insts[n[1]] for n, outs in adj.items() if not isinstance(n, int) and r in outs
                          and (lacks(n[1], r) or r in terminal)), None)
            if any(not isinstance(n, int) and r in outs and r in absent.get(n[1], ()) for n, outs in adj.items()):
                res.not_started.add(r)
            if where is None:
                where = next(insts[n[1]] for n, outs in adj.items() if not isinstance(n, int) and r in outs)
            res.roots[r] = (where.comm, where.seq, where.op, where.p2p)
    # what reaches a root, for evidence and the chain
    for node in adj:
        if isinstance(node, int):
            res.waiting.add(node)
        else:
            x = insts[node[1]]
            res.blocked.append(x)
            res.waiting.update(r for r in x.entered if r not in terminal)
            for m in list(x.missing) + absent.get(node[1], []):
                if m in res.roots:
                    res.waiters_of[m] = res.waiters_of.get(m, 0) + len(x.entered)
                for r in x.entered[: MAX_CHAIN_EDGES]:
                    if len(res.edges) < MAX_CHAIN_EDGES and r != m:
                        res.edges.append([r, m, x.comm])
    res.waiting -= set(res.roots)
    res.oldest_since_ns = min(x.since_ns for x in res.blocked) if res.blocked else now_ns
    return res


def _cycle_ranks(hard: list[int], inside: dict[int, list[int]], coll: dict[int, list[int]] | None = None
                 ) -> list[int]:
    """The roots of a deadlock: the ranks of the cycle that an instance of it lacks (each
    waits for the other), however many others wait on each (the seventh generator's two
    pipeline ranks each inside a send to the other, an ordering bug: only the one more ranks
    waited on was named) - but where some wait in instances of the cycle that fewer of its
    ranks wait in than the others', those: every member issues a comm's calls in one order,
    and the few that wait in another call than all the rest broke it (`inside`: per rank, how
    many of the cycle's ranks wait in each instance of it it waits in, its oldest). The ninth
    generator's rank 21 called its second data-parallel comm's all-reduce before its first's
    (its 7 peers the other way round): 21 alone inside one, the 7 inside the other, each
    lacking the others; all 8 were named.
    The collectives first (`coll`: the same counts, of its collective instances only): one
    send or receive is waited in by one rank at most, so a rank inside a pipeline send looks
    as few as the one that broke the order. The twentieth generator's rank 13 (TP 4 x PP 2 x
    DP 4, host-enqueue) alone inside a barrier of the world comm, its TP peers inside their
    all-reduce waiting for it, the previous stage's ranks 8-11 inside sends to those peers:
    8-11 were named with 13."""
    if coll is not None:
        few = _cycle_ranks([r for r in hard if coll.get(r)], coll)
        if few and len(few) < len([r for r in hard if coll.get(r)]):
            return few
    size = {r: max(inside.get(r) or [0]) for r in hard}
    fewest = min(size.values(), default=0)
    if not fewest or fewest == max(size.values()):
        return hard
    return [r for r in hard if size[r] == fewest]


def _sink_components(adj: dict) -> list[list]:
    """Strongly connected components of `adj` with no edge leaving them (Tarjan, iterative)."""
    index: dict = {}
    low: dict = {}
    on: set = set()
    stack: list = []
    comps: list[list] = []
    counter = 0
    for root in adj:
        if root in index:
            continue
        work = [(root, iter(adj.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(adj.get(nxt, ()))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                comps.append(comp)
    comp_of = {n: i for i, c in enumerate(comps) for n in c}
    return [c for i, c in enumerate(comps) if all(comp_of.get(m, -1) == i for n in c for m in adj.get(n, ()))]
