"""The part of the ``Sandbox`` API that ``run_task`` and its tools use, over PyPI sandlock: the
bench's agent episode with sandlock as the sandbox (``bench.episode``), nothing else.

sandlock confines a process tree (Landlock + seccomp) in the caller's namespaces, over the image as
its chroot; it has no living sandbox to exec into.  So here:

- ``shell()`` is a confined ``/bin/bash`` kept running, each command written to its stdin and its
  end (exit code, working directory) read back as a marker line on both streams;
- ``exec(argv)`` is one ``Sandbox(...).run(argv)``, sandlock's own way to run a command;
- ``/testbed`` and ``/tmp`` are two host directories of this box (``fs_mount``) that the file
  operations reach from the host, component by component with ``O_NOFOLLOW`` (a symlink the
  commands made is refused, never followed onto the host); the rest of the image is read-only.
"""

from __future__ import annotations

import errno
import os
import secrets
import select
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from ..config import SandboxConfig
from ..errors import file_error
from ..result import ExecResult

PLACES = ("/testbed", "/tmp")


class SandlockShell:
    """A confined bash session: ``run(command, timeout)`` -> ExecResult; ``cwd``; ``close()``."""

    def __init__(self, box: SandlockBox) -> None:
        self.box = box
        self.cwd = box.workdir
        self.proc: Any = None

    def _start(self) -> None:
        mod = self.box.mod
        piped = mod.StdioMode.PIPED
        self.proc = mod.Sandbox(**self.box.kwargs).popen(["/bin/bash", "--noprofile", "--norc"], stdin=piped,
                                                         stdout=piped, stderr=piped)  # fmt: skip

    def run(self, command: str, timeout: float | None = None) -> ExecResult:
        if self.proc is None:
            self._start()
        mark = f"__sandlock_box_{secrets.token_hex(8)}__".encode()
        script = (command.encode() + b"\n__rc=$?; printf '%s %d %s\\n' " + mark + b' $__rc "$PWD"; printf \'%s\\n\' '
                  + mark + b" >&2\n")  # fmt: skip
        t0 = time.monotonic()
        self.proc.stdin.write(script)
        self.proc.stdin.flush()
        cap = self.box.config.limits.output_bytes
        bufs = {self.proc.stdout.fileno(): bytearray(), self.proc.stderr.fileno(): bytearray()}
        cut = False  # output past the cap was dropped as it came (only the cap and the end are kept)
        keep = 8192 + len(mark)  # the end kept: room for the end line (the mark, the status, the cwd)
        done: dict[int, int] = {}
        deadline = None if timeout is None else t0 + timeout
        while len(done) < 2:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                self.close()  # the session ends with its command (killed with its tree)
                out, err = (bytes(b[:cap]) for b in bufs.values())
                return ExecResult(124, out, err, time.monotonic() - t0, timed_out=True,
                                  note="the shell session was restarted")  # fmt: skip
            ready, _, _ = select.select([fd for fd in bufs if fd not in done], [], [], left)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise RuntimeError("sandlock's shell ended")
                bufs[fd] += chunk
                if len(bufs[fd]) > cap + 2 * keep:
                    del bufs[fd][cap : len(bufs[fd]) - keep]
                    cut = True
                at = bufs[fd].find(mark)
                if at >= 0 and bufs[fd].endswith(b"\n"):
                    done[fd] = at
        out_fd, err_fd = list(bufs)
        tail = bytes(bufs[out_fd][done[out_fd] + len(mark) :]).split(None, 1)
        self.cwd = tail[1].decode(errors="replace").strip() if len(tail) > 1 else self.cwd
        out, err = bytes(bufs[out_fd][: done[out_fd]]), bytes(bufs[err_fd][: done[err_fd]])
        return ExecResult(int(tail[0]), out[:cap], err[:cap], time.monotonic() - t0,
                          truncated=cut or len(out) > cap or len(err) > cap)  # fmt: skip

    def close(self) -> None:
        if self.proc is not None:
            proc, self.proc = self.proc, None
            try:
                proc.kill()
            except Exception:  # noqa: BLE001, S110 - it may have ended already
                pass
            for f in (proc.stdin, proc.stdout, proc.stderr):
                f.close()
            proc.wait()


