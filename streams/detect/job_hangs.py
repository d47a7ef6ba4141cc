"""Stage 2's hang rules for one job, mixed into `JobStage` (`job_stage.py` has the contract).

- `hang` (P0, one per job while it lasts): the wait-for graph (`waits.py`) judged as of what
  every comm's reports tell (`JobStage.as_of`), from the ranks waiting in blocked instances to
  the roots; silent, exited, torn-down and stuck roots; its evidence updated in place.
- `comm_hang` (P0): a blocked instance that every member entered, none of them held by
  anything older, and none completes. Its members look alike in the call records; where the
  InfiniBand symbol errors of one or two of its nodes rose lately, that link is the suspect:
  those nodes and their members are named.
- `job_stalled` (P2): nobody inside a blocked call and no progress for far longer than usual.
- A hang or a stall like one that ended by itself before (the same silent roots; a job-wide
  stall) is a routine, not reported while it lasts under twice the longest seen
  (`HOLD_FACTOR`): rank 0 writing a checkpoint alone, every rank writing one. A wait on a
  few ranks that ended by itself under the threshold, but past `HOLD_LEARN` of it, is such a
  hold too (`_held_below`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from commwatch.streams.detect import waits

if TYPE_CHECKING:
    from commwatch.streams.detect.job_stage import JobState


HOLD_FACTOR = 2.0  # a known hold is a hang once it lasts twice the longest of it seen
HOLD_KEEP = 4  # lengths remembered per hold
HOLD_KEYS = 8  # holds remembered per job
BUSY_KEYS = 4096  # waits' instances whose lacking ranks were seen busy, kept per job at most
HOLD_LEARN = 0.5  # a collective's wait on ranks that ended by itself after this share of the root threshold is a hold
PROGRESSING_P2P_ROOT = True  # a rank progressing elsewhere, waited on in a transfer it never entered for the hang threshold, is a root
SHARED_CHANNEL_ROOT = True  # the one rank common to two or more stuck send/recv channels is their root (`_shared_channel`)
OUTLIVED_PERIODS = 1.5  # a rank that progressed this many heartbeat periods after others began waiting on a root did not die with it (`_died_with`)


class HangRules:
    """The hang, comm_hang and job_stalled rules of `JobStage` (its `as_of`, `silent_since`,
    `_stuck`, `_stale` and thresholds are the stage's own)."""

    def _hangs(self, js: JobState, now_ns: int, lost: set[str], out: list) -> None:
        if not js.waits:
            js.analysis = None
            held = js.book.open.get(("hang",))
            if held is not None and all(self.silent_since(js, r, now_ns) > held.opened_ns for r in held.culprit_ranks):
                # nobody waits any more and its roots progress again: over (a rank-0-only
                # checkpoint longer than the threshold, a stall that ended), not after the quiet
                # period, while the job has been running for that long already
                if {d.get("reason") for d in held.evidence.get("roots", ())} == {"silent"}:
                    self._held_once(js, tuple(sorted(held.culprit_ranks)),
                                    now_ns - held.evidence.get("onset_ns", held.opened_ns))
                out.extend(js.book.resolve(("hang",), now_ns, "its root ranks progress again"))
            self._hold_over(js)
            return
        at = self.as_of(js, now_ns)  # what every comm's reports tell: waits and silences are judged then
        reporting = self._reporting(js, at)
        if js.node_seen and not reporting:
            js.book.keep(("hang",), now_ns)  # not known to be over either (`_ended` ends the job)
            return  # nobody reports any more: the job ended or the pipeline lost it, not a hang
        stale = self._stale(js, at)
        # a comm that never completed a call has no cadence yet: its first wait may be a long
        # first iteration (compilation, calls enqueued far ahead of the compute): warm-up
        warm = self.settings.hang_warmup_s * 1e9
        current = {c: w for c, w in js.waits.items() if c not in stale and (
            js.comms.get(c, {}).get("done", True) or all(at - i["since_ns"] >= warm for i in w["instances"]))}
        thr, root_thr = js.threshold_ns, js.root_threshold_ns
        exited = self._exited(js)
        stuck = self._stuck(js, at)
        # a rank that left one comm (destroyed, to be created anew under another id) still
        # waits and progresses in its others: gone only once it left them all. Generator D's
        # data-parallel comms re-created mid-run: every rank had left one, and none was waited on
        left = self._left_all(js)
        # a rank silent for the threshold is hung once others wait on it inside a call (for the
        # floor: the threshold measures the rank's own silence against its cadence; peers reach
        # the call it never entered only at their own pace, within that cadence)
        # a rank inside a P2P call whose other side completed its own: the transfer is over
        # for the peer, and this side's completion never came (its process died inside the
        # call, or its completion path is stuck): it waits on nobody, and its call is no
        # transport hang. Generator A's node whose eight processes died just after entering
        # their pipeline recvs (its agent heartbeating on), drawn with SEED 6: the eight recvs,
        # their sends completed, were eight comm_hangs (one P0 naming no rank), and the eight
        # dead ranks were never named
        done_by_peer = {i["entered"][0] for w in current.values() for i in w["instances"] if i.get("peer_done")}
        an = waits.analyse(current, at, min(thr, self.settings.hang_floor_s * 1e9),
                           exited | set(stuck) | left | done_by_peer)
        js.analysis = an
        # comms with a call entered and not completed whose wait is not reported yet (it is,
        # once waited in for a second): a member silent there may be inside that call
        unreported = {c for c, rep in js.comms.items() if c not in js.waits and not rep.get("p2p_only")
                      and rep.get("s", -1) > rep.get("d", -1)}
        inside = self._inside_unjudged(js, current, stale)
        roots = []
        for r, (comm, seq, op, p2p) in sorted(an.roots.items()):
            node = js.node_of.get(r)
            if node in lost:
                continue  # its node is lost: node_lost covers it
            if any(r in js.members.get(c, ()) for c in stale):
                continue  # a comm of it has news not read yet (its input is behind): not known silent
            if r in exited:
                reason = "exited"
            elif r in stuck:
                reason = "completion_stuck"
            elif at - self.silent_since(js, r, at) >= root_thr:
                if r in inside or any(r in js.members.get(c, ()) for c in unreported):
                    continue  # maybe blocked in a call of it, behind someone else: not known hung yet
                reason = "not_started" if r in an.not_started else "silent"
            elif p2p and PROGRESSING_P2P_ROOT and self._progressing_root(js, r, an, comm, _since(an, comm, seq), at,
                                                                       thr, root_thr):
                reason = "progressing"
            else:
                continue  # still progressing elsewhere: slow, not hung (the slow detectors judge it)
            roots.append((r, reason, comm, seq, op, p2p))
        if roots:
            skip = exited | set(stuck) | left | inside | {
                r for w in current.values() for i in w["instances"] for r in i["entered"]}
            skip.update(r for c in stale | unreported for r in js.members.get(c, ()))
            roots.extend(self._died_with(js, at, roots, skip, root_thr, an.oldest_since_ns))
        waited = at - an.oldest_since_ns
        if ("hang",) in js.book.open:
            js.hang_waiters |= an.waiting
        else:
            js.hang_waiters = set(an.waiting)
        roots, comm_roots = self._torn_down(js, at, roots, an.comm_roots)
        if not roots and SHARED_CHANNEL_ROOT:
            roots = self._shared_channel(js, an.comm_roots, at, thr)  # an open hang's own too (`_torn_down`)
            comm_roots = [x for x in comm_roots if not roots or roots[0][0] not in x.entered]
        if roots and ("hang",) not in js.book.open and self._known_hold(js, roots, waited):
            roots = []
        elif roots:
            js.holding = None  # not a known hold, or past it: a hang, not a hold that ended
        else:
            self._hold_over(js)
        if roots:
            self._assert_hang(js, now_ns, at, an, roots, waited, root_thr, out)
        elif ("hang",) in js.book.open and any(r in js.members.get(c, ()) for c in stale
                                               for r in js.book.open[("hang",)].culprit_ranks):
            # a comm of its roots is behind (its node's data late, a worker that took its
            # partition over catching up): not known to progress again, the hang is kept
            # open. Two workers, a hung job's partitions moving to the one that joined: its
            # P0 resolved "not seen for 10 s", and opened again under its id once data came
            js.book.keep(("hang",), now_ns)
        comm_roots = [x for x in comm_roots if not lost.intersection(js.comms.get(x.comm, {}).get("nodes", ()))
                      and set(js.comms.get(x.comm, {}).get("nodes") or ()) <= reporting
                      # a comm a member of which exited is no transport hang: the exit explains it
                      and not (exited & (set(x.entered) | js.members.get(x.comm, set())))
                      # a transfer whose sides got inside on their devices apart is stuck since
                      # the later did: the job model's rank 0 checkpointing alone for 4.6 s (a
                      # 5 s threshold) held a pipeline pair's send on the sender's GPU behind its
                      # TP all-reduce; its recv side waited 5.1 s, the send had been in 0.3 s
                      # (a P0 comm_hang, timed from the sender's host enqueue)
                      and at - x.inside_ns >= thr
                      # calls queued far ahead (host enqueue) wait behind compute while their
                      # ranks progress: a transport hang stops every member
                      and all(at - self.silent_since(js, r, at) >= thr for r in x.entered)]
        if comm_roots:
            x = min(comm_roots, key=lambda i: (i.since_ns, i.comm))
            nodes = sorted({n for i in comm_roots for n in js.comms.get(i.comm, {}).get("nodes", ())})
            age = (at - x.since_ns) / 1e9
            summary = (f"all {len(x.entered)} members entered {x.op} #{x.seq} on comm {x.comm[:4]}.. and none "
                       f"completes for {age:.1f} s (nodes {', '.join(nodes) or '?'})")
            evidence = {"seq": x.seq, "op": x.op, "waited_s": round(age, 1), "ranks": sorted(x.entered)[:64],
                        "comms": [i.comm for i in comm_roots][:16], "threshold_s": round(thr / 1e9, 2),
                        "onset_ns": int(x.since_ns)}
            culprits: list[int] = []
            # the call records cannot tell whose link died (every member looks alike); the nodes'
            # InfiniBand counters can: symbol errors that rose lately on one or two of its nodes
            erring = self._ib_erring(js, nodes, now_ns)
            if 1 <= len(erring) <= 2 and len(erring) < len(nodes):
                culprits = sorted({r for i in comm_roots for r in i.entered if js.node_of.get(r) in erring})
                evidence.update(candidate_nodes=nodes, ib_symbol_errors={n: js.ib_errors[n][0] for n in erring})
                summary += (f"; InfiniBand symbol errors rose lately on {', '.join(erring)} only: its link is the "
                            f"suspect (ranks {', '.join(map(str, culprits))} there)")
                nodes = erring
            out.extend(js.book.assert_(
                ("comm_hang",), now_ns, kind="comm_hang", severity="P0", culprit_ranks=culprits, culprit_nodes=nodes,
                comm=x.comm, summary=summary, evidence=evidence, id_hint=f"{x.comm}-{x.seq}"))

    def _shared_channel(self, js: JobState, comm_roots: list, at: int, thr: float) -> list:
        """A rank common to every send/recv channel that is stuck with both its ends inside
        (two or more, waited in for the threshold, the rank silent as long): its device
        stopped inside its transfers, and its channels' other ends wait on it. A dead link
        stalls its own channel, not the ones on the rank's other side; every channel of a
        comm's transport failing has no one rank in common. The stacks generator's JAX ring
        collective-permute, rank 43's GPU stopping inside it: its channels 42->43 and 43->44
        stuck, the comm's six others completed, was one P0 comm_hang naming nobody."""
        xs = [x for x in comm_roots if x.p2p]
        if len(xs) < 2 or len(xs) < len(comm_roots) or any(len(x.entered) != 2 for x in xs) or \
                at - min(x.since_ns for x in xs) < thr:
            return []
        common = set(xs[0].entered).intersection(*(x.entered for x in xs[1:]))
        if len(common) != 1:
            return []
        r = common.pop()
        if at - self.silent_since(js, r, at) < thr or self._ib_erring(js, js.comms.get(xs[0].comm, {}).get(
                "nodes", ()), at):
            return []
        x = min(xs, key=lambda i: (i.since_ns, i.comm))
        return [(r, "stopped_inside", x.comm, x.seq, x.op, True)]

    def _progressing_root(self, js: JobState, rank: int, an: waits.Analysis, comm: str, since: int, at: int,
                          thr: float, root_thr: float) -> bool:
        """Whether a rank progressing elsewhere is yet the root of a wait in a transfer it never
        entered: waited on there since `since` for the job's hang threshold, it went on
        progressing for `root_thr` or more after (the thread that posts its transfers is stuck,
        not the rank), inside no blocked call itself. The sixteenth generator's disaggregated
        serving job: prefill rank 2's KV sender deadlocked, its main loop running prefill
        forwards with its TP peers; two decode ranks waited in their receives from it for 90 s,
        and nothing was raised. A rank that stopped when the wait began is hung, and judged so
        once silent for `root_thr`. Nor a rank inside a blocked call of its own: the eighth
        generator's healthy 2048-rank job had two ranks inside the first send of one comm,
        each waited on by the other's, both running on elsewhere; named P0, 'a deadlock', at
        10 s. And the rank silent on that comm for the threshold too: a healthy host-enqueue
        pipeline whose node clocks disagree by seconds, its capture ending, showed a wait of
        6 s on a rank whose previous send there had just completed (named P0)."""
        quiet = next((t for r, t in js.comms.get(comm, {}).get("quiet", ()) if r == rank), None)
        return (not an.deadlock and rank not in an.waiting and at - since >= thr and quiet is not None
                and at - quiet >= thr and self.silent_since(js, rank, at) - since >= root_thr)

    @staticmethod
    def _hold_key(roots: list) -> tuple | None:
        """What a hold is known by: its root ranks, all silent. Not the call they never entered:
        where the others wait on them first varies from one hold to the next (rank 0's TP peer
        in an all-reduce, or the next stage in its receive, whichever wait is the older: a
        job-model run drawn with 120 keyed its second checkpoint apart from its first)."""
        if not roots or any(x[1] != "silent" for x in roots):
            return None
        return tuple(sorted(x[0] for x in roots))

    def _known_hold(self, js: JobState, roots: list, waited: int) -> bool:
        """Whether the roots hold the job as they did before, in a hold that ended by itself
        (`JobState.holds`), and not yet for twice its longest: a routine that recurs, not a
        hang. Rank 0 writing a checkpoint alone every 10 minutes for 30-45 s while every other
        rank waits in a barrier (a generator written apart from the detector, 31 minutes of a
        16-rank job): each of its three checkpoints paged a P0 naming rank 0. The first one
        still does (a rank that never came back looks the same); one that lasts past twice the
        longest seen is a hang, named then, and stays one while open (its waits may reshape:
        a watchdog's abort makes the oldest wait younger)."""
        key = self._hold_key(roots)
        seen = js.holds.get(key) if key else None
        if not seen or waited >= HOLD_FACTOR * max(seen):
            return False
        js.holding = (key, waited)
        return True

    @staticmethod
    def _held_once(js: JobState, key: tuple, length: float) -> None:
        """A hold that ended by itself, `length` ns long: remembered, its latest few lengths."""
        seen = js.holds.pop(key, [])
        js.holds[key] = (seen + [float(length)])[-HOLD_KEEP:]
        while len(js.holds) > HOLD_KEYS:
            js.holds.pop(next(iter(js.holds)))

    @staticmethod
    def _busy_missing(js: JobState, rep: dict) -> None:
        """A comm's `wait` report: the ranks each of its instances lacks that are inside a
        blocked call of another comm now are remembered until its wait ends: they were not
        holding the job on their own (`_held_below`)."""
        comm = rep["comm"]
        if len(js.busy_missing) > BUSY_KEYS:
            js.busy_missing.clear()
        inside = {r for c, w in js.waits.items() if c != comm for i in w["instances"] for r in i["entered"]}
        for i in rep["instances"]:
            busy = inside.intersection(i.get("missing") or ())
            if busy:
                js.busy_missing.setdefault((comm, int(i["seq"])), set()).update(busy)

    def _held_below(self, js: JobState, wait: dict, end_ns: int) -> None:
        """A comm's wait (its last `wait` report) over at `end_ns`: each collective instance
        that lacked a few ranks (half its members at most) for `HOLD_LEARN` of the root
        threshold or more, none of them seen inside a blocked call of another comm meanwhile
        (`_busy_missing`), ended by itself, a hold of those ranks that never paged. The
        twentieth generator's DDP job (0.4 s steps): rank 0 writes checkpoint metadata for
        4-7 s every 50 steps while the 15 others wait in a one-element all-reduce of a side
        comm; its first took 4.1 s, and its second, 5.2 s, paged a P0 naming rank 0. A rank
        that later hangs where it held before is named at twice its longest hold, not at the
        threshold. The islands generator's site leader, 5-40 s in the outer all-reduce over
        the WAN while its site waited in their broadcast, was no such hold: the round it never
        entered that all-reduce was named 23 s into it, not 5."""
        comm = wait["comm"]
        for i in wait.get("instances", ()):
            missing = i.get("missing") or ()
            length = end_ns - int(i.get("since_ns", end_ns))
            busy = js.busy_missing.get((comm, int(i["seq"])))
            if (missing and not busy and not i.get("p2p") and len(missing) <= len(i.get("entered") or ())
                    and length >= HOLD_LEARN * js.root_threshold_ns):
                self._held_once(js, tuple(sorted(missing)), length)

    def _hold_over(self, js: JobState) -> None:
        """A known hold no longer holds the job (its roots progress or nobody waits on them):
        it ended by itself, and its length is remembered."""
        if js.holding is not None:
            key, length = js.holding
            js.holding = None
            self._held_once(js, key, length)

    @staticmethod
    def _inside_unjudged(js: JobState, current: dict, stale: set[str]) -> set[int]:
        """Ranks inside a call whose wait is not judged yet (its comm never completed a call:
        a first wait may be a long first iteration): they wait there, they are not silent.
        Generator D's hang at the first iteration: a TP group's three members inside all-reduce
        #0, the fourth never in it, the next stage waiting on all four in its recvs: the P0
        named the four."""
        return {r for c, w in js.waits.items() if c not in current and c not in stale
                for i in w["instances"] for r in i["entered"]}

    def _died_with(self, js: JobState, now_ns: int, roots: list, skip: set[int], thr: float,
                   waits_since_ns: int) -> list[tuple]:
        """The ranks of a silent root's node that fell silent with it (within `thr` of it),
        silent for the threshold as it is, inside no call: a node's processes die together
        (its agent heartbeating on), and nobody waits on some of them yet when the hang is
        named. Generator A's node of eight processes crashing, drawn with SEED 13: the P0
        named seven, the eighth (its pipeline partner on the same node, its data-parallel
        peers not yet at their next reduction) joined a second later. A victim is inside the
        call it waits in, or still progresses: neither is named. Nor is a rank that still
        progressed `OUTLIVED_PERIODS` heartbeat periods after the first wait on the roots
        began (`waits_since_ns`): it outlived the fault and went idle (the thirteenth
        generator's RL job, drawn with 1: a rollout engine on the hung rank's node finished
        its generation 2.1 s after the hung rank's TP peers began waiting on it, and sat idle
        for the weight sync that never came; the P0 was updated to name its four ranks)."""
        named = {x[0] for x in roots}
        outlived = waits_since_ns + OUTLIVED_PERIODS * self.settings.heartbeat_period_s * 1e9
        out = []
        for r, reason, *_ in list(roots):
            node = js.node_of.get(r)
            if reason != "silent" or node is None:
                continue
            since = self.silent_since(js, r, now_ns)
            for q in sorted(js.node_ranks.get(node, ())):
                if q in named or q in skip:
                    continue
                quiet = self.silent_since(js, q, now_ns)
                if quiet and now_ns - quiet >= thr and abs(quiet - since) <= thr and quiet <= outlived:
                    named.add(q)
                    out.append((q, "silent", "", -1, "", False))
        return out

    def _torn_down(self, js: JobState, now_ns: int, roots: list, comm_roots: list) -> tuple[list, list]:
        """While a hang is open its victims may be torn down (a watchdog aborts them): their
        processes exit, the probe gives up on the calls of those left (COMPLETION_LOST), and the
        waits change shape: a rank waiting on an exited one since the hang began seems a root,
        and a call blocked since then, its peer's side given up on, every member entered (a
        transport hang). So while it is open a root is one of its culprits, or a rank that fell
        silent before it began and did not exit; and calls blocked since it began are its
        symptoms. The third generator's watchdog abort, 40 s after a hang: the P0 was updated
        to name two victims with the root, and a second P0 opened (a comm_hang). A rank never
        seen waiting on a root while it is open is no victim: a second root, however soon after
        the onset it fell silent (generator E's two ranks that stop at once, drawn with SEED 5:
        rank 9's silence began a few milliseconds after rank 50's wait, which dates the hang,
        and its TP peers' wait reached the threshold 0.25 s later; 9 was never named)."""
        held = js.book.open.get(("hang",))
        if held is None:
            return roots, comm_roots
        onset = held.evidence.get("onset_ns", held.opened_ns)
        roots = [x for x in roots if x[0] in held.culprit_ranks
                 or (x[1] != "exited" and (self.silent_since(js, x[0], now_ns) < onset
                                           or self._never_waited(js, x[0])))]
        return roots, [x for x in comm_roots if x.since_ns < onset]

    @staticmethod
    def _never_waited(js: JobState, rank: int) -> bool:
        """Whether `rank` was never seen waiting on a root while the open hang lasted."""
        return rank not in js.hang_waiters

    def _assert_hang(self, js: JobState, now_ns: int, at: int, an: waits.Analysis, roots: list, waited: int,
                     thr: float, out: list) -> None:
        ranks = sorted(r for r, *_ in roots)
        stuck = self._stuck(js, at)
        detail = []
        for r, reason, comm, seq, op, p2p in roots[:16]:
            d = {"rank": r, "reason": reason, "comm": comm, "seq": seq, "op": op, "p2p": p2p, "node": js.node_of.get(r)}
            if reason == "completion_stuck":
                d["completed"], d["peers_completed"] = stuck[r][0], stuck[r][1]
            detail.append(d)
        first = next((d for d in detail if d["op"]), detail[0])
        held = js.book.open.get(("hang",))
        if not first["op"] and held is not None and held.evidence.get("op"):
            # no root in a call any more (its peers' calls given up on, a watchdog's abort):
            # the call it never entered is the one said when the hang opened
            first = {**first, "comm": held.comm, "seq": held.evidence["seq"], "op": held.evidence["op"],
                     "p2p": held.evidence.get("roots", [{}])[0].get("p2p", False)}
        who = ", ".join(map(str, ranks[:8])) + ("..." if len(ranks) > 8 else "")
        s = "s" if len(ranks) > 1 else ""
        if first["reason"] == "exited":
            what = f"rank{s} {who} exited; peers wait in {first['op']} #{first['seq']} on comm {first['comm'][:4]}.."
        elif first["reason"] == "completion_stuck":
            what = (f"rank{s} {who}: completions stopped at #{first['completed']} while peers completed "
                    f"#{first['peers_completed']} (GPU or driver fault suspected); never entered {first['op']} "
                    f"#{first['seq']} on comm {first['comm'][:4]}..")
        elif first["reason"] == "not_started":
            what = (f"rank{s} {who}: GPU never started {first['op']} #{first['seq']} on comm {first['comm'][:4]}.. "
                    f"(enqueued by the host; peers wait in it on their GPUs: a kernel before it holds the GPU)")
        elif first["reason"] == "stopped_inside":
            what = (f"rank{s} {who}: inside {first['op']} #{first['seq']} on comm {first['comm'][:4]}.., none of "
                    f"{'their' if s else 'its'} transfers completes, the peers on both sides wait on "
                    f"{'them' if s else 'it'} (a GPU stopped inside the call?)")
        elif first["reason"] == "progressing":
            what = (f"rank{s} {who} never entered {first['op']} #{first['seq']} on comm {first['comm'][:4]}.. "
                    f"while progressing in {'their' if s else 'its'} other comms (the thread that posts "
                    f"{'their' if s else 'its'} transfers stuck?)")
        else:
            what = f"rank{s} {who} never entered {first['op']} #{first['seq']} on comm {first['comm'][:4]}.."
        own = an.own.get(first["rank"]) if an.deadlock else None
        if own is not None:  # a deadlock: the root is in a call of its own, which its waiters are not in
            what = (f"rank{s} {who} wait{'' if s else 's'} in {own[2]} #{own[1]} on comm {own[0][:4]}.. while the "
                    f"ranks waiting on {'them' if s else 'it'} wait in {first['op']} #{first['seq']} on comm "
                    f"{first['comm'][:4]}..: their call order differs (a deadlock)")
        blocked = sorted({x.comm for x in an.blocked})
        # the hang began when it began: an open one's onset never moves later. Its victims torn
        # down (a watchdog's abort) reshape the waits, and the oldest left may be younger: its
        # onset moved 0.4 s later, past a victim's silence, and `_torn_down` kept that victim
        # as a rank silent before the hang began (generator C's abort drawn with 34000: the P0
        # updated to name 25 with 26)
        onset = int(an.oldest_since_ns)
        if held is not None and held.evidence.get("onset_ns"):
            onset = min(onset, int(held.evidence["onset_ns"]))
        out.extend(js.book.assert_(
            ("hang",), now_ns, kind="hang", severity="P0", culprit_ranks=ranks, culprit_nodes=self.nodes_of(js, ranks),
            comm=first["comm"],
            summary=f"{what}; {len(an.waiting)} ranks waiting {waited / 1e9:.1f} s",
            evidence={"roots": detail, "seq": first["seq"], "op": first["op"], "waiting_ranks": len(an.waiting),
                      "waited_s": round(waited / 1e9, 1), "threshold_s": round(thr / 1e9, 2),
                      "blocked_comms": blocked[:32], "blocked_instances": len(an.blocked), "deadlock": an.deadlock,
                      "onset_ns": onset},
            id_hint=f"{first['comm']}-{'p2p' if first['p2p'] else ''}{first['seq']}"))

    def _stalled(self, js: JobState, now_ns: int, out: list) -> None:
        if js.waits or not js.comms or not js.node_seen:
            return
        if now_ns - max(js.node_seen.values()) > self._node_limit(js):
            return  # nobody reports: the job ended or the pipeline lost it, not a stall
        last = max(c["last_ns"] for c in js.comms.values())
        if last <= 0:
            return
        if js.stalling is not None and last > js.stalling:
            # progress again: the stall ended by itself (a checkpoint every rank wrote)
            js.stalls = (js.stalls + [last - js.stalling])[-HOLD_KEEP:]
            js.stalling = None
        need = max(self.settings.stall_floor_s * 1e9, self.settings.stall_step_factor * self.median_step_ns(js))
        idle = now_ns - last
        if idle >= need:
            js.stalling = last
        # a stall like those that ended by themselves is a routine (a distributed checkpoint
        # every 15 minutes: the twelfth generator's jobs had a P2 at each); one that lasts
        # past twice the longest seen is not
        if idle >= max(need, HOLD_FACTOR * max(js.stalls, default=0.0)):
            out.extend(js.book.assert_(
                ("job_stalled",), now_ns, kind="job_stalled", severity="P2", culprit_ranks=[], culprit_nodes=[],
                comm="", summary=f"no rank inside a call and no progress for {idle / 1e9:.0f} s",
                evidence={"idle_s": round(idle / 1e9, 1), "limit_s": round(need / 1e9, 1), "onset_ns": int(last)},
                id_hint=f"{now_ns}"))


def _since(an: waits.Analysis, comm: str, seq: int) -> int:
    """Since when the blocked instance (`comm`, `seq`) has been waited in (now when unknown)."""
    return min((x.since_ns for x in an.blocked if x.comm == comm and x.seq == seq), default=2**63 - 1)
