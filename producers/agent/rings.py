"""Finding, opening and removing the rings of the local ranks, safely.

Layout under the ring dir: `<job>/<stem>.ring` (call records, written by the NCCL probe
or the hook), `<job>/<stem>.steps` (the hook's iteration records) and
`<job>/<stem>.meta.json` (the hook's rank placement). `<stem>` is `<rank>`, or
`<rank>.<pid>` when a second live writer of the same rank came along, or `pid-<pid>`
when the probe did not know its rank (the header says it, else -1).

Which files the agent reads (`agent_ring_uids`): regular files inside its configured
directory, never through a symlink, and, unless the setting is `any`, owned by one of
the listed uids (file owner and the uid in the header). `any` is the default because
training containers usually run as root while the agent does not; its price is that
anyone who can create files in the ring directory can feed records to the pipeline, so
keep that directory writable only by training pods (see docs/deploy.md).

A ring's writer is alive while it holds the flock on its file (commwatch/ring.py). Once
the agent can take that lock the writer is gone; the agent then reads what is left,
and at the end of the rank's exit removes its files (through a descriptor of the job
directory, checking that the ring's name still points at the file it holds).
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from commwatch import ring as ringfmt
from commwatch.producers.agent import metrics

log = logging.getLogger(__name__)

NAME = re.compile(r"^(?:(?P<rank>\d+)(?:\.(?P<pid>\d+))?|pid-(?P<anon>\d+))\.ring$")


def _readable(path: Path, root: Path, uids: frozenset[int] | None) -> str | None:
    """None when `path` may be read, else why not."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "gone"
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if uids is not None and st.st_uid not in uids:
        return f"owned by uid {st.st_uid}, not one of {sorted(uids)}"
    if not path.resolve().is_relative_to(root):
        return "outside the ring dir"
    return None


@dataclass
class RankSource:
    """The files of one local rank."""

    job: str
    rank: int
    calls: ringfmt.RingReader
    steps: ringfmt.RingReader | None = None
    meta: dict | None = None
    meta_mtime_ns: int = 0
    vanished: bool = False  # the writer removed its files (it finalised)
    exited: bool = False  # the writer is gone; the exit is being reported
    exit_beats: int = 0  # heartbeats sent with `exited` so far

    @property
    def pid(self) -> int:
        return self.calls.pid

    @property
    def key(self) -> tuple[int, int]:
        return (self.calls.stat.st_dev, self.calls.stat.st_ino)

    def companion(self, suffix: str) -> Path:
        return ringfmt.companion(self.calls.path, suffix)

    def writer_alive(self) -> bool:
        """False once the writer released its lock (then this agent holds it)."""
        return not self.vanished and not self.calls.writer_gone()

    def close(self) -> None:
        """Unmap; releases the writer's lock if the agent took it."""
        self.calls.close()
        if self.steps is not None:
            self.steps.close()


