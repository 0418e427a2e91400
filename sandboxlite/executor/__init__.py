"""The executor: the small C program that runs as PID 1 in every jail, how it is built, and the
protocol the host speaks with it.

    executor.h, *.c     the program (see executor.h for which file holds what)
    launcher_x86_64.c   a libc-free launcher that starts bwrap as an unprivileged uid (root callers)
    protocol            the wire format: frames, request types, payload builders (mirrors executor.h)
    (this module)       building and caching the binaries

The program is compiled once per machine (and per source version) with the system C compiler,
statically when libc.a is available so it runs over any rootfs, and cached under
``$SANDBOXLITE_HOME/bin``.

May import: errors, paths.
"""

from __future__ import annotations

import errno
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from .. import paths
from ..errors import SetupError

# The executor's files: its header and every .c file here but the launcher's (a program of its own).
# executor.h says which file holds what; tests/test_protocol.py checks that none is missing here.
SOURCE = ("executor.h", "main.c", "wire.c", "util.c", "spawn.c", "generations.c", "requests.c", "sharing.c",
          "snapshots.c", "landlock.c", "launch.c", "netns.c")
LAUNCHER = "launcher_x86_64.c"


def _compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return shutil.which(cc)
    return None


def _musl() -> tuple[str, Path] | None:
    """musl-gcc and the directory of the kernel's uapi headers (musl's wrapper hides /usr/include)."""
    cc = shutil.which("musl-gcc")
    if cc is None:
        return None
    for d in (Path("/usr/include"), Path(f"/usr/include/{platform.machine()}-linux-gnu")):
        if (d / "asm" / "unistd.h").is_file() and Path("/usr/include/linux/seccomp.h").is_file():
            return cc, d
    return None


def _kernel_headers(tmp: str, asm_parent: Path) -> str:
    """A directory holding only linux/, asm/ and asm-generic/: kernel headers for musl-gcc."""
    inc = Path(tmp) / "kinc"
    inc.mkdir()
    for name, src in (("linux", Path("/usr/include/linux")), ("asm", asm_parent / "asm"),
                      ("asm-generic", Path("/usr/include/asm-generic"))):
        os.symlink(src, inc / name)
    return str(inc)


def _digest(files: dict[str, bytes], candidates: list[list[str]]) -> str:
    """What a build is cached by: every file's name and contents, and the flag sets tried."""
    h = hashlib.sha256()
    for name, data in files.items():
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    h.update(repr(candidates).encode())
    return h.hexdigest()[:16]


def _build(source: str | Sequence[str], name: str, flag_sets: list[list[str]]) -> Path:
    """Compile ``source`` (a file of this package, or several: headers and .c files compiled
    together into one program) once per content hash into ``$SANDBOXLITE_HOME/bin/NAME-HASH``.

    A flag set may start with ``"musl"``: then musl-gcc compiles it (skipped when
    absent), with the kernel headers at ``{kinc}``."""
    names = (source,) if isinstance(source, str) else tuple(source)
    package = resources.files("sandboxlite.executor")
    files = {n: package.joinpath(n).read_bytes() for n in names}
    musl = _musl()
    candidates = [f for f in flag_sets if f[:1] != ["musl"] or musl is not None]
    target = paths.ensure_dir(paths.home() / "bin") / f"{name}-{_digest(files, candidates)}"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    cc = _compiler()
    if cc is None:
        raise SetupError(
            "no C compiler found to build the sandbox executor (a few small C files, built once)",
            hint="apt-get install gcc libc6-dev   (or set CC)",
        )
    try:
        with tempfile.TemporaryDirectory(prefix=".build-", dir=target.parent) as tmp:
            for n, data in files.items():  # side by side: a .c file finds its header next to it
                (Path(tmp) / n).write_bytes(data)
            c_files = [str(Path(tmp) / n) for n in names if n.endswith(".c")]
            out = Path(tmp) / name
            errors = []
            for flags in candidates:
                if flags[:1] == ["musl"]:
                    kinc = _kernel_headers(tmp, musl[1])
                    cmd = [musl[0], *(f.replace("{kinc}", kinc) for f in flags[1:]), "-o", str(out), *c_files]
                else:
                    cmd = [cc, *flags, "-o", str(out), *c_files]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode == 0:
                    break
                errors.append(f"$ {' '.join(cmd)}\n{proc.stderr.strip()}")
                if "No space left on device" in proc.stderr:  # the cache's disk, not the compiler
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            else:
                raise SetupError(
                    f"could not compile {', '.join(names)}:\n" + "\n".join(errors),
                    hint="apt-get install gcc libc6-dev",
                )
            os.chmod(out, 0o755)
            os.replace(out, target)  # atomic: concurrent builders are fine
    except OSError as e:
        raise paths.cache_error(target.parent, e) from None
    return target


def executor_path() -> Path:
    """Path of the compiled executor, building it on first use (static first: runs over any rootfs).

    Not cached in memory (``Host.detect()`` asks once); the binary is cached on disk by content hash.

    musl first when installed: a static glibc program probes the CPU at every
    start, which costs ~0.3 ms of every cold start on VMs where CPUID traps
    (measured here: an empty static program runs in 0.40 ms with glibc, 0.12 ms
    with musl); the executor starts once per sandbox.
    """
    base = ["-O2", "-std=gnu11"]
    return _build(SOURCE, "sandboxlite-executor",
                  [["musl", *base, "-static", "-isystem", "{kinc}"], [*base, "-static"], base])


def launcher() -> tuple[Path, list[str]]:
    """How a root caller starts bwrap as an unprivileged uid: (program, argv prefix).

    On x86_64 a libc-free launcher (glibc's static start-up probes the CPU, which
    costs ~0.3 ms on VMs where CPUID traps); elsewhere the executor's launch mode.
    """
    if platform.machine() == "x86_64":
        flags = ["-O2", "-static", "-nostdlib", "-ffreestanding", "-fno-stack-protector", "-fno-builtin",
                 "-fno-pie", "-no-pie"]
        try:
            path = _build(LAUNCHER, "sandboxlite-launcher", [flags])
            return path, ["sandboxlite-launcher"]
        except SetupError:
            pass
    return executor_path(), ["sandboxlite-executor", "launch"]


def is_static(path: Path) -> bool:
    """True when the binary needs no dynamic loader (it then runs over any rootfs)."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    return b"/lib64/ld-linux" not in head and b"ld-linux" not in head


def is_musl(path: Path) -> bool:
    """True when the binary was linked against musl (its start-up does not probe the CPU)."""
    with open(path, "rb") as f:
        return b"musl" in f.read()
