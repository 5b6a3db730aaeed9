"""Failpoints: named places where a test makes this process die as `kill -9` would, to reach the narrow windows of
a commit (between the record and the swap, between two renames, mid-upload) that random kills rarely hit.

`CSTS_PIPELINE_FAILPOINT=NAME` names the point; `CSTS_PIPELINE_FAILPOINT_ONCE=FLAGFILE` makes it fire only the
first time across processes (Ray restarts a killed actor and retries its work, which must then go through). The
points are the `failpoint(...)` calls: pipeline.commit, pipeline.storage, the executors and mine's search.

`CSTS_PIPELINE_FAULT=POINT:ERRNO[:PART]` makes the environment fail instead, as a full disk (ENOSPC) or a read-only
folder (EROFS) would, without root tricks: `fault(POINT, path)` raises that OSError for a path containing PART.
The points are `write` (pipeline.shards.write_atomic, every output file and record) and `lock` (pipeline.locks).
"""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path
from typing import Any

FAILPOINT = "CSTS_PIPELINE_FAILPOINT"
FAILPOINT_ONCE = "CSTS_PIPELINE_FAILPOINT_ONCE"
FAULT = "CSTS_PIPELINE_FAULT"


def armed() -> bool:
    """True when a failpoint is named at all: callers skip per-item checks otherwise."""
    return bool(os.environ.get(FAILPOINT))


def failpoint(name: str) -> None:
    """Die here when the environment names this point."""
    if os.environ.get(FAILPOINT) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def failpoint_once(name: str) -> None:
    """`failpoint`, but only while the flag file that CSTS_PIPELINE_FAILPOINT_ONCE names does not exist."""
    flag = os.environ.get(FAILPOINT_ONCE)
    if os.environ.get(FAILPOINT) != name or (flag and os.path.exists(flag)):
        return
    if flag:
        Path(flag).touch()
    failpoint(name)


def fault(point: str, path: Path, named: bool = True) -> None:
    """Raise the OSError the environment names for this point and path (CSTS_PIPELINE_FAULT), as the OS would: with
    the file's name (open), or without it (`named=False`: write and fsync on a full disk name none)."""
    given = os.environ.get(FAULT)
    if not given:
        return
    where, _, rest = given.partition(":")
    code, _, part = rest.partition(":")
    if where == point and part in str(path):
        number = getattr(errno, code)
        raise OSError(number, os.strerror(number), *([str(path)] if named else []))


def forwarded() -> dict[str, Any]:
    """Ray options that hand the driver's failpoint to the workers Ray starts (as `runtime_env` variables)."""
    names = {name: os.environ[name] for name in (FAILPOINT, FAILPOINT_ONCE) if os.environ.get(name)}
    return {"runtime_env": {"env_vars": names}} if names else {}
