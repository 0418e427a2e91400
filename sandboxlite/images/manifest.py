"""Image manifests: what an image is (profile, packages, build time) and a digest of its whole tree.

An image directory holds ``root/`` (the tree), ``manifest.json`` and
``files.tsv`` (one line per entry: path, kind, permissions, size, content
hash or link target), so ``verify`` can name every changed, added or removed
file.  Ownership is not part of the digest: an image imported by a normal
user is owned by that user, and must still verify.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import RootfsError

MANIFEST = "manifest.json"
FILES = "files.tsv"
SCHEMA = "sandboxlite.rootfs/1"


def _hash_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def tree_entries(root: Path) -> list[tuple[str, str, str, int, str]]:
    """(path, kind, perms, size, hash-or-target) for every entry under root, sorted, never following links."""
    out = []
    seen: dict[tuple[int, int], str] = {}
    root_s = str(root)
    for dirpath, dirnames, filenames in os.walk(root_s, followlinks=False):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root_s)
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            st = os.lstat(full)
            perms = f"{stat.S_IMODE(st.st_mode):04o}"
            if stat.S_ISLNK(st.st_mode):
                out.append((rel, "l", perms, 0, os.readlink(full)))
            elif stat.S_ISDIR(st.st_mode):
                out.append((rel, "d", perms, 0, ""))
            elif stat.S_ISREG(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if key not in seen:
                    try:
                        seen[key] = _hash_file(full)
                    except PermissionError:
                        seen[key] = "unreadable"
                out.append((rel, "f", perms, st.st_size, seen[key]))
            else:  # devices, fifos, sockets: their kind is enough
                kind = "c" if stat.S_ISCHR(st.st_mode) else "b" if stat.S_ISBLK(st.st_mode) else "p"
                out.append((rel, kind, perms, 0, ""))
    return out


def digest_of(entries: list[tuple[str, str, str, int, str]]) -> str:
    h = hashlib.sha256()
    for e in entries:
        h.update("\t".join(map(str, e)).encode("utf-8", "surrogateescape") + b"\n")
    return "sha256:" + h.hexdigest()


def _packages(root: Path) -> dict[str, str]:
    admindir = root / "var" / "lib" / "dpkg"
    if not admindir.is_dir() or not shutil.which("dpkg-query"):
        return {}
    r = subprocess.run(
        ["dpkg-query", f"--admindir={admindir}", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"],
        capture_output=True,
        text=True,
    )
    pkgs = {}
    for line in r.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2].startswith("ii"):
            pkgs[parts[0]] = parts[1]
    return pkgs


def write_manifest(image: Path, *, name: str, profile: Any = None, build_seconds: float | None = None,
                   mode: str | None = None, source: str = "mmdebstrap", recipe: str | None = None,
                   extra: dict | None = None) -> dict:  # fmt: skip
    """Hash the tree under ``image/root`` and write ``manifest.json`` and ``files.tsv`` (with the
    keys of ``extra`` added: a container image's ``oci`` record)."""
    root = image / "root"
    entries = tree_entries(root)
    with open(image / FILES, "w", encoding="utf-8", errors="surrogateescape") as f:
        for e in entries:
            f.write("\t".join(map(str, e)) + "\n")
    manifest = {
        "schema": SCHEMA,
        "name": name,
        "profile": getattr(profile, "name", profile),
        "description": getattr(profile, "description", ""),
        "suite": getattr(profile, "suite", None),
        "recipe": recipe,  # build.recipe_digest of the profile it was built from
        "source": source,
        "build_mode": mode,
        "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "build_seconds": round(build_seconds, 1) if build_seconds is not None else None,
        "packages": _packages(root),
        "file_count": len(entries),
        "size_bytes": sum(e[3] for e in entries),
        "digest": digest_of(entries),
        **(extra or {}),
    }
    (image / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def read_manifest(image: Path) -> dict:
    try:
        return json.loads((image / MANIFEST).read_text())
    except FileNotFoundError:
        raise RootfsError(
            f"{image} has no {MANIFEST}: not a sandboxlite image (or an interrupted build)",
            hint=f"remove it (sandboxlite rootfs rm {image.name}) and build or import it again",
        ) from None
    except json.JSONDecodeError as e:
        raise RootfsError(f"{image / MANIFEST} is corrupt: {e}", hint=f"sandboxlite rootfs rm {image.name}") from None


@dataclass
class Verification:
    ok: bool
    expected: str
    actual: str
    changed: list[str]
    added: list[str]
    removed: list[str]


def verify_tree(image: Path) -> Verification:
    """Recompute the digest and compare it, file by file, with the recorded one."""
    manifest = read_manifest(image)
    entries = tree_entries(image / "root")
    actual = digest_of(entries)
    recorded: dict[str, str] = {}
    try:
        with open(image / FILES, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                path, rest = line.rstrip("\n").split("\t", 1)
                recorded[path] = rest
    except FileNotFoundError:
        pass
    now = {e[0]: "\t".join(map(str, e[1:])) for e in entries}
    changed = sorted(p for p in now.keys() & recorded.keys() if now[p] != recorded[p])
    added = sorted(now.keys() - recorded.keys())
    removed = sorted(recorded.keys() - now.keys())
    return Verification(actual == manifest["digest"], manifest["digest"], actual, changed, added, removed)


def extract(tarball: Path, dest: Path) -> None:
    """Unpack a rootfs tarball: as root with its owners, otherwise owned by the caller (no devices)."""
    dest.mkdir(parents=True, exist_ok=True)
    argv = ["tar", "-C", str(dest), "-x", "-p", "--numeric-owner", "--exclude=./dev/*", "-f", str(tarball)]
    if str(tarball).endswith((".zst", ".zstd")):
        argv.insert(1, "--zstd")
    if os.geteuid() != 0:
        argv.append("--no-same-owner")
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RootfsError(f"could not unpack {tarball}: {r.stderr.strip()[-2000:]}", hint="is the file complete?")


def give_to_sandbox_user(root: Path) -> None:
    """As root, hand the tree to the uid sandboxes run as: overlayfs can only copy up files
    that uid owns, so a copy-on-write root needs it (inside, they show as root's)."""
    if os.geteuid() != 0:
        return  # a user's own build or import is already owned by that user
    from ..isolation.identity import run_as

    ids = run_as()
    assert ids is not None
    uid, gid = ids
    os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


def remove_tree(path: Path) -> None:
    """rm -rf that also copes with read-only directories inside the tree."""
    if not os.path.lexists(path):
        return

    def fix(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), 0o755)
            os.chmod(p, 0o755) if os.path.isdir(p) and not os.path.islink(p) else None
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=fix)
