"""Files read out of a run's folder without leaving it: a symlink is never followed (``O_NOFOLLOW``,
and a directory entry that is a link is listed as one), only regular files are opened, and no more
than a cap is read of each."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ._text import TEXT_CAP, decode, fit

MAX_FILES = 500  # output files listed
SNIFF = 8192  # bytes looked at to call a file binary (a NUL byte among them)


def read_capped(path: Path, limit: int) -> tuple[bytes, int] | None:
    """(at most ``limit`` bytes of the regular file ``path``, its size); None when it is a symlink,
    not a regular file, or cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), st.st_size
    finally:
        os.close(fd)


def _name(rel: str) -> str:
    """A name from the disk (surrogate-escaped where it is not UTF-8) as text."""
    return fit(rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), 4096)[0]


def _entry(path: Path, rel: str) -> dict:
    got = read_capped(path, TEXT_CAP + 1)
    if got is None:
        return {"name": _name(rel), "kind": "unreadable", "size": None, "text": None, "truncated": False}
    data, size = got
    if b"\x00" in data[:SNIFF]:
        return {"name": _name(rel), "kind": "binary", "size": size, "text": None, "truncated": False}
    text, cut = fit(decode(data[:TEXT_CAP]), TEXT_CAP)
    return {"name": _name(rel), "kind": "text", "size": size, "text": text, "truncated": cut or size > TEXT_CAP}


def output_files(root: Path) -> tuple[list[dict], int]:
    """The files under ``root`` (a run's ``files/``), sorted by name, and how many were left out
    (over ``MAX_FILES``).  Links are listed, never followed; directories are walked without
    following links to them."""
    out: list[dict] = []
    left_out = 0
    if root.is_symlink() or not root.is_dir():
        return out, 0
    stack = [(root, "")]
    while stack:
        folder, prefix = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            rel = prefix + e.name
            if e.is_symlink():
                out.append({"name": _name(rel), "kind": "symlink", "size": None, "text": None, "truncated": False})
            elif e.is_dir(follow_symlinks=False):
                stack.append((Path(e.path), rel + "/"))
                continue
            elif len(out) >= MAX_FILES:
                left_out += 1
            else:
                out.append(_entry(Path(e.path), rel))
    out.sort(key=lambda f: f["name"])
    return out, left_out
