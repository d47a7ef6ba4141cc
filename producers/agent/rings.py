"""Finding and opening the rings of the local ranks, safely.

Layout under the ring dir: `<job>/<rank>.ring` (call records, written by the NCCL probe
or the hook), `<job>/<rank>.steps` (the hook's iteration records) and
`<job>/<rank>.meta.json` (the hook's rank placement). The agent reads only regular
files inside its configured directory (symlinks are refused, resolved paths must stay
inside it) that are owned by its own uid.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from commwatch import ring as ringfmt
from commwatch.producers.agent import metrics

log = logging.getLogger(__name__)


def _owned_regular(path: Path, root: Path, uid: int) -> str | None:
    """None when `path` may be read, else why not."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "gone"
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not {uid}"
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
    dead: bool = False

    @property
    def pid(self) -> int:
        return self.calls.pid

    def writer_alive(self) -> bool:
        try:
            os.kill(self.calls.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def close(self) -> None:
        self.calls.close()
        if self.steps is not None:
            self.steps.close()


class RingDir:
    """Discovers rank files under `root` and keeps them open."""

    def __init__(self, root: str | Path, uid: int | None = None):
        self.root = Path(root)
        self.uid = os.getuid() if uid is None else uid
        self.sources: dict[Path, RankSource] = {}
        self.refused: dict[Path, str] = {}

    def _refuse(self, path: Path, why: str) -> None:
        if self.refused.get(path) != why:
            log.warning("refusing %s: %s", path, why)
            metrics.RINGS_REFUSED.inc()
        self.refused[path] = why

    def scan(self) -> tuple[list[RankSource], list[RankSource]]:
        """Open new rings, notice removed ones; returns (added, removed)."""
        added: list[RankSource] = []
        seen: set[Path] = set()
        if not self.root.is_dir():
            return added, self._removed(seen)
        root = self.root.resolve()
        for job_dir in sorted(self.root.iterdir()):
            if job_dir.is_symlink() or not job_dir.is_dir():
                if job_dir.is_symlink():
                    self._refuse(job_dir, "symlink")
                continue
            for path in job_dir.glob("*.ring"):
                seen.add(path)
                if path in self.sources:
                    continue
                why = _owned_regular(path, root, self.uid)
                if why == "gone":
                    continue
                if why:
                    self._refuse(path, why)
                    continue
                src = self._open(job_dir.name, path, root)
                if src is not None:
                    self.sources[path] = src
                    self.refused.pop(path, None)
                    added.append(src)
        return added, self._removed(seen)

    def _removed(self, seen: set[Path]) -> list[RankSource]:
        gone = [p for p in self.sources if p not in seen]
        return [self.sources.pop(p) for p in gone]

    def _open(self, job: str, path: Path, root: Path) -> RankSource | None:
        try:
            rank = int(path.stem)
        except ValueError:
            self._refuse(path, "name is not <rank>.ring")
            return None
        try:
            calls = ringfmt.RingReader(path)
        except ringfmt.RingError as exc:
            if exc.reason != "bad_magic":  # bad_magic: still being created; retried next scan
                self._refuse(path, str(exc))
            return None
        if calls.uid != self.uid:
            calls.close()
            self._refuse(path, f"header says writer uid {calls.uid}, not {self.uid}")
            return None
        if calls.job and calls.job != job:
            log.warning("%s: header job %r differs from its directory; using %r", path, calls.job, job)
        src = RankSource(job, rank, calls)
        steps = path.with_suffix(".steps")
        if _owned_regular(steps, root, self.uid) is None:
            try:
                src.steps = ringfmt.RingReader(steps, ringfmt.STEP_MAGIC, ringfmt.STEP_DTYPE)
            except ringfmt.RingError as exc:
                log.warning("ignoring %s: %s", steps, exc)
        self.read_meta(src)
        log.info("tailing %s (job %s rank %d pid %d)", path, job, rank, calls.pid)
        return src

    def read_meta(self, src: RankSource) -> bool:
        """Reload `<rank>.meta.json` when it changed; True when it did."""
        path = self.root / src.job / f"{src.rank}.meta.json"
        if _owned_regular(path, self.root.resolve(), self.uid) is not None:
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
