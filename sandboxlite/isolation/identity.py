"""Who the jails run as on the host, and whether that uid can reach a path.

uid 0 inside a sandbox must never be the host's root: root owns /proc/sys and
many other kernel files by plain permission bits, and RLIMIT_NPROC does not
bind it.  So a root caller's sandboxes run as an unprivileged host uid: chosen
with ``SANDBOXLITE_UID`` / ``SANDBOXLITE_GID``, by default the system user
``sandboxlite`` (tools/setup.sh creates it; it owns the images, which a
copy-on-write root needs), else ``nobody``.  Other callers' sandboxes run as
the caller.

Pure functions of their arguments (the environment and the user database are
read when called, never cached here: ``Host.detect()`` calls them once).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping

from ..errors import ConfigError

NOBODY = (65534, 65534)


def run_as(env: Mapping[str, str] | None = None, euid: int | None = None) -> tuple[int, int] | None:
    """The unprivileged (uid, gid) a root caller's sandboxes run as; None for other callers."""
    env = os.environ if env is None else env
    if (os.geteuid() if euid is None else euid) != 0:
        return None
    uid, gid = env.get("SANDBOXLITE_UID") or None, env.get("SANDBOXLITE_GID") or None
    for name, value in (("SANDBOXLITE_UID", uid), ("SANDBOXLITE_GID", gid)):
        if value is not None and not value.strip().isdigit():
            raise ConfigError(name, f"must be a numeric id, got {value!r}", hint=f"unset it, or set a number ({name}=1000)")
    default = NOBODY
    if uid is None:
        import pwd

        for name in ("sandboxlite", "nobody"):
            try:
                pw = pwd.getpwnam(name)
            except KeyError:
                continue
            default = (pw.pw_uid, pw.pw_gid)
            break
    else:
        default = (int(uid), int(uid))
    result = (int(uid) if uid else default[0], int(gid) if gid else default[1])
    if result[0] == 0:
        raise ConfigError("SANDBOXLITE_UID", "must not be 0: sandboxes never run as the host's root")
    return result


def unreachable(path: str, uid: int, gid: int, write: bool) -> str | None:
    """Why ``uid``/``gid`` (no supplementary groups) cannot use ``path``, or None."""

    def allowed(st: os.stat_result, bits: int) -> bool:
        if st.st_uid == uid:
            return (st.st_mode >> 6) & bits == bits
        if st.st_gid == gid:
            return (st.st_mode >> 3) & bits == bits
        return st.st_mode & bits == bits

    parts = os.path.abspath(path).split("/")[1:]
    cur = ""
    for part in parts[:-1]:
        cur += "/" + part
        if not allowed(os.stat(cur), 1):
            return f"{cur} is not searchable by uid {uid}"
    st = os.stat(path)
    need = 4 | (1 if stat.S_ISDIR(st.st_mode) else 0) | (2 if write else 0)
    if not allowed(st, need):
        return f"{path} is not {'writable' if write else 'readable'} by uid {uid}"
    return None