class RingDir:
    """Discovers rank files under `root` and keeps them open."""

    def __init__(self, root: str | Path, uids: frozenset[int] | None = None):
        self.root = Path(root)
        self.uids = uids  # None: any uid
        self.sources: dict[tuple[int, int], RankSource] = {}  # (dev, inode) of the ring -> source
        self.refused: dict[Path, str] = {}

    def _refuse(self, path: Path, why: str) -> None:
        if self.refused.get(path) != why:
            log.warning("refusing %s: %s", path, why)
            metrics.RINGS_REFUSED.inc()
        self.refused[path] = why

    def scan(self) -> tuple[list[RankSource], list[RankSource]]:
        """Open new rings; returns (added, vanished): the sources whose file is no longer
        in the directory stay in `sources` until the agent drops them."""
        added: list[RankSource] = []
        seen: set[tuple[int, int]] = set()
        if self.root.is_dir():
            root = self.root.resolve()
            for job_dir in sorted(self.root.iterdir()):
                if job_dir.is_symlink() or not job_dir.is_dir():
                    if job_dir.is_symlink():
                        self._refuse(job_dir, "symlink")
                    continue
                for path in job_dir.glob("*.ring"):
                    try:
                        st = os.lstat(path)
                    except FileNotFoundError:
                        continue
                    key = (st.st_dev, st.st_ino)
                    seen.add(key)
                    if key in self.sources:
                        continue
                    why = _readable(path, root, self.uids)
                    if why == "gone":
                        continue
                    if why:
                        self._refuse(path, why)
                        continue
                    src = self._open(job_dir.name, path, root)
                    if src is not None and src.key == key:
                        self.sources[key] = src
                        self.refused.pop(path, None)
                        added.append(src)
                    elif src is not None:  # replaced between the stat and the open: next scan
                        src.close()
        vanished = []
        for key, src in self.sources.items():
            if key not in seen and not src.vanished:
                src.vanished = True
                vanished.append(src)
        return added, vanished

    def _open(self, job: str, path: Path, root: Path) -> RankSource | None:
        m = NAME.match(path.name)
        if m is None:
            self._refuse(path, "name is not <rank>.ring, <rank>.<pid>.ring or pid-<pid>.ring")
            return None
        try:
            calls = ringfmt.RingReader(path)
        except ringfmt.RingError as exc:
            if exc.reason != "bad_magic":  # bad_magic: still being created; retried next scan
                self._refuse(path, str(exc))
            return None
        if self.uids is not None and calls.uid not in self.uids:
            calls.close()
            self._refuse(path, f"header says writer uid {calls.uid}, not one of {sorted(self.uids)}")
            return None
        if calls.job and calls.job != job:
            log.warning("%s: header job %r differs from its directory; using %r", path, calls.job, job)
        rank = int(m["rank"]) if m["rank"] is not None else calls.rank
        src = RankSource(job, rank, calls)
        self.open_steps(src)
        self.read_meta(src)
        log.info("tailing %s (job %s rank %d pid %d)", path, job, rank, calls.pid)
        return src

    def open_steps(self, src: RankSource) -> None:
        """Open `<stem>.steps` if it exists (the hook creates it just after the ring)."""
        if src.steps is not None or src.vanished:
            return
        path = src.companion("steps")
        if _readable(path, self.root.resolve(), self.uids) is None:
            try:
                src.steps = ringfmt.RingReader(path, ringfmt.STEP_MAGIC, ringfmt.STEP_DTYPE)
            except ringfmt.RingError as exc:
                if exc.reason != "bad_magic":
                    log.warning("ignoring %s: %s", path, exc)

    def read_meta(self, src: RankSource) -> bool:
        """Reload `<stem>.meta.json` when it changed; True when it did."""
        path = src.companion("meta.json")
        if src.vanished or _readable(path, self.root.resolve(), self.uids) is not None:
            return False
        try:
            mtime = os.stat(path).st_mtime_ns
            if mtime == src.meta_mtime_ns:
                return False
            src.meta = json.loads(path.read_text())
            src.meta_mtime_ns = mtime
            return True
        except (OSError, ValueError) as exc:
            log.warning("unreadable %s: %s", path, exc)
            return False

    def drop(self, src: RankSource) -> None:
        """Forget a rank whose writer is gone: remove its files if they are still there and
        still the ones it held, then close (which releases the writer's lock)."""
        self.sources.pop(src.key, None)
        if not src.vanished and src.calls.locked:
            remove_files(src)
        src.close()


def remove_files(src: RankSource) -> None:
    ring = src.calls.path
    try:
        dfd = os.open(ring.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        log.warning("cannot open %s to remove the files of a gone writer: %s", ring.parent, exc)
        return
    try:
        try:
            here = os.stat(ring.name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not ringfmt.same_file(here, src.calls.stat):
            return  # a new writer took the name: its files stay
        for name in (src.companion("steps").name, src.companion("meta.json").name, ring.name):
            try:
                os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("cannot remove %s/%s: %s", ring.parent, name, exc)
        metrics.RINGS_REMOVED.inc()
    finally:
        os.close(dfd)
