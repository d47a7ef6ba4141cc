"""The per-rank shared-memory ring: file layout, a single-process writer, a tailing reader.

File `<ring_dir>/<job>/<rank>.ring` (`nccl-patch/include/commwatch_ring.h` declares the
same layout in C): a 256-byte little-endian header, then `capacity` 64-byte records.

| off | type | field |
|---|---|---|
| 0 | 8 bytes | magic `CWRING01` (`CWSTEP01` for the hook's step ring), written last at creation |
| 8 | u32 | version = 1 |
| 12 | u32 | record size = 64 |
| 16 | u64 | capacity (records, a power of two) |
| 24 | u64 | write_index: records ever reserved; slot = index & (capacity - 1) |
| 32 | u64 | dropped: records the writer could not write |
| 40 | i64 | heartbeat_ns: writer's CLOCK_REALTIME at its last event |
| 48 | i32 | pid of the writer |
| 52 | i32 | global rank (-1 unknown) |
| 56 | u32 | uid of the writer |
| 60 | u32 | closed: 1 once the writer finalised (everything is published) |
| 64 | 64 bytes | job id, NUL-padded |
| 128 | u64 | commit_index: every record below it is published |

Publishing a record: reserve an index, store byte 0 (`kind`) = 0, write the other 63
bytes, then store the real kind and move `commit_index` past it. A reader treats kind 0
as "not yet published". When full, writers overwrite the oldest records; a reader that
falls more than `capacity` behind skips ahead and counts what it lost.

Lifecycle (the NCCL probe follows the same protocol):

- The writer holds an exclusive `flock` on its ring file from creation until it
  finalises. It takes a name only from nobody alive: `<rank>.ring` when no file is there
  or the file there is not locked (its writer is gone; the writer replaces it while
  holding that file's lock), else `<rank>.<pid>.ring`. Companion files (`.steps`,
  `.meta.json`) share the ring's stem.
- At finalisation (atexit, `hook.uninstall()`) the writer unlinks its files (ring, steps,
  meta) and then releases the lock. A killed process cannot unlink; the kernel releases
  its lock. A child forked by the writer (a data-loader worker) drops its inherited
  descriptor and mapping at once (either would keep the lock of a dead writer held).
- A reader learns that the writer is gone when it can take the lock itself
  (`flock(fd, LOCK_EX | LOCK_NB)` on its own descriptor; EWOULDBLOCK = alive). This works
  across PID namespaces, unlike `kill(pid, 0)`. While it holds that lock no new writer
  takes the name, so it may read what was left and remove the files, after checking
  that the name still points at the file it holds.

>>> import tempfile, os
>>> d = tempfile.mkdtemp()
>>> w = RingWriter(os.path.join(d, "0.ring"), rank=0, job="j", capacity=8)
>>> w.write(1, 1, 0, 0xAB, 0, 10, 0, 4, 0, -1, 2, 0)
>>> r = RingReader(os.path.join(d, "0.ring"))
>>> recs, lost = r.poll()
>>> int(recs["comm"][0]), lost
(171, 0)
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import struct
import threading
import time
import weakref
from pathlib import Path

import numpy as np

from commwatch.wire import RECORD_DTYPE, RECORD_SIZE

MAGIC = b"CWRING01"
STEP_MAGIC = b"CWSTEP01"
VERSION = 1
HEADER_SIZE = 256
JOB_ID_LEN = 64
DEFAULT_CAPACITY = 1 << 16  # 4 MiB of records per rank
STEP_CAPACITY = 1 << 10

OFF_MAGIC = 0
OFF_VERSION = 8
OFF_RECORD_SIZE = 12
OFF_CAPACITY = 16
OFF_WRITE_INDEX = 24
OFF_DROPPED = 32
OFF_HEARTBEAT = 40
OFF_PID = 48
OFF_RANK = 52
OFF_UID = 56
OFF_CLOSED = 60
OFF_JOB = 64
OFF_COMMIT = 128

_HEAD = struct.Struct("<8sIIQQQqiiII64sQ")  # the fixed fields, offsets 0..135
assert _HEAD.size == 136
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
# A whole record in RECORD_DTYPE order, written with kind 0 (unpublished) first.
_RECORD = struct.Struct("<BBHiQQqqQiiII")
assert _RECORD.size == RECORD_SIZE

# The hook's step ring (`<rank>.steps`): same header (magic CWSTEP01), 64-byte records.
# Phases are NaN when not measured. Byte 0 is the publish byte (1 = STEP), as in call rings.
STEP_KIND = 1
STEP_DTYPE = np.dtype(
    [
        ("kind", "<u1"),
        ("pad0", "<u1"),
        ("pad1", "<u2"),
        ("rank", "<i4"),
        ("iteration", "<i8"),
        ("t_start_ns", "<i8"),
        ("t_end_ns", "<i8"),
        ("forward_ms", "<f8"),
        ("backward_ms", "<f8"),
        ("optimizer_ms", "<f8"),
        ("reserved", "<u8"),
    ]
)
assert STEP_DTYPE.itemsize == RECORD_SIZE
_STEP_BODY = struct.Struct("<BHiqqqdddQ")
assert _STEP_BODY.size == RECORD_SIZE - 1


class RingError(ValueError):
    """A file that is not a usable ring; `reason` is a short stable code."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def ring_path(ring_dir: str | Path, job: str, rank: int, suffix: str = "ring") -> Path:
    return Path(ring_dir) / job / f"{rank}.{suffix}"


