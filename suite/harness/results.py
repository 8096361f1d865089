"""Result records: one JSON object per measured point, appended and flushed at once.

Long format, read with ``pandas.read_json(path, lines=True)``. Per-rank per-iteration raw
times go to a side file next to it (``<out>.raw.jsonl``), one line per point, linked by
``run_id``, ``launch_id`` and ``point``. ``--resume`` skips points whose
:func:`commbench.analysis.records.point_key` is already in
the file.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import platform
import stat
import subprocess
import tempfile
from pathlib import Path

ENV_PREFIXES = ("NCCL_", "FI_", "NVSHMEM_", "MPICH_", "OMPI_", "UCX_", "HSA_", "RCCL_", "SLURM_JOB")


_LAUNCHES = itertools.count()


def new_launch_id() -> str:
    """A timestamp and the process id (and, from a process's second launch on, its
    count): one launch's own. A job or a sweep gives all its launches one ``run_id``;
    ``launch_id`` tells their records apart, and links each to its raw and timeline
    lines."""
    n = next(_LAUNCHES)
    own = _dt.datetime.now().strftime("%Y%m%dT%H%M%S") + f"-{os.getpid():x}"
    return f"{own}.{n}" if n else own


def new_run_id(launch_id: str | None = None) -> str:
    """``COMMBENCH_RUN_ID`` if the job set it, else ``launch_id`` (a new one if None)."""
    return os.environ.get("COMMBENCH_RUN_ID") or launch_id or new_launch_id()


def timestamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def git_sha() -> str:
    given = os.environ.get("COMMBENCH_GIT_SHA")
    if given:
        return given
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def versions(transport_info: dict) -> dict:
    import mpi4py
    import numpy
    from mpi4py import MPI

    from commbench import __version__

    v = {
        "commbench": __version__,
        "python": platform.python_version(),
        "mpi4py": mpi4py.__version__,
        "mpi": MPI.Get_library_version().splitlines()[0].strip(),
        "numpy": numpy.__version__,
    }
    for key in ("library", "cupy", "driver", "nvshmem"):
        if key in transport_info:
            v[key] = transport_info[key]
    return v


def captured_env() -> dict:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}


def check_output_path(path: str | os.PathLike, flag: str) -> None:
    """Refuse an output file that cannot be written, before any work; creates nothing.

    ``UsageError`` naming ``flag`` when ``path`` is a directory, its folder cannot be made
    or written, or the file cannot be opened for appending. A FIFO is accepted (its reader
    may come later; a stalled write is the watchdog's).
    """
    from commbench.errors import UsageError

    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{flag} {path}: is a directory; give a file name inside it")
    try:  # one look: another rank's check may create and remove the file meanwhile
        if stat.S_ISFIFO(p.stat().st_mode):
            return
    except FileNotFoundError:
        pass
    folder = p.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{flag} {path}: {folder} is not a directory; choose another path")
    if folder != p.parent:  # the folders would be made at the first write: try one
        try:
            os.rmdir(tempfile.mkdtemp(dir=folder, prefix=".commbench-check-"))
        except OSError as exc:
            raise UsageError(
                f"{flag} {path}: cannot create folders in {folder} ({exc.strerror}); "
                "choose another path"
            ) from None
        return
    existed = p.exists()
    try:
        fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o666)
    except OSError as exc:
        raise UsageError(
            f"{flag} {path}: cannot write there ({exc.strerror}); choose another path"
        ) from None
    os.close(fd)
    if not existed:
        try:
            p.unlink()
        except FileNotFoundError:  # another rank's check removed it first
            pass


class RecordWriter:
    """Appends records (and raw-time lines), each in one ``write`` and synced to disk.

    A failed append (disk full, I/O error) is rolled back, so the file keeps whole lines,
    and the error names the file. A torn tail left by a killed run is set aside by
    :meth:`repair` before the first append, never glued to a new record.
    """

    def __init__(self, path: str | os.PathLike | None) -> None:
        self.path = Path(path) if path else None
        stem = self.path.name.removesuffix(".jsonl") if self.path else ""
        self.raw_path = self.path.with_name(stem + ".raw.jsonl") if self.path else None
        #: ``--timeline``: one line per span of every rank and call (pandas: read_json lines)
        self.timeline_path = self.path.with_name(stem + ".timeline.jsonl") if self.path else None

    def repair(self) -> list[str]:
        """Move a cut-off last line of the results and raw files to ``<file>.torn``;
        returns one message per file repaired."""
        if self.path is None:
            return []
        paths = (self.path, self.raw_path, self.timeline_path)
        return [m for p in paths if (m := repair_torn_tail(p))]

    def _append(self, path: Path, obj: dict | list[dict]) -> None:
        """Append one object (a list: one line each) in one write."""
        objs = obj if isinstance(obj, list) else [obj]
        data = "".join(json.dumps(o, default=_json_default) + "\n" for o in objs).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
            start = os.lseek(fd, 0, os.SEEK_END) if regular else 0
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if regular:
                    os.fsync(fd)
            except OSError as exc:
                if regular:
                    _truncate(fd, start)
                raise OSError(
                    exc.errno, f"{path}: cannot append the record ({exc.strerror})"
                ) from None
        finally:
            os.close(fd)

    def write(
        self, record: dict, raw: dict | None = None, timeline: list[dict] | None = None
    ) -> None:
        """Append the side lines (raw times, ``--timeline`` spans), then the record that
        names their files; a failure leaves none of this point's lines behind."""
        if self.path is None:
            return
        sides = [(self.raw_path, raw, "raw_file"), (self.timeline_path, timeline, "timeline_file")]
        written: list[tuple[Path, int]] = []
        try:
            for path, lines, field in sides:
                if lines is not None:
                    written.append((path, _size(path)))
                    self._append(path, lines)
                    record[field] = path.name
            self._append(self.path, record)
        except OSError:
            for path, size in written:
                _truncate_path(path, size)
            raise


def repair_torn_tail(path: Path) -> str | None:
    """If ``path`` ends in a cut-off line, move that line to ``<path>.torn`` and cut it off.

    A last line that is a whole JSON object only lacking its newline gets the newline.
    Returns a message saying what was done, or None when the file was whole.
    """
    if not path.is_file() or path.stat().st_size == 0:
        return None
    with path.open("rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return None
        start = size
        while start > 0:  # back to the byte after the last newline
            step = min(65536, start)
            fh.seek(start - step)
            chunk = fh.read(step)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                start = start - step + nl + 1
                break
            start -= step
        fh.seek(start)
        tail = fh.read()
        try:
            whole = isinstance(json.loads(tail), dict)
        except ValueError:
            whole = False
        if whole:
            fh.seek(size)
            fh.write(b"\n")
            fh.flush()
            os.fsync(fh.fileno())
            return f"{path}: the last record lacked its newline; added it"
        torn = path.with_name(path.name + ".torn")
        with torn.open("ab") as out:
            out.write(tail + b"\n")
            out.flush()
            os.fsync(out.fileno())
        fh.truncate(start)
        fh.flush()
        os.fsync(fh.fileno())
    return (
        f"{path}: a cut-off last line ({len(tail)} bytes, from an interrupted run) "
        f"was moved to {torn.name}"
    )


def _size(path: Path) -> int | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _truncate(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass


def _truncate_path(path: Path, size: int | None) -> None:
    """Undo an append to ``path`` (``size`` None: the file did not exist or is no file)."""
    try:
        if size is None:
            if path.is_file():
                path.unlink()
        else:
            os.truncate(path, size)
    except OSError:
        pass


def _json_default(obj):
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"cannot write {type(obj).__name__} to a result record")
