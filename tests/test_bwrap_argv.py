"""The bwrap argv is a pure function of the config: tested without bwrap."""

import pytest

from sandboxlite import SandboxConfig
from sandboxlite.bwrap import BwrapInfo, JailFds, build_argv, rlimit_args
from sandboxlite.rootfs import RootfsPlan

INFO = BwrapInfo(path="/usr/bin/bwrap", version=(0, 8, 0), disable_userns=True)
FDS = JailFds(ctrl=7, executor=8, seccomp=9)
PLAN = RootfsPlan(
    name="test",
    kind="dir",
    path="/img",
    binds=(("/img/usr", "/usr"), ("/img/etc", "/etc")),
    symlinks=(("usr/bin", "/bin"),),
)


def argv(**kw):
    config = SandboxConfig(**kw)
    return build_argv(config, PLAN, FDS, INFO, rlimit_args(config, memory_by_cgroup=False, nproc_enforced=True))


def pairs(a, flag):
    return [a[i + 1] for i, x in enumerate(a) if x == flag]


def test_all_namespaces_unshared_and_the_executor_gets_the_filter():
    a = argv()
    for flag in ("--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                 "--unshare-cgroup", "--disable-userns", "--new-session", "--as-pid-1", "--clearenv"):
        assert flag in a, flag
    # the executor keeps capabilities inside the sandbox's user namespace (to build and reset
    # the filesystem); every command drops them and loads the seccomp filter it is handed
    assert pairs(a, "--cap-add") == ["ALL"]
    assert "--seccomp" not in a
    assert "seccomp=9" in a[a.index("/proc/self/fd/8") :]
    assert "--share-net" not in a
    assert "--die-with-parent" not in a  # the executor dies on control-socket EOF instead (thread-safe)


def test_network_host_keeps_the_net_namespace():
    a = argv(network="host")
    assert "--unshare-net" not in a
    assert "--unshare-user" in a and "--unshare-pid" in a


def test_rootfs_read_only_and_jail_mounts():
    a = argv()
    assert ["--ro-bind", "/img/usr", "/usr"] == a[a.index("/img/usr") - 1 : a.index("/img/usr") + 2]
    assert pairs(a, "--symlink") == ["usr/bin"]
    assert "--tmpfs" not in a  # the executor mounts /tmp, /testbed, /root, /dev/shm in each generation
    assert pairs(a, "--dir") == ["/.sl/gen", "/tmp", "/root", "/testbed"]  # their mount points
    assert pairs(a, "--proc") == ["/proc"] and pairs(a, "--dev") == ["/dev"]
    # /proc/sys read-only right after /proc (bwrap itself leaves it writable)
    i = a.index("--proc")
    assert a[i + 2 : i + 5] == ["--ro-bind", "/proc/sys", "/proc/sys"]
    # the root is made read-only by the executor, in the bind of it that commands see
    assert "--remount-ro" not in a and "rootro=1" in a[a.index("/proc/self/fd/8") :]
    assert "--bind" not in a  # nothing writable from the host by default


def test_tmpfs_sizes_follow_limits():
    a = argv(limits={"tmp_mb": 5, "testbed_mb": 7})
    tail = a[a.index("/proc/self/fd/8") :]
    assert f"tmp={5 << 20}" in tail and f"testbed={7 << 20}" in tail


def test_copy_on_write_root_over_an_image(tmp_path):
    config = SandboxConfig(mounts=[f"{tmp_path}:/data:ro"], limits={"overlay_mb": 3})
    a = build_argv(config, PLAN, FDS, INFO, [], lower="/img")
    assert ["--ro-bind", "/img", "/.sl/lower"] == a[a.index("/.sl/lower") - 2 : a.index("/.sl/lower") + 1]
    assert "/img/usr" not in a  # the image is reached through the overlay only
    tail = a[a.index("/proc/self/fd/8") :]
    assert {"lower=/.sl/lower", f"upper={3 << 20}", "bind=/data"} <= set(tail)


def test_caller_mounts_in_depth_order(tmp_path):
    a = argv(mounts=[f"{tmp_path}:/testbed/in/deep:ro", f"{tmp_path}:/testbed/out:rw", f"{tmp_path}:/data"])
    binds = [(a[i], a[i + 2]) for i, x in enumerate(a) if x in ("--bind", "--ro-bind") and a[i + 1] == str(tmp_path)]
    assert binds == [("--ro-bind", "/data"), ("--bind", "/testbed/out"), ("--ro-bind", "/testbed/in/deep")]


def test_testbed_mount_replaces_tmpfs(tmp_path):
    a = argv(mounts=[f"{tmp_path}:/testbed:rw"])
    assert "testbed=0" in a and "/testbed" not in pairs(a, "--dir")


@pytest.mark.parametrize("workdir, expect", [("/work", "wtmpfs"), ("/tmp/w", "mkdir"), ("/testbed/sub", "mkdir")])
def test_workdir_is_writable(workdir, expect):
    a = argv(workdir=workdir)
    assert f"{expect}={workdir}" in a
    assert (workdir in pairs(a, "--dir")) == (expect == "wtmpfs")  # a mount point on the read-only root


def test_executor_gets_descriptors_and_rlimits():
    a = argv(limits={"cpu_s": 9, "fsize_mb": 1, "pids": 50, "nofile": 64, "memory_mb": 100})
    tail = a[a.index("/proc/self/fd/8") :]
    assert tail[1:4] == ["ctrl=7", "exe=8", "seccomp=9"]
    assert {"cpu=9", f"as={100 << 20}", f"fsize={1 << 20}", "nproc=50", "nofile=64", "core=0"} <= set(tail[4:])


def test_rlimits_defer_to_cgroups_and_lift_with_none():
    c = SandboxConfig(limits={"memory_mb": 100, "cpu_s": None, "fsize_mb": None})
    r = rlimit_args(c, memory_by_cgroup=True, nproc_enforced=False)
    assert not any(x.startswith(("as=", "nproc=")) for x in r)
    assert "cpu=inf" in r and "fsize=inf" in r


def test_old_bwrap_without_features():
    info = BwrapInfo(path="/b", version=(0, 8, 0), disable_userns=False)
    config = SandboxConfig()
    a = build_argv(config, PLAN, FDS, info, [])
    assert "--disable-userns" not in a


def test_argv_is_a_list_of_strings():
    assert all(isinstance(x, str) for x in argv(env={"A": "b c; rm -rf /"}))
    assert not any("rm -rf" in x for x in argv(env={"A": "rm -rf"}))  # env goes over the socket, not argv


def test_network_is_left_to_the_launcher_only_when_it_joins_a_namespace():
    """A root caller's launcher may join a namespace made ahead of time (netns.py): no --unshare-net then."""
    config = SandboxConfig()
    own = build_argv(config, PLAN, FDS, INFO, [])
    joined = build_argv(config, PLAN, JailFds(ctrl=7, executor=8, seccomp=9, netns=6), INFO, [])
    host = build_argv(SandboxConfig(network="host"), PLAN, FDS, INFO, [])
    assert "--unshare-net" in own
    assert "--unshare-net" not in joined and "--unshare-net" not in host
    assert [a for a in own if a != "--unshare-net"] == joined  # nothing else changes
    assert "6" not in joined  # the descriptor is the launcher's, not bwrap's
