"""Disaggregated serving: two prefill engines hand KV caches to two decode engines over
two-rank point-to-point comms between data-parallel replicas. Transfers come when requests
do: the intervals between them are a load, not compute; and a rank whose transfers stop while
it keeps serving is the root of the receivers' wait."""

import pytest

from commwatch.streams.detect import job_hangs, slow
from detect_jobs import MS, S, T0, HandJob

# prefill engines A and B, decode engines C and D, each TP 2; one KV comm per TP position
TP = {1: [0, 1], 2: [2, 3], 3: [4, 5], 4: [6, 7]}
KV = {10: [0, 4], 11: [1, 5], 12: [2, 6], 13: [3, 7]}
# prefill engines of one GPU (ranks 0 and 1) handing on to decode engines of TP 2
TP1 = {3: [2, 3], 4: [4, 5]}
KV1 = {10: [0, 2], 11: [0, 3], 12: [1, 4], 13: [1, 5]}


def _serve(settings, seconds: int, every: tuple[int, int], stuck: tuple[int, int] | None = None,
           one_gpu_prefill: bool = False, long_prompts: bool = False, slow_link_from: int | None = None) -> HandJob:
    """Every engine runs a forward (one TP all-reduce) every 50 ms; prefill A hands a request's
    KV cache on every `every[0]` forwards, prefill B every `every[1]`: the decode rank posts its
    receive when the request comes (200 ms before), the send follows the prefill forward.
    `stuck`: (comm, from s) where the sender never posts again, its engine serving on.
    `long_prompts`: from 20 s to 30 s and from 50 s to 60 s of each minute the caches are 16 MiB
    (1 MiB otherwise) and take 12 ms to send instead of 3. `slow_link_from`: from this second on,
    every transfer takes 3x as long."""
    tp, kv = (TP1, KV1) if one_gpu_prefill else (TP, KV)
    engines = [[0], [1], *tp.values()] if one_gpu_prefill else list(tp.values())
    coords = {r: {"tp": i, "pp": 0, "dp": e} for e, ranks in enumerate(engines) for i, r in enumerate(ranks)}
    job = HandJob(settings, {**tp, **kv}, {r: f"n{r // 4}" for r in coords}, job="serve")
    job.place(coords)
    seq = {c: 0 for c in (*tp, *kv)}
    blocked: set[int] = set()
    for k in range(1, seconds * 20):
        t = T0 + k * 50 * MS
        for c, ranks in tp.items():
            job.collective(c, seq[c], {r: t for r in ranks}, t + 2 * MS)
            seq[c] += 1
        for c, (src, dst) in kv.items():
            if c in blocked or k % every[coords[src]["dp"]]:
                continue
            if stuck is not None and c == stuck[0] and t >= T0 + stuck[1] * S:
                job.transfer(c, seq[c], src, dst, None, t - 200 * MS, None)  # never sent: its receiver waits
                blocked.add(c)
                continue
            big = long_prompts and (t - T0) // S % 30 >= 20
            worse = slow_link_from is not None and t >= T0 + slow_link_from * S
            took = (12 if big else 3) * MS * (3 if worse else 1)
            job.transfer(c, seq[c], src, dst, t + 3 * MS, t - 200 * MS, t + 3 * MS + took, (16 if big else 1) << 20)
            seq[c] += 1
        if k % 20 == 0:
            job.beat(t + 10 * MS)
    return job


@pytest.mark.parametrize("drill", [False, True])
def test_a_less_loaded_prefill_engine_is_not_slow(settings, monkeypatch, drill):
    """Prefill engines of one GPU each: B hands on a KV cache every 450 ms, A every 300 ms (fewer
    requests routed to B). Nobody is slow. Drill: B's rank, judged by the intervals between its
    transfers against A's, is named."""
    if drill:
        monkeypatch.setattr(slow, "BETWEEN_REPLICAS", False)
    job = _serve(settings, 60, (6, 9), one_gpu_prefill=True)
    named = {r for i in job.incidents if i["kind"] == "slow_rank" for r in i["culprit_ranks"]}
    assert named == ({1} if drill else set()), named


@pytest.mark.parametrize("drill", [False, True])
def test_a_sender_that_stops_posting_while_it_serves_is_the_root_of_its_receivers_wait(settings, monkeypatch,
                                                                                        drill):
    """From 20 s, prefill A's rank 0 never posts its send on its KV comm (its sender thread
    stuck) while it runs its forwards with its TP peer; decode rank 4 waits in the receive.
    One P0 names 0. Drill: rank 0 progresses elsewhere, so nothing is raised."""
    if drill:
        monkeypatch.setattr(job_hangs, "PROGRESSING_P2P_ROOT", False)
    job = _serve(settings, 90, (6, 6), stuck=(10, 20))
    hangs = [i for i in job.incidents if i["kind"] == "hang" and i["status"] == "open"]
    if drill:
        assert hangs == []
    else:
        assert len(hangs) == 1 and hangs[0]["culprit_ranks"] == [0], hangs
        assert hangs[0]["evidence"]["roots"][0]["reason"] == "progressing"


@pytest.mark.parametrize("drill", [False, True])
def test_ranks_inside_sends_to_each_other_while_they_run_on_are_no_progressing_roots(settings, monkeypatch, drill):
    """Two ranks of a TP pair, each inside a send to the other on a second comm from 20 s, run
    their TP calls on (as the eighth generator's healthy 2048-rank job showed two ranks in the
    first send of one comm): a root progressing elsewhere must not be inside a blocked call of
    its own. Nothing is raised. Drill: without that condition, a P0 'deadlock' names them."""
    if drill:
        monkeypatch.setattr(job_hangs.HangRules, "_progressing_root",
                            lambda self, js, rank, an, comm, since, at, thr, root_thr:
                            at - since >= thr and self.silent_since(js, rank, at) - since >= root_thr)
    job = HandJob(settings, {1: [0, 1], 10: [0, 1]}, {0: "n0", 1: "n0"}, job="pair")
    for k in range(1, 90 * 20):
        t = T0 + k * 50 * MS
        job.collective(1, k - 1, {0: t, 1: t}, t + 2 * MS)
        if k == 20 * 20:
            job.transfer(10, 0, 0, 1, t, None, None)
            job.transfer(10, 0, 1, 0, t, None, None)
        if k % 20 == 0:
            job.beat(t + 10 * MS)
    hangs = [i for i in job.incidents if i["kind"] == "hang"]
    assert bool(hangs) == drill, hangs


@pytest.mark.parametrize("drill", [False, True])
def test_long_prompts_kv_caches_are_no_slow_link(settings, monkeypatch, drill):
    """KV caches of long prompts (16 MiB, 12 ms) come in bursts between those of short ones
    (1 MiB, 3 ms) on the KV comms across the two nodes: a transfer is judged against its size,
    nothing is raised. Drill: judged against the channel's normal time alone, the bursts are a
    slow link between the nodes."""
    if drill:
        monkeypatch.setattr(slow, "SIZED_LINKS", False)
    job = _serve(settings, 90, (6, 6), long_prompts=True)
    links = [i for i in job.incidents if i["kind"] == "slow_link"]
    assert bool(links) == drill, links


def test_a_link_slow_for_every_size_is_still_found(settings):
    """The same traffic over a link 3x slower from 65 s on: a slow link between the two nodes."""
    job = _serve(settings, 90, (6, 6), long_prompts=True, slow_link_from=65)
    links = [i for i in job.incidents if i["kind"] == "slow_link"]
    assert links and links[0]["opened_ns"] >= T0 + 65 * S, links
    assert set(links[0]["culprit_nodes"]) <= {"n0", "n1"}, links