class SandlockBox:
    """A sandbox-like object over sandlock (see the module's docstring).  ``kwargs``: the
    ``sandlock.Sandbox`` settings of the bench's baseline (image, limits, environment); the two
    places are added."""

    workdir, tmpdir, generation = "/testbed", "/tmp", 0

    def __init__(self, mod: Any, kwargs: dict[str, Any], image_dir: str | None, scratch: str | Path) -> None:
        self.mod = mod
        self.config = SandboxConfig()
        self.image_dir = image_dir
        self.root = Path(tempfile.mkdtemp(prefix="sandlock-box-", dir=scratch))
        for place in PLACES:
            (self.root / place.strip("/")).mkdir()
        mounts = {p: str(self.root / p.strip("/")) for p in PLACES}
        self.kwargs = {**kwargs, "chroot": image_dir, "fs_writable": list(PLACES), "fs_mount": mounts,
                       "cwd": self.workdir}  # fmt: skip
        self.closed = False
        self._shells: list[SandlockShell] = []

    # -- commands --------------------------------------------------------------------------------
    def shell(self) -> SandlockShell:
        sh = SandlockShell(self)
        self._shells.append(sh)
        return sh

    def exec(self, cmd: list[str], *, timeout: float | None = None, **_: Any) -> ExecResult:
        t0 = time.monotonic()
        r = self.mod.Sandbox(**self.kwargs).run(list(cmd), timeout=timeout)
        return ExecResult(r.exit_code, r.stdout or b"", r.stderr or b"", time.monotonic() - t0)

    # -- files (from the host, never through a symlink) ------------------------------------------
    def _split(self, path: str | os.PathLike) -> tuple[str, list[str]]:
        p = os.path.normpath(os.fspath(path))
        if not p.startswith("/"):
            p = os.path.normpath(f"{self.workdir}/{p}")
        for place in PLACES:
            if p == place or p.startswith(place + "/"):
                return str(self.root / place.strip("/")), [x for x in p[len(place) :].split("/") if x]
        raise file_error(errno.EROFS, p, "only /testbed and /tmp are writable or reachable from the host here")

    def _dir(self, top: str, parts: list[str], path: str, *, create: bool = False) -> int:
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts:
                if create:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except OSError as e:
            os.close(fd)
            raise file_error(e.errno or errno.EIO, path) from None
        return fd

    def read_file(self, path: str | os.PathLike, *, max_bytes: int | None = None, offset: int = 0,
                  length: int | None = None) -> bytes:  # fmt: skip
        top, parts = self._split(path)
        if not parts:
            raise file_error(errno.EISDIR, os.fspath(path))
        dfd = self._dir(top, parts[:-1], os.fspath(path))
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as e:
            raise file_error(e.errno or errno.EIO, os.fspath(path)) from None
        finally:
            os.close(dfd)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise file_error(errno.EISDIR, os.fspath(path))
            size = st.st_size
            if max_bytes is not None and size > max_bytes:
                raise file_error(errno.EFBIG, os.fspath(path), f"larger than {max_bytes} bytes")
            os.lseek(fd, offset, os.SEEK_SET)
            want = size - offset if length is None else length
            return os.read(fd, max(0, want)) if want > 0 else b""
        finally:
            os.close(fd)

    def write_file(
        self, path: str | os.PathLike, data: bytes | str, *, mode: int = 0o644, parents: bool = True
    ) -> None:
        top, parts = self._split(path)
        if not parts:
            raise file_error(errno.EISDIR, os.fspath(path))
        dfd = self._dir(top, parts[:-1], os.fspath(path), create=parents)
        try:
            fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                         dir_fd=dfd)  # fmt: skip
        except OSError as e:
            raise file_error(e.errno or errno.EIO, os.fspath(path)) from None
        finally:
            os.close(dfd)
        try:
            os.write(fd, data.encode() if isinstance(data, str) else data)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)

    def mkdir(self, path: str | os.PathLike, *, mode: int = 0o755) -> None:
        top, parts = self._split(path)
        os.close(self._dir(top, parts, os.fspath(path), create=True))

    def upload(self, host_path: str | os.PathLike, path: str | os.PathLike) -> None:
        top, parts = self._split(path)
        dfd = self._dir(top, parts, os.fspath(path), create=True)
        os.close(dfd)
        shutil.copytree(host_path, os.path.join(top, *parts), symlinks=True, dirs_exist_ok=True)

    def download(self, path: str | os.PathLike, host_path: str | os.PathLike, *, symlinks: bool = True,
                 max_bytes: int | None = None) -> list[str]:  # fmt: skip
        """Regular files and directories under ``path`` copied to ``host_path``; the paths of what
        was left out (symlinks, other kinds) returned."""
        top, parts = self._split(path)
        skipped: list[str] = []
        dest = Path(host_path)
        dest.mkdir(parents=True, exist_ok=True)
        dfd = self._dir(top, parts, os.fspath(path))
        try:
            for dirpath, dirnames, filenames, fd in os.fwalk(dir_fd=dfd, follow_symlinks=False):
                for name in dirnames:
                    (dest / dirpath / name).mkdir(exist_ok=True)
                for name in filenames:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if not stat.S_ISREG(st.st_mode):
                        skipped.append(f"{os.fspath(path)}/{dirpath}/{name}".replace("/./", "/"))
                        continue
                    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                    try:
                        (dest / dirpath / name).write_bytes(os.read(src, st.st_size))
                    finally:
                        os.close(src)
        finally:
            os.close(dfd)
        return skipped

    def network_log(self) -> list:
        return []

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for sh in self._shells:
                sh.close()
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "SandlockBox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
