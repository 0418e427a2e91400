"""Snapshots: a sandbox's filesystem state, kept to start other sandboxes from.

``Sandbox.snapshot()`` asks the executor to copy the generation's writes (the copy-on-write
layer's upper over the image, and the writable places /testbed, /tmp, and /root without a
copy-on-write root) into a staging directory of the ``Store`` while every process of the
sandbox is stopped.  The store then checks the copy (``verify_tree``: directories, regular
files, symlinks, fifos and overlay whiteouts only; no setuid or setgid bit; one owner), gives it
to the store's owner, names it by its content (``digest_tree``: sha256 over every entry's path,
kind, mode, times, xattrs and data, and the parent's name) and moves it to ``layers/NAME``.

A snapshot is a *layer*: a sandbox started from snapshot S2 whose parent is S1 sees
``S2 over S1 over the image`` (overlayfs lower layers, read-only; the sandbox writes in a fresh
tmpfs above them).  Nothing is copied per start: every sandbox of a snapshot shares its layers.

Processes and memory are not part of a snapshot: a sandbox started from one boots fresh (its
files as they were, nothing running).  Saving processes needs checkpoint/restore (CRIU), which
needs privileges and kernel features a sandbox host cannot assume, and restores state (sockets,
pids, timers) that a fresh episode should not inherit anyway.

Why a snapshot copies (its cost grows with the data written: 1.5 to 1.8 ms per MB here, the sha256
a third of it): a snapshot outlives the sandbox and can start any sandbox, later, in another
process or on another machine (export); the sandbox's writes live in a size-capped tmpfs of its
jail, which goes with it.  So the writes are copied into the store, on the host's side of the
namespaces, checked and named there.  ``fork(n, share=True)`` (share.py) copies nothing: the
tmpfs itself becomes the children's bottom layer, passed between the jails as detached mounts,
and the forked sandbox starts over on it (nothing may write there any more).

Layout of a store (``paths.snapshots()``, tmpfs-backed by default)::

    layers/NAME/{root,testbed,tmp,home}/   bound read-only into the jails that use it
    meta/NAME.json                         parent, depth, size, files, created
    locks/NAME.lock                        a shared flock per live sandbox using NAME
    staging/                               copies being made

The jails see ``layers/`` only, and only their executor does: commands live in the generation's
own root, where it is not mounted.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, SnapshotError
from ..executor.protocol import is_layer_name

log = logging.getLogger(__name__)

PLACES = ("root", "testbed", "tmp", "home")
OPAQUE = "user.overlay.opaque"  # overlayfs's mark (userxattr mode) of a directory that hides what is below it  # the layer's directories (the executor's snapshots.c)
FORMAT = 1
DEFAULT_MAX_DEPTH = 16  # layers a sandbox may stack (the executor takes up to protocol.MAX_LAYERS)
DEFAULT_MAX_BYTES = 4 << 30  # one snapshot's size cap (Store(max_bytes=), or snapshot(max_bytes=))


@dataclass(frozen=True)
class Snapshot:
    """An immutable, content-addressed filesystem state (see the module's docstring).

    ``name``: the sha256 of its content and parent; ``ancestors``: the snapshots it was taken on
    top of, its parent first (none: over the image); ``size``: bytes of file data in this layer;
    ``files``: its entries; ``created``: a Unix time.
    """

    name: str
    ancestors: tuple[str, ...]
    size: int
    files: int
    created: float
    rootfs: str = ""  # the image it was taken over (a snapshot starts only over the same one)
    cow: bool = False  # it holds changes to the image (a copy-on-write layer): needs a copy-on-write root
    store: "Store" = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    # taken by fork() for its children alone: removed when the last sandbox using it closes, unless
    # snapshot() of the same state kept it since (the store's metadata says; this is a hint)
    transient: bool = field(default=False, compare=False)
    # layers (a top run of ``layers``) that are not in the store: another sandbox's writes shared by
    # fork(share=True), attached in the jails that use them (share.py)
    shared: frozenset = field(default=frozenset(), compare=False)

    @property
    def parent(self) -> str | None:
        """The snapshot this one was taken on top of (None: over the image)."""
        return self.ancestors[0] if self.ancestors else None

    @property
    def depth(self) -> int:
        """Layers from the image: 1 for a snapshot taken over the image."""
        return len(self.ancestors) + 1

    @property
    def layers(self) -> tuple[str, ...]:
        """Its layers, top first: this snapshot's name, then its ancestors'."""
        return (self.name, *self.ancestors)

    @property
    def store_layers(self) -> tuple[str, ...]:
        """Its layers that are in the store (all of them unless ``shared``), top first."""
        return tuple(n for n in self.layers if n not in self.shared)

    @property
    def stored(self) -> "Snapshot | None":
        """The part of its stack that is in the store (itself unless ``shared``; None: the image)."""
        if not self.shared:
            return self
        below = self.store_layers
        return self.store.meta(below[0]) if below else None

    def flatten(self) -> "Snapshot":
        """The same state as one layer without a parent (for stacks near the depth limit): ``flatten``."""
        return flatten(self)

    def __str__(self) -> str:
        return self.name[:12]


def verify_tree(top: str, owner: int | None = None) -> tuple[int, int]:
    """Check a layer's tree: (bytes of data, entries), or SnapshotError naming what is wrong.

    Only the place directories at the top; inside them directories, regular files (one link
    each), symlinks, fifos and whiteouts (0:0 character devices); no setuid or setgid bit;
    every entry owned by ``owner`` when given.  Symlinks are never followed."""
    _, size, files = scan_tree(top, owner=owner)
    return size, files


def digest_tree(top: str, parent: str | None, image: str) -> str:
    """The content name of a layer: sha256 over the image it is over, its parent's name and every
    entry (path, kind, permission bits, mtime, user xattrs, link target or data), in path order.
    Checks it too."""
    name, _, _ = scan_tree(top, parent=parent, image=image, digest=True)
    assert name is not None
    return name


def scan_tree(top: str, *, owner: int | None = None, chown: tuple[int, int] | None = None, digest: bool = False,
              parent: str | None = None, image: str = "") -> tuple[str | None, int, int]:  # fmt: skip
    """One walk over a layer's tree (symlinks never followed): give each entry to ``chown`` first
    when given, check it (``verify_tree``), and hash it when ``digest`` (``digest_tree``).
    (name or None, bytes of data, entries)."""
    head = f"sandboxlite-snapshot {FORMAT}\nimage {image}\nparent {parent or '-'}\n"
    h = hashlib.sha256(head.encode("utf-8", "surrogateescape")) if digest else None
    size = files = 0
    top_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if chown is not None:
            os.chown(top_fd, *chown)
        for name in os.listdir(top_fd):
            if name not in PLACES:
                raise SnapshotError(f"snapshot {top}: unexpected entry {name!r} at the top (only {', '.join(PLACES)})")
            if not stat.S_ISDIR(os.stat(name, dir_fd=top_fd, follow_symlinks=False).st_mode):
                raise SnapshotError(f"snapshot {top}: {name} is not a directory")
    finally:
        os.close(top_fd)
    cut = len(top.rstrip("/")) + 1
    for dirpath, dirnames, filenames, dfd in os.fwalk(top, follow_symlinks=False):
        dirnames.sort()  # the walk's order, and so the digest, is the paths' order
        prefix = dirpath[cut:] + "/" if len(dirpath) >= cut else ""
        for name in sorted(dirnames + filenames):
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if chown is not None and (st.st_uid, st.st_gid) != chown:  # (most are the owner's already)
                os.chown(name, *chown, dir_fd=dfd, follow_symlinks=False)
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            rel = prefix + name
            size += _check_entry(top, rel, st, owner)
            files += 1
            if h is not None:
                _hash_entry(h, rel, name, dfd, st)
    return (h.hexdigest() if h is not None else None), size, files


def _check_entry(top: str, rel: str, st: os.stat_result, owner: int | None) -> int:
    """SnapshotError when the entry may not be in a snapshot; else its bytes of data."""
    mode = st.st_mode
    if owner is not None and st.st_uid != owner:
        raise SnapshotError(f"snapshot {top}: {rel} is owned by uid {st.st_uid}, not {owner}")
    if mode & (stat.S_ISUID | stat.S_ISGID):
        raise SnapshotError(f"snapshot {top}: {rel} has a setuid or setgid bit")
    if stat.S_ISREG(mode):
        if st.st_nlink != 1:
            raise SnapshotError(f"snapshot {top}: {rel} is a hard link ({st.st_nlink} names)")
        return st.st_size
    if stat.S_ISCHR(mode):
        if st.st_rdev != 0:
            raise SnapshotError(f"snapshot {top}: {rel} is a device file")
    elif not (stat.S_ISDIR(mode) or stat.S_ISLNK(mode) or stat.S_ISFIFO(mode)):
        raise SnapshotError(f"snapshot {top}: {rel} is a {_kind(mode)}")
    return 0


def _hash_entry(h, rel: str, name: str, dfd: int, st: os.stat_result) -> None:
    line = f"{rel}\0{stat.S_IFMT(st.st_mode):o}\0{stat.S_IMODE(st.st_mode):o}\0{st.st_mtime_ns}\0"
    parts = [line.encode("utf-8", "surrogateescape")]  # (one update per entry: the same bytes, fewer calls)
    if stat.S_ISLNK(st.st_mode):
        parts.append(os.readlink(name, dir_fd=dfd).encode("utf-8", "surrogateescape"))
    elif stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if stat.S_ISDIR(st.st_mode) else 0)
        fd = os.open(name, flags, dir_fd=dfd)
        try:
            parts += [b"x" + k.encode() + b"=" + v + b"\0" for k, v in user_xattrs(fd)]
            if stat.S_ISREG(st.st_mode):
                parts.append(b"%d\0" % st.st_size)
                parts.append(_file_digest(fd, rel, st.st_size))
        finally:
            os.close(fd)
    parts.append(b"\n")
    h.update(b"".join(parts))


def _file_digest(fd: int, rel: str, size: int) -> bytes:
    """The sha256 of a file of ``size`` bytes; SnapshotError when it is not that size as it is read."""
    data = hashlib.sha256()
    got = 0  # (reads sized by the stat: a 1 MiB buffer per small file costs an mmap)
    while True:
        want = min(size - got, 1 << 20) + 1
        chunk = os.read(fd, want)
        data.update(chunk)
        got += len(chunk)
        if not chunk or (got == size and len(chunk) < want):  # (short of what was asked at the end: no more)
            break
    if got != size:
        raise SnapshotError(f"snapshot: {rel} changed size while it was hashed")
    return data.digest()


def _kind(mode: int) -> str:
    return ("block device" if stat.S_ISBLK(mode) else "socket" if stat.S_ISSOCK(mode) else
            "device file" if stat.S_ISCHR(mode) else "special file")  # fmt: skip


# ---- flattening ------------------------------------------------------------------------------------


def flatten(snap: Snapshot) -> Snapshot:
    """One layer showing what ``snap``'s stack shows, kept as a snapshot of its own (no parent).

    overlayfs's rules: a whiteout hides what is below it, an opaque directory hides what was below
    it, and a directory over a whiteout or a file hides it too (it becomes opaque)."""
    store = snap.store
    if not snap.ancestors:
        return snap
    staged = store.staging(None)
    try:
        for name in reversed(snap.layers):  # the bottom first: each layer goes over what is there
            layer = Path(store.layers_dir) / name
            for place in PLACES:
                if (layer / place).is_dir():
                    (Path(staged) / place).mkdir(exist_ok=True)
                    _merge(str(layer / place), str(Path(staged) / place))
    except BaseException:
        remove_tree(staged)
        raise
    return store.commit(staged, parent=None, rootfs=snap.rootfs)


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _remove(path: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        remove_tree(path)
    else:
        os.unlink(path)


def _merge(src: str, dst: str) -> None:
    """Put the layer directory ``src`` over the merged directory ``dst`` (both the store's own)."""
    for entry in os.scandir(src):
        s, d = entry.path, os.path.join(dst, entry.name)
        st, dt = entry.stat(follow_symlinks=False), _lstat(d)
        if stat.S_ISDIR(st.st_mode):
            xattrs = user_xattrs(s)
            opaque = dict(xattrs).get(OPAQUE) == b"y"
            if dt is not None and (opaque or not stat.S_ISDIR(dt.st_mode)):
                # below it was hidden: by its own mark, or by a whiteout or a file it replaced
                opaque = True
                _remove(d, dt)
                dt = None
            if dt is None:
                os.mkdir(d, 0o700)
            else:
                os.chmod(d, 0o700)  # a lower layer's mode may lack write: the final one is set below
            for k, v in xattrs:
                os.setxattr(d, k, v, follow_symlinks=False)
            if opaque:
                os.setxattr(d, OPAQUE, b"y", follow_symlinks=False)
            _merge(s, d)
            os.chmod(d, stat.S_IMODE(st.st_mode))
            os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))
            continue
        if dt is not None:
            _remove(d, dt)
        _copy_entry(s, d, st)


