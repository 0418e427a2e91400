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
from importlib import resources
from pathlib import Path

from .. import paths
from ..errors import SetupError

SOURCE = "executor.c"


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


def _build(source: str, name: str, flag_sets: list[list[str]]) -> Path:
    """Compile ``source`` once per content hash into ``$SANDBOXLITE_HOME/bin/NAME-HASH``.

    A flag set may start with ``"musl"``: then musl-gcc compiles it (skipped when
    absent), with the kernel headers at ``{kinc}``."""
    src = resources.files("sandboxlite.executor").joinpath(source).read_bytes()
    musl = _musl()
    candidates = [f for f in flag_sets if f[:1] != ["musl"] or musl is not None]
    digest = hashlib.sha256(src + repr(candidates).encode()).hexdigest()[:16]
    target = paths.ensure_dir(paths.home() / "bin") / f"{name}-{digest}"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    cc = _compiler()
    if cc is None:
        raise SetupError(
            "no C compiler found to build the sandbox executor (a small C file, built once)",
            hint="apt-get install gcc libc6-dev   (or set CC)",
        )
    try:
        with tempfile.TemporaryDirectory(prefix=".build-", dir=target.parent) as tmp:
            c_file = Path(tmp) / source
            c_file.write_bytes(src)
            out = Path(tmp) / name
            errors = []
            for flags in candidates:
                if flags[:1] == ["musl"]:
                    kinc = _kernel_headers(tmp, musl[1])
                    cmd = [musl[0], *(f.replace("{kinc}", kinc) for f in flags[1:]), "-o", str(out), str(c_file)]
                else:
                    cmd = [cc, *flags, "-o", str(out), str(c_file)]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode == 0:
                    break
                errors.append(f"$ {' '.join(cmd)}\n{proc.stderr.strip()}")
                if "No space left on device" in proc.stderr:  # the cache's disk, not the compiler
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            else:
                raise SetupError(
                    f"could not compile {source}:\n" + "\n".join(errors),
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
            path = _build("launcher_x86_64.c", "sandboxlite-launcher", [flags])
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
