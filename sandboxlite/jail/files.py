"""The file API of a sandbox: ``read_file``, ``write_file``, ``is_file``, ``mkdir``, ``upload``,
``download`` (and what lists, inspects, removes, renames and watches files).

``SandboxFiles`` is mixed into ``Sandbox``: its methods need ``lock``, ``jail`` and ``workdir``.
Every path is resolved by the executor inside the sandbox's root (symlinks and ".." stay there),
and the host only ever holds descriptors it was handed (transfer.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..config import resolve_path
from ..errors import ConfigError, SandboxFileError
from . import transfer


class SandboxFiles:
    """Files inside the sandbox (relative paths start at its workdir)."""

    def _abs(self, path: str | os.PathLike, field: str = "path") -> str:
        return resolve_path(path, self.workdir, field)

    def read_file(
        self, path: str | os.PathLike, *, max_bytes: int | None = None, offset: int = 0, length: int | None = None
    ) -> bytes:
        """The exact bytes of a file inside the sandbox (relative paths start at workdir).

        ``max_bytes`` caps the file, charged on the bytes read (not on its size when opened):
        EFBIG (a ``SandboxFileError``) when it is bigger, or grows bigger while it is read; at
        most ``max_bytes`` + 1 bytes are read.  The holes of a sparse file read as zeros and count.
        ``offset``, ``length``: only the part of at most ``length`` bytes that starts at ``offset``
        (fewer at the end of the file), to read a big file piece by piece.
        """
        for name, value in (("offset", offset), ("length", length)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ConfigError(name, f"must be a number of bytes >= 0, got {value!r}")
        p = self._abs(path)
        with self.lock:
            fd = self.jail.open(p, transfer.READ_FLAGS)
        return transfer.read_fd(fd, p, max_bytes, offset, length)

    def write_file(
        self, path: str | os.PathLike, data: bytes | str, *, mode: int = 0o644, parents: bool = True
    ) -> None:
        """Create or replace a file with exactly ``data`` (str is written as UTF-8)."""
        p = self._abs(path)
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        with self.lock:
            fd = self.jail.open(p, transfer.write_flags(parents), mode)
        transfer.write_fd(fd, p, raw, mode)

    def is_file(self, path: str | os.PathLike) -> bool:
        """Whether ``path`` is a regular file inside the sandbox (symlinks followed within its root)."""
        try:
            with self.lock:
                os.close(self.jail.open(self._abs(path), transfer.READ_FLAGS))
        except SandboxFileError:
            return False
        return True

    def mkdir(self, path: str | os.PathLike, *, mode: int = 0o755) -> None:
        """``mkdir -p`` inside the sandbox."""
        p = self._abs(path)
        with self.lock:
            self.jail.mkdir(p, mode)

    def upload(self, host_path: str | os.PathLike, path: str | os.PathLike) -> None:
        """Copy a host file or directory tree to ``path`` inside the sandbox.

        Directory trees keep their layout, file modes and symlinks (as links).
        """
        dst = self._abs(path)
        with self.lock:
            transfer.upload(self.jail, Path(host_path), dst)

    def download(
        self,
        path: str | os.PathLike,
        host_path: str | os.PathLike,
        *,
        symlinks: bool = True,
        max_bytes: int | None = None,
    ) -> list[str]:
        """Copy a file or directory tree out of the sandbox to ``host_path``.

        Symlinks are never followed: a link inside the tree is recreated only when it is
        relative, stays inside the tree (only leading ".." allowed) and ``symlinks`` is true;
        any other link is left out, and so are directories nested over 128 deep.  With
        ``max_bytes``, files that would take the total over it are left out: charged on the
        bytes actually copied (holes included), so a file that grows while it is copied is cut
        off at the cap and left out, its partial copy removed; at most ``max_bytes`` land on the
        host.  Holes of sparse files stay holes on the host (SEEK_DATA/SEEK_HOLE): they take no
        disk, but their length counts.  Returns the sandbox paths that were left out (links,
        fifos, sockets, devices, files over the cap), so nothing is lost silently; names that
        are not UTF-8 come surrogate-escaped, as ``os.fsdecode`` gives them.
        """
        p = self._abs(path)
        with self.lock:
            fd = self.jail.open(p, os.O_RDONLY)
        return transfer.download(fd, p, Path(host_path), symlinks=symlinks, max_bytes=max_bytes)