def _copy_entry(s: str, d: str, st: os.stat_result) -> None:
    mode = st.st_mode
    if stat.S_ISREG(mode):
        with open(s, "rb", opener=nofollow) as fi, open(d, "xb") as fo:
            shutil.copyfileobj(fi, fo, 1 << 20)
        _copy_xattrs(s, d)
        os.chmod(d, stat.S_IMODE(mode))
    elif stat.S_ISLNK(mode):
        os.symlink(os.readlink(s), d)
    elif _is_whiteout(st):
        os.mknod(d, stat.S_IFCHR, 0)
    elif stat.S_ISFIFO(mode):
        os.mkfifo(d, stat.S_IMODE(mode))
    else:
        raise SnapshotError(f"{s}: a {stat.filemode(mode)} entry cannot be in a snapshot")
    os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def nofollow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)


def user_xattrs(target: str | int) -> list[tuple[str, bytes]]:
    """The user.* xattrs of a path (a symlink itself, never what it points at) or a descriptor."""
    kw = {} if isinstance(target, int) else {"follow_symlinks": False}
    try:
        names = os.listxattr(target, **kw)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return []
        raise
    return sorted((k, os.getxattr(target, k, **kw)) for k in names if k.startswith("user."))


def _copy_xattrs(s: str, d: str) -> None:
    for k, v in user_xattrs(s):
        os.setxattr(d, k, v, follow_symlinks=False)


