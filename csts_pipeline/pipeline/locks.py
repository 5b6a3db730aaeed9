"""Advisory locks on stage folders, so that two runs on one work folder never write the same stage at once.

A run holds its stage's lock exclusively and its upstream stage's lock shared, always upstream first, so readers
never see an upstream output being swapped and no two runs can wait on each other in a circle. The locks are
`flock`s on hidden files beside the stage folders: the OS releases them when the holder dies, so a crashed run
never blocks the next one.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from csts_pipeline.pipeline.failpoints import fault

log = logging.getLogger(__name__)


def lock_path(work_dir: Path, stage: str) -> Path:
    return work_dir / f".{stage}.lock"


@contextlib.contextmanager
def stage_lock(work_dir: Path, stage: str, exclusive: bool = True) -> Iterator[None]:
    """Hold the lock of `work_dir/stage`; when another run holds it, say who and wait for it."""
    path = lock_path(work_dir, stage)
    path.parent.mkdir(parents=True, exist_ok=True)
    fault("lock", path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    try:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("%s: in use by %s; waiting for it to finish", work_dir / stage, _holder(fd))
            fcntl.flock(fd, mode)
        if exclusive:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
        if exclusive:  # the pid must not outlive the hold: a later shared holder would be named by it
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    """The exclusive holder's pid when it is written and alive; a shared holder (a reader) writes none."""
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    if text.isdigit():
        try:
            os.kill(int(text), 0)
            return f"pid {text}"
        except ProcessLookupError:
            pass
        except PermissionError:
            return f"pid {text}"
    return "another run"