class RingWriter:
    """The single writer of one ring file (the Python hook's side).

    Every call to `write` costs a few struct stores into the mapping, no syscall. The
    training thread and the hook's completion poller both write, so a record is written
    under a lock (uncontended almost always; held for a microsecond): indices are
    published in order and `commit_index` follows them exactly.
    """

    def __init__(self, path: str | Path, rank: int, job: str, capacity: int = DEFAULT_CAPACITY,
                 magic: bytes = MAGIC):
        if capacity <= 0 or capacity & (capacity - 1):
            raise RingError("bad_capacity", f"capacity {capacity} is not a power of two")
        path = Path(path)
        self.capacity = capacity
        self.mask = capacity - 1
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        size = HEADER_SIZE + capacity * RECORD_SIZE
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else holds it
            os.ftruncate(fd, size)
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            job_b = job.encode("utf-8")[: JOB_ID_LEN - 1]
            _HEAD.pack_into(self.mm, 0, b"\0" * 8, VERSION, RECORD_SIZE, capacity, 0, 0, time.time_ns(),
                            os.getpid(), rank, os.getuid(), 0, job_b, 0)
            self.mm[OFF_MAGIC:OFF_MAGIC + 8] = magic  # last: the file is now a ring
            self.path = claim(tmp, path)
        except BaseException:
            os.close(fd)
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass
            raise
        self.fd = fd  # kept open: holds the lock that says the writer is alive
        _WRITERS.add(self)
        self.rank = rank
        self.next_index = 0
        self.lock = threading.Lock()

    def write(self, kind: int, op: int, flags: int, comm: int, seq: int, t_start_ns: int, t_end_ns: int,
              nbytes: int, comm_rank: int, peer: int, nranks: int, aux: int, now_ns: int = 0) -> None:
        """Publish one call record (contract section 1) under this ring's rank."""
        mm = self.mm
        with self.lock:
            i = self.next_index
            self.next_index = i + 1
            off = HEADER_SIZE + ((i & self.mask) << 6)
            _RECORD.pack_into(mm, off, 0, op, flags, self.rank, comm, seq, t_start_ns, t_end_ns, nbytes,
                              comm_rank, peer, nranks, aux)
            _U64.pack_into(mm, OFF_WRITE_INDEX, i + 1)
            mm[off] = kind
            _U64.pack_into(mm, OFF_COMMIT, i + 1)
            _I64.pack_into(mm, OFF_HEARTBEAT, now_ns or t_end_ns or t_start_ns)

    def write_step(self, iteration: int, t_start_ns: int, t_end_ns: int, forward_ms: float = float("nan"),
                   backward_ms: float = float("nan"), optimizer_ms: float = float("nan")) -> None:
        """Publish one step record (a ring created with `STEP_MAGIC`)."""
        mm = self.mm
        with self.lock:
            i = self.next_index
            self.next_index = i + 1
            off = HEADER_SIZE + (i & self.mask) * RECORD_SIZE
            mm[off] = 0
            _U64.pack_into(mm, OFF_WRITE_INDEX, i + 1)
            _STEP_BODY.pack_into(mm, off + 1, 0, 0, self.rank, iteration, t_start_ns, t_end_ns,
                                 forward_ms, backward_ms, optimizer_ms, 0)
            mm[off] = STEP_KIND
            _U64.pack_into(mm, OFF_COMMIT, i + 1)
            _I64.pack_into(mm, OFF_HEARTBEAT, t_end_ns)

    def abandon(self) -> None:
        """In a forked child: let go of the parent's file without touching it (the mapping
        and the descriptor both hold the parent's lock)."""
        _release(self)

    def close(self, unlink: bool = False) -> None:
        """Unmap; with `unlink` (finalising), say `closed`, remove the file, and release the
        lock last."""
        if unlink:
            try:
                with self.lock:
                    _U32.pack_into(self.mm, OFF_CLOSED, 1)
                    _I64.pack_into(self.mm, OFF_HEARTBEAT, time.time_ns())
            except ValueError:  # already unmapped
                pass
        try:
            self.mm.close()
        except (BufferError, ValueError):
            pass
        if unlink:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


