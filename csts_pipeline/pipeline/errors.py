"""The one exception type for user mistakes, and the environment faults (a full disk, a read-only folder, a missing
permission, a lock that cannot be made) that the CLI prints the same way: a single line, without a traceback."""

from __future__ import annotations

import errno

# OSErrors that say something about the machine, not about the code: the user fixes them (free space, another
# folder, permissions), so they get one line naming the path and the cause, never a traceback
ENVIRONMENT = {
    errno.ENOSPC: "free some space and rerun",
    errno.EDQUOT: "free some space (or raise the quota) and rerun",
    errno.EROFS: "give a folder that can be written (--out, or work_dir in the manifest)",
    errno.EACCES: "give a folder that can be written (--out, or work_dir in the manifest), or fix its permissions",
    errno.EPERM: "give a folder that can be written (--out, or work_dir in the manifest), or fix its permissions",
    errno.ENOLCK: "the filesystem cannot hold the lock; give a local folder (--out)",
    errno.EEXIST: "it is in the way: move it, or give another path",
    errno.ENOTDIR: "a file stands where a folder is needed: move it, or give another path",
    errno.EISDIR: "a folder stands where a file is needed: move it, or give another path",
    errno.ENAMETOOLONG: "give a shorter path",
    errno.EMFILE: "raise the open files limit (ulimit -n) and rerun",
    errno.EIO: "the disk reported an I/O error; check it and rerun",
}


class UserError(Exception):
    """A problem the user can fix (a missing file, a bad manifest value, no GPU for --device cuda)."""


def environment_line(exc: OSError) -> str | None:
    """The one line of an environment fault (path, cause, what to do; the outputs are committed whole or not at
    all, so the previous output is kept), or None for an OSError that is not one (a bug keeps its traceback)."""
    hint = ENVIRONMENT.get(exc.errno or 0)
    if hint is None:
        return None
    path = exc.filename if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
    cause = f"{exc.strerror or 'error'} ({errno.errorcode.get(exc.errno or 0, exc.errno)})"
    where = f"{path}: " if path is not None else ""
    return f"{where}{cause}; {hint} (the previous output is kept)"
