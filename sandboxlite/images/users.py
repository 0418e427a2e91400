"""An image's ``User`` (``1000``, ``1000:1000``, ``app``, ``app:staff``) as the uid and gid a
sandbox runs as inside its user namespace: names looked up in the image's own ``/etc/passwd``
and ``/etc/group``, as docker does.  The files are read from the unpacked tree on the host, so
they are opened without following a symlink at any step (an image's ``/etc/passwd`` that links
to the host's would otherwise be read from the host)."""

from __future__ import annotations

import os
import stat

from ..errors import RootfsError

MAX_FILE = 4 << 20
MAX_ID = 0xFFFFFFFE  # (uid_t, -1 excluded: it means "no change" to the kernel)


def _read_in_root(root: str, rel: str) -> str | None:
    """``root/rel`` read without following symlinks (None when it is missing or is not a plain file)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        parts = rel.split("/")
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
        f = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    with os.fdopen(f, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        return fh.read(MAX_FILE).decode("utf-8", "replace")


def _table(root: str, rel: str) -> list[list[str]]:
    text = _read_in_root(root, rel) or ""
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]


def _number(text: str) -> int | None:
    return int(text) if text.isdigit() and int(text) <= MAX_ID else None


def resolve_user(root: str, spec: str) -> tuple[int, int]:
    """(uid, gid) of ``spec`` in the image at ``root``; RootfsError when a name is not there."""
    user, _, group = spec.partition(":")
    uid = _number(user)
    gid = None
    if uid is None:
        entry = next((e for e in _table(root, "etc/passwd") if len(e) >= 4 and e[0] == user), None)
        if entry is None or _number(entry[2]) is None:
            raise _unknown(spec, "user", user, "etc/passwd")
        uid, gid = _number(entry[2]), _number(entry[3])
    elif not group:  # a number: its group is its passwd entry's, else the uid's own number's (docker: 0)
        entry = next((e for e in _table(root, "etc/passwd") if len(e) >= 4 and _number(e[2]) == uid), None)
        gid = _number(entry[3]) if entry else 0
    if group:
        gid = _number(group)
        if gid is None:
            entry = next((e for e in _table(root, "etc/group") if len(e) >= 3 and e[0] == group), None)
            if entry is None or _number(entry[2]) is None:
                raise _unknown(spec, "group", group, "etc/group")
            gid = _number(entry[2])
    return uid, gid if gid is not None else 0  # type: ignore[return-value]


def _unknown(spec: str, kind: str, name: str, where: str) -> RootfsError:
    return RootfsError(f"the image's User {spec!r} names the {kind} {name!r}, which its /{where} does not have",
                       hint="fix the image's User (a number works without a passwd entry)")
