"""Per-job event time: each job's "now" comes from its own messages.

Clocks of different jobs (and of a job's nodes) disagree; detectors that act on elapsed
time must never compare one job's event times with another's. `JobClocks` keeps, per job,
the newest event time seen (`stamp`) and the reference time at which it was seen (`ref`:
the worker's wall clock live, the capture's clock in replay). A job's now is its newest
stamp plus the reference time elapsed since, so a job that goes silent still ages, and a
job whose clock runs 60 s fast is judged on its own clock only.

Bounded against the reference: a single stamp that jumps more than `MAX_JUMP_NS` ahead of
the job's now is held back until `JUMP_CONFIRM` consecutive messages agree (a node whose
clock was set forward), so one absurd timestamp cannot age a job's waits by hours.
While the worker is behind on a job's input (`extrapolate=False`), its now is its newest
stamp: catching up on old data, the data carries time. Its reference moves on with it, so
the time spent behind never counts later as the job's silence (a backlog read while held,
then judged, is judged at the time of its data).

>>> c = JobClocks()
>>> c.observe("a", 100, ref=10)
>>> c.observe("b", 5_000, ref=10)     # another job, its clock far ahead
>>> c.now("a", ref=15), c.now("b", ref=15)
(105, 5005)
>>> c.observe("a", 10**15, ref=16)    # one absurd stamp: held back
>>> c.now("a", ref=16)
106
"""

from __future__ import annotations

MAX_JUMP_NS = 120_000_000_000
JUMP_CONFIRM = 3


class _Clock:
    __slots__ = ("stamp", "ref", "jump", "jumps")

    def __init__(self, stamp: int, ref: int):
        self.stamp = stamp
        self.ref = ref
        self.jump = 0
        self.jumps = 0


class JobClocks:
    def __init__(self) -> None:
        self._c: dict[str, _Clock] = {}
        self.held_back = 0  # stamps refused as jumps (counted for the metrics)

    def observe(self, job: str, stamp: int, ref: int) -> None:
        c = self._c.get(job)
        if c is None:
            self._c[job] = _Clock(stamp, ref)
            return
        now = c.stamp + max(0, ref - c.ref)
        if stamp <= c.stamp:
            return
        if stamp - now > MAX_JUMP_NS:
            c.jumps = c.jumps + 1 if c.jump and abs(stamp - c.jump) <= MAX_JUMP_NS else 1
            c.jump = stamp
            if c.jumps < JUMP_CONFIRM:
                self.held_back += 1
                return
        c.jump = c.jumps = 0
        c.stamp, c.ref = stamp, ref

    def observe_many(self, job: str, stamps: list[int], ref: int) -> None:
        """`observe` of each stamp in order (one poll's messages of a job): the newest one
        alone when none of them is a jump (what the loop would conclude, at one step)."""
        c = self._c.get(job)
        top = max(stamps)
        if c is not None and top - (c.stamp + max(0, ref - c.ref)) <= MAX_JUMP_NS:
            self.observe(job, top, ref)
            return
        for stamp in stamps:
            self.observe(job, stamp, ref)

    def observed_now(self, job: str, stamp: int, ref: int) -> int:
        """`observe` then `now` (one call batch on replay's path: most stamps are no newer than
        the job's newest, and only its now is asked)."""
        c = self._c.get(job)
        if c is None or stamp > c.stamp:
            self.observe(job, stamp, ref)
            c = self._c[job]
        return c.stamp + (ref - c.ref if ref > c.ref else 0)

    def now(self, job: str, ref: int, extrapolate: bool = True) -> int:
        c = self._c.get(job)
        if c is None:
            return 0
        if not extrapolate:
            c.ref = max(c.ref, ref)  # the clock does not run while held, nor catch up after
            return c.stamp
        return c.stamp + max(0, ref - c.ref)

    def stamp(self, job: str) -> int:
        """The job's newest stamp taken (0 for a job not seen)."""
        c = self._c.get(job)
        return c.stamp if c is not None else 0

    def due_ref(self, job: str, at_ns: int) -> int | None:
        """The reference time from which the job's now (`now`) reaches `at_ns` (-1: it has
        already; None: a job not seen)."""
        c = self._c.get(job)
        if c is None:
            return None
        return c.ref + (at_ns - c.stamp) if at_ns > c.stamp else -1

    def forget(self, job: str) -> None:
        self._c.pop(job, None)

    def __contains__(self, job: str) -> bool:
        return job in self._c

    def jobs(self) -> list[str]:
        return list(self._c)