def take(jail, store: Store, base: Snapshot | None, max_bytes: int | None = None, *,
         transient: bool = False) -> Snapshot:  # fmt: skip
    """A snapshot of the live ``jail`` (launch.Jail) whose generation was built over ``base``
    (see ``Sandbox.snapshot``); ``transient``: fork()'s, see ``Store.prune``.  Shared layers
    under it (fork(share=True)'s, not in the store) are copied into the store first, each a layer."""
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0):
        raise ConfigError("max_bytes", f"must be a number of bytes (an int >= 0), got {max_bytes!r}")
    cap = max_bytes if max_bytes is not None else store.max_bytes
    parent = base
    if base is not None and base.shared:
        parent = base.stored
        for layer in reversed([n for n in base.layers if n in base.shared]):  # the bottom first
            parent = _copy_in(jail, store, parent, cap, transient, layer)
    return _copy_in(jail, store, parent, cap, transient, None)


def _copy_in(jail, store: Store, parent: Snapshot | None, cap: int, transient: bool, layer: str | None) -> Snapshot:
    """The executor's copy (of the generation's writes, or of the shared ``layer``), kept over ``parent``."""
    uid = jail.plan.run_as
    staged = store.staging(uid if uid is not None and store.owner is not None and uid != store.owner else None)
    try:
        fd = os.open(staged, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            jail.take_snapshot(fd, cap, layer=layer)
        finally:
            os.close(fd)
    except BaseException:
        remove_tree(staged)
        raise
    return store.commit(staged, parent=parent, rootfs=image_of(jail.plan.rootfs), transient=transient)


def let_go(snap: Snapshot | None, keep: Snapshot | None = None) -> None:
    """A sandbox no longer uses ``snap`` (it now uses ``keep``): when fork() took ``snap`` for its
    children alone, remove it (and transient layers under it) once nothing uses it (``Store.prune``)."""
    if snap is not None and snap.transient and snap.store is not None and (keep is None or keep.name != snap.name):
        try:
            snap.store.prune(snap)
        except (SnapshotError, OSError) as e:  # housekeeping: a close must not fail for it (snapshot prune)
            log.warning("snapshot %s was left in %s: %s", snap, snap.store.root, e)


def image_of(rootfs) -> str:
    """What a snapshot records of the image it was taken over: its name (or directory), or "host"."""
    return rootfs.name if rootfs.kind == "dir" else "host"


class Store:
    """Where snapshots live (see the module's docstring): take, look up, list, remove.

    ``owner``: (uid, gid) the layers belong to (a root caller's run_as user, whose files the
    idmapped view shows as each sandbox's own); None: the caller's.  Thread-safe."""

    def __init__(self, root: str | os.PathLike, *, owner: tuple[int, int] | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = DEFAULT_MAX_DEPTH) -> None:  # fmt: skip
        self.root = Path(root)
        self.owner = owner
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self._lock = threading.Lock()
        for sub in ("layers", "meta", "locks", "staging"):
            d = self.root / sub
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            if owner is not None and sub in ("layers", "staging"):
                os.chown(d, owner[0], owner[1])
        if owner is not None:
            os.chown(self.root, owner[0], owner[1])
        os.chmod(self.root, 0o700)

    @property
    def layers_dir(self) -> str:
        """The directory bound into jails (read-only) at ``/.sl/snaps``."""
        return str(self.root / "layers")

    # -- taking ----------------------------------------------------------------------------------
    def staging(self, writer: tuple[int, int] | None) -> str:
        """A new empty directory the executor copies into (owned by ``writer``, the sandbox's
        host uid, when that is not ours)."""
        path = tempfile.mkdtemp(prefix="take-", dir=self.root / "staging")
        if writer is not None:
            os.chown(path, writer[0], writer[1])
        return path

    def commit(self, staged: str, *, parent: Snapshot | None, rootfs: str, transient: bool = False) -> Snapshot:
        """Check the copy in ``staged``, name it by its content and keep it (a copy with the name
        of one kept already is dropped: the same state).  An empty copy over ``parent`` is no
        change: ``parent`` itself (no empty layer stacked on it).  SnapshotError past the depth limit."""
        try:
            name, size, files = scan_tree(staged, owner=self.owner[0] if self.owner is not None else os.geteuid(),
                                          chown=self.owner, digest=True,
                                          parent=parent.name if parent is not None else None, image=rootfs)  # fmt: skip
            assert name is not None
            if files == 0 and parent is not None:
                return parent
            depth = (parent.depth if parent is not None else 0) + 1
            if depth > self.max_depth:
                raise SnapshotError(f"a snapshot of this sandbox would be layer {depth}, over the limit of "
                                    f"{self.max_depth} stacked layers",
                                    hint="flatten the one it started from: Sandbox(snapshot=snap.flatten())")  # fmt: skip
            cow = os.path.isdir(os.path.join(staged, "root")) or (parent is not None and parent.cow)
            snap = Snapshot(name, parent.layers if parent is not None else (), size, files, time.time(), rootfs, cow,
                            self, transient)  # fmt: skip
            return self.adopt(staged, snap)
        finally:
            if os.path.exists(staged):
                remove_tree(staged)

    def adopt(self, tree: str, snap: Snapshot) -> Snapshot:
        """Keep the checked, named layer ``tree`` (moved into the store) as ``snap``; when one of that
        name is kept already, that one (``tree`` is left to the caller), kept for good from now on
        unless ``snap`` is transient too."""
        with self._lock:
            if (self.root / "layers" / snap.name).exists():
                kept = self.meta(snap.name)
                if not kept.transient or snap.transient:
                    return kept
                fd = self._open_lock(snap.name)
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH)  # (waits while another process prunes it)
                    if (self.root / "layers" / snap.name).exists():
                        kept = dataclasses.replace(kept, transient=False)
                        self._write_meta(kept)
                        return kept
                finally:
                    os.close(fd)
            os.chmod(tree, 0o755)
            os.rename(tree, self.root / "layers" / snap.name)
            self._write_meta(snap)
        return snap

    def _write_meta(self, snap: Snapshot) -> None:
        doc = {"format": FORMAT, "name": snap.name, "parent": snap.parent, "ancestors": list(snap.ancestors),
               "size": snap.size, "files": snap.files, "created": snap.created, "rootfs": snap.rootfs, "cow": snap.cow,
               "transient": snap.transient}  # fmt: skip
        tmp = self.root / "meta" / f".{snap.name}.json.tmp"
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, self.root / "meta" / f"{snap.name}.json")

    # -- looking up ------------------------------------------------------------------------------
    def meta(self, name: str) -> Snapshot:
        """The snapshot called ``name`` (a unique prefix of at least 4 digits will do)."""
        if not (isinstance(name, str) and is_layer_name(name)):
            raise SnapshotError(f"{name!r} is no snapshot name (lowercase hex digits)", hint="sandboxlite snapshot list")
        path = self.root / "meta" / f"{name}.json"
        if not path.is_file():
            matches = [p for p in (self.root / "meta").glob(f"{name}*.json")] if len(name) >= 4 else []
            if len(matches) != 1:
                raise SnapshotError(f"no snapshot {name!r} in {self.root}" if not matches else
                                    f"{name!r} names {len(matches)} snapshots: give more digits",
                                    hint="sandboxlite snapshot list")  # fmt: skip
            path = matches[0]
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:  # removed just now (fork()'s, by the last of its sandboxes)
            raise SnapshotError(f"no snapshot {name!r} in {self.root}", hint="sandboxlite snapshot list") from None
        ancestors = doc.get("ancestors")
        if ancestors is None:  # kept before the metadata listed them: follow the parents
            ancestors = (doc["parent"], *self.meta(doc["parent"]).ancestors) if doc.get("parent") else ()
        return Snapshot(doc["name"], tuple(ancestors), doc["size"], doc["files"], doc["created"],
                        doc.get("rootfs", ""), bool(doc.get("cow")), self, bool(doc.get("transient")))  # fmt: skip

    def list(self) -> list[Snapshot]:
        """Every snapshot kept here, oldest first."""
        out = []
        for p in (self.root / "meta").glob("*.json"):
            try:
                out.append(self.meta(p.stem))
            except SnapshotError:  # removed while we listed (another sandbox or process pruned it)
                continue
        return sorted(out, key=lambda s: s.created)

    # -- in use ----------------------------------------------------------------------------------
    def _lock_path(self, name: str) -> Path:
        return self.root / "locks" / f"{name}.lock"

    def _open_lock(self, name: str) -> int:
        """The lock file of ``name`` (made when missing), for flock: shared while used, exclusive to remove."""
        return os.open(self._lock_path(name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def hold(self, snap: Snapshot) -> list[int]:
        """Mark the snapshot's layers in use (a shared lock each, until ``release``): ``remove``
        refuses them meanwhile, from any process."""
        fds: list[int] = []
        try:
            for name in snap.layers:
                if name in snap.shared:  # (not the store's: the jails that use it hold it)
                    continue
                if not (self.root / "layers" / name).is_dir():
                    raise SnapshotError(f"snapshot {name[:12]} is not in {self.root} (removed?)",
                                        hint="take it again, or import it (sandboxlite snapshot import)")  # fmt: skip
                fd = self._open_lock(name)
                fds.append(fd)
                fcntl.flock(fd, fcntl.LOCK_SH)
                if not (self.root / "layers" / name).is_dir():  # removed while we waited for the lock
                    raise SnapshotError(f"snapshot {name[:12]} was removed from {self.root} as it was being used",
                                        hint="take it again, or keep it with snapshot() before fork()")  # fmt: skip
        except BaseException:
            release(fds)
            raise
        return fds

    def in_use(self, name: str) -> bool:
        """Does a live sandbox (of any process) use the layer ``name``?"""
        try:
            fd = os.open(self._lock_path(name), os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def remove(self, name: str, *, missing_ok: bool = False) -> None:
        """Remove a snapshot: SnapshotError when a live sandbox uses it, or another snapshot
        was taken on top of it (or, unless ``missing_ok``, there is none of that name)."""
        try:
            snap = self.meta(name)
        except SnapshotError:
            if missing_ok and not (self.root / "meta" / f"{name}.json").exists():
                return
            raise
        children = [s.name[:12] for s in self.list() if s.parent == snap.name]
        if children:
            raise SnapshotError(f"snapshot {snap} has snapshots taken on top of it ({', '.join(children)})",
                                hint="remove those first")  # fmt: skip
        if not self._drop(snap.name, only_transient=False):
            raise SnapshotError(f"snapshot {snap} is in use by a live sandbox",
                                hint="close the sandboxes started from it first")  # fmt: skip

    def prune(self, snap: Snapshot | None = None) -> list[str]:
        """Remove the transient snapshots (fork()'s) nothing uses any more: ``snap`` and the
        transient layers under it, top first, up to the first still needed (in use, with another
        snapshot on top, or kept for good); without ``snap``, every one in the store (after a crash,
        say: ``sandboxlite snapshot prune``).  Returns the names removed."""
        removed: list[str] = []
        if snap is None:
            for s in sorted(self.list(), key=lambda s: -s.depth):  # (the top ones first)
                if s.transient and s.name not in removed:
                    removed += self.prune(s)
            return removed
        for name in snap.layers:
            try:
                kept = self.meta(name)
            except SnapshotError:  # removed already (another sandbox of it closed at the same time)
                continue
            if not kept.transient or any(s.parent == name for s in self.list()):
                break
            if not self._drop(name, only_transient=True):
                break
            removed.append(name)
        return removed

    def _drop(self, name: str, *, only_transient: bool) -> bool:
        """Delete the snapshot ``name`` unless a live sandbox holds it (False), or, with
        ``only_transient``, it is kept for good (False)."""
        meta, lock = self.root / "meta" / f"{name}.json", self._lock_path(name)
        with self._lock:  # (first: adopt() waits for the file lock while it holds this one)
            if not meta.exists():  # removed already
                return True
            fd = self._open_lock(name)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False
                if meta.exists():
                    if only_transient and not json.loads(meta.read_text()).get("transient"):
                        return False
                    meta.unlink()
                    remove_tree(str(self.root / "layers" / name))
                lock.unlink(missing_ok=True)  # (also one made again here after another process removed it)
                return True
            finally:
                os.close(fd)


def release(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
    fds.clear()


def remove_tree(path: str) -> None:
    """Remove a tree (the store's own: never through a symlink); directories made unwritable
    inside it are opened up first."""
    for _dirpath, dirnames, _f, dfd in os.fwalk(path, follow_symlinks=False):
        for d in dirnames:
            try:
                fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except OSError:  # a symlink (to a directory), or gone
                continue
            try:
                os.fchmod(fd, 0o700)
            except OSError:
                pass
            finally:
                os.close(fd)
    shutil.rmtree(path)
