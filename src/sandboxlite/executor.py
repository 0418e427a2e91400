"""Build and cache the executor: the small C program that runs as PID 1 in every jail.

It is compiled once per machine (and per source version) with the system C
compiler, statically when libc.a is available so it runs over any rootfs, and
cached under ``$SANDBOXLITE_HOME/bin``.  See ``_executor/executor.c`` for what
it does and the wire protocol it speaks.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from . import paths
from .errors import SetupError

SOURCE = "executor.c"


def _source() -> bytes:
    return resources.files("sandboxlite._executor").joinpath(SOURCE).read_bytes()


def _compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return shutil.which(cc)
    return None


@functools.lru_cache(maxsize=1)
def executor_path() -> Path:
    """Path of the compiled executor, building it on first use."""
    src = _source()
    digest = hashlib.sha256(src).hexdigest()[:16]
    target = paths.ensure_dir(paths.home() / "bin") / f"sandboxlite-executor-{digest}"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    cc = _compiler()
    if cc is None:
        raise SetupError(
            "no C compiler found to build the sandbox executor (a 600-line C file, built once)",
            hint="apt-get install gcc libc6-dev   (or set CC)",
        )
    with tempfile.TemporaryDirectory(prefix=".build-", dir=target.parent) as tmp:
        c_file = Path(tmp) / SOURCE
        c_file.write_bytes(src)
        out = Path(tmp) / "executor"
        errors = []
        for extra in (["-static"], []):  # static first: runs over any rootfs
            cmd = [cc, "-O2", "-std=gnu11", *extra, "-o", str(out), str(c_file)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode == 0:
                break
            errors.append(f"$ {' '.join(cmd)}\n{proc.stderr.strip()}")
        else:
            raise SetupError(
                "could not compile the sandbox executor:\n" + "\n".join(errors),
                hint="apt-get install gcc libc6-dev",
            )
        os.chmod(out, 0o755)
        os.replace(out, target)  # atomic: concurrent builders are fine
    return target


def is_static(path: Path) -> bool:
    """True when the binary needs no dynamic loader (it then runs over any rootfs)."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    return b"/lib64/ld-linux" not in head and b"ld-linux" not in head