_WRITERS: "weakref.WeakSet[RingWriter]" = weakref.WeakSet()


def _release(ring: RingWriter | RingReader) -> None:
    """Unmap a ring and close its descriptor (a live view of the mapping keeps it mapped)."""
    try:
        ring.mm.close()
    except (BufferError, ValueError):
        pass
    if ring.fd >= 0:
        os.close(ring.fd)
        ring.fd = -1


def _abandon_in_child() -> None:
    for w in list(_WRITERS):
        w.abandon()
    _WRITERS.clear()


os.register_at_fork(after_in_child=_abandon_in_child)


def companion(ring: str | Path, suffix: str) -> Path:
    """`<stem>.<suffix>` next to ring `<stem>.ring` (steps, meta.json)."""
    ring = Path(ring)
    return ring.with_name(ring.name[: -len(".ring")] + "." + suffix if ring.name.endswith(".ring") else
                          ring.name + "." + suffix)


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def claim(tmp: Path, path: Path, tries: int = 3) -> Path:
    """Move the new file `tmp` (whose lock the caller holds) to `path`, or to
    `<stem>.<pid><suffix>` when a live writer (or a reader finishing a dead one) holds
    `path`. Returns the name taken."""
    for _ in range(tries):
        try:
            old = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            try:
                os.link(tmp, path)  # fails if a file appeared meanwhile: never replaces one
            except FileExistsError:
                continue
            except OSError as exc:  # a filesystem without hard links
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP):
                    raise
                os.replace(tmp, path)
                return path
            os.unlink(tmp)
            return path
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            os.replace(tmp, path)  # a symlink is nobody's ring: replace the link itself
            return path
        try:
            try:
                fcntl.flock(old, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                break  # alive: take another name
            try:
                here = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if same_file(here, os.fstat(old)):
                os.replace(tmp, path)  # under the old file's lock: nobody else replaces it meanwhile
                return path
        finally:
            os.close(old)
    alt = path.with_name(f"{path.name[: -len(path.suffix)] if path.suffix else path.name}.{os.getpid()}{path.suffix}")
    os.replace(tmp, alt)
    return alt


class RingReader:
    """Tails one ring: returns the records published since the last poll, in order.

    Handles wrap-around, writers that lap the reader (skips ahead, counts lost records),
    records reserved but not yet published (waits for them, gives up after `stuck_s`),
    and records overwritten while being copied (discarded, counted lost).
    """

    def __init__(self, path: str | Path, magic: bytes = MAGIC, dtype: np.dtype = RECORD_DTYPE,
                 stuck_s: float = 1.0, from_start: bool = True):
        self.path = Path(path)
        fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if st.st_size < HEADER_SIZE:
                raise RingError("truncated", f"{self.path}: {st.st_size} bytes, shorter than the header")
            self.mm = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED, mmap.PROT_READ)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd  # kept open for the liveness lock (`writer_gone`)
        self.stat = st
        self.locked = False
        self.st_uid = st.st_uid
        (got_magic, version, rsize, capacity, _w, _d, _hb, self.pid, self.rank, self.uid, _r,
         job, _c) = _HEAD.unpack_from(self.mm, 0)
        bad = None
        if got_magic != magic:
            bad = RingError("bad_magic", f"{self.path}: magic {got_magic!r} is not {magic!r}")
        elif version != VERSION or rsize != RECORD_SIZE:
            bad = RingError("bad_version", f"{self.path}: version {version}, record size {rsize}")
        elif capacity <= 0 or capacity & (capacity - 1) or HEADER_SIZE + capacity * RECORD_SIZE > st.st_size:
            bad = RingError("bad_capacity", f"{self.path}: capacity {capacity} does not fit the file")
        if bad is not None:
            self.mm.close()
            os.close(fd)
            raise bad
        self.capacity = capacity
        self.mask = capacity - 1
        self.job = job.rstrip(b"\0").decode("utf-8", "replace")
        self.dtype = dtype
        self.header = np.frombuffer(self.mm, dtype="<u8", count=HEADER_SIZE // 8)
        self.header32 = np.frombuffer(self.mm, dtype="<i4", count=HEADER_SIZE // 4)
        self.slots = np.frombuffer(self.mm, dtype=dtype, count=capacity, offset=HEADER_SIZE)
        self.stuck_ns = int(stuck_s * 1e9)
        self.read_index = 0 if from_start else self.write_index
        self.lost = 0
        self._stuck_since = 0  # monotonic ns at which read_index was first seen unpublished

    @property
    def write_index(self) -> int:
        return int(self.header[OFF_WRITE_INDEX // 8])

    @property
    def closed(self) -> bool:
        """The writer finalised: everything it wrote is published."""
        return bool(self.header32[OFF_CLOSED // 4])

    def writer_gone(self) -> bool:
        """True once the writer released its lock (it finalised or died); from then on
        this reader holds the lock, so no new writer takes the file, until `close()`."""
        if self.locked:
            return True
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.locked = True
        return True

    @property
    def dropped(self) -> int:
        return int(self.header[OFF_DROPPED // 8])

    @property
    def heartbeat_ns(self) -> int:
        return int(self.header[OFF_HEARTBEAT // 8].view("<i8"))

    def poll(self, limit: int | None = None) -> tuple[np.ndarray, int]:
        """(records published since the last poll, records lost since the last poll)."""
        lost = 0
        w = self.write_index
        r = self.read_index
        if w - r > self.capacity:
            lost += w - r - self.capacity
            r = w - self.capacity
        if limit is not None:
            w = min(w, r + limit)
        n = w - r
        if n <= 0:
            self.read_index = r
            self.lost += lost
            return self.slots[:0].copy(), lost
        start = r & self.mask
        end = start + n
        if end <= self.capacity:
            recs = self.slots[start:end].copy()
        else:
            recs = np.concatenate((self.slots[start:], self.slots[: end - self.capacity]))
        # Records the writer may have overwritten while we copied them are not trustworthy.
        w_after = self.write_index
        overrun = w_after - self.capacity - r
        if overrun > 0:
            cut = min(overrun, n)
            lost += cut
            recs = recs[cut:]
            r += cut
        unpublished = np.flatnonzero(recs["kind"] == 0)
        if len(unpublished):
            first = int(unpublished[0])
            now = time.monotonic_ns()
            if first == 0:
                if not self._stuck_since:
                    self._stuck_since = now
                if now - self._stuck_since > self.stuck_ns:  # the writer died mid-record
                    self._stuck_since = 0
                    self.read_index = r + 1
                    self.lost += lost + 1
                    more, more_lost = self.poll(limit)
                    return more, lost + 1 + more_lost
            else:
                self._stuck_since = 0
            recs = recs[:first]
        else:
            self._stuck_since = 0
        self.read_index = r + len(recs)
        self.lost += lost
        return recs, lost

    def close(self) -> None:
        """Unmap and close (which releases the lock if this reader took it)."""
        del self.header, self.header32, self.slots
        _release(self)
