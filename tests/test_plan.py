"""Every decision of a start is a pure function of the config and the Host: tested without bwrap or root."""

import dataclasses

import pytest

from sandboxlite import SandboxConfig, SetupError
from sandboxlite.images import RootfsPlan
from sandboxlite.isolation.bwrap import BwrapInfo
from sandboxlite.isolation.cgroups import Support
from sandboxlite.jail.host import Host
from sandboxlite.jail.plan import CTRL_FD, EXECUTOR_FD, NETNS_FD, SECCOMP_FD, plan, rlimit_args

INFO = BwrapInfo(path="/usr/bin/bwrap", version=(0, 8, 0), disable_userns=True)
USER = Host(bwrap=INFO, euid=1000)  # a plain user: no launcher, no cgroups, bwrap makes /dev and the netns
ROOT = Host(bwrap=INFO, euid=0, run_as=(999, 998), cgroups=Support("v1", "/sys/fs/cgroup"),
            launcher=("/cache/sandboxlite-launcher", ("sandboxlite-launcher",)), dev="/dev/.sandboxlite-1",
            dev_reason="")  # fmt: skip
PLAN = RootfsPlan(
    name="test",
    kind="dir",
    path="/img",
    binds=(("/img/usr", "/usr"), ("/img/etc", "/etc")),
    symlinks=(("usr/bin", "/bin"),),
)
EXE = f"/proc/self/fd/{EXECUTOR_FD}"


def jail(host=USER, owner=None, **kw):
    return plan(SandboxConfig(**kw), host, PLAN, image_owner=owner)


def argv(**kw):
    return list(jail(**kw).argv)


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
    assert f"seccomp={SECCOMP_FD}" in a[a.index(EXE) :]
    assert "--share-net" not in a
    assert "--die-with-parent" not in a  # the executor dies on control-socket EOF instead (thread-safe)


def test_network_host_keeps_the_net_namespace():
    a = argv(network="host")
    assert "--unshare-net" not in a
    assert "--unshare-user" in a and "--unshare-pid" in a
    assert jail(network="host").netns == "host"


def test_rootfs_read_only_and_jail_mounts():
    a = argv()
    assert ["--ro-bind", "/img/usr", "/usr"] == a[a.index("/img/usr") - 1 : a.index("/img/usr") + 2]
    assert pairs(a, "--symlink") == ["usr/bin"]
    assert "--tmpfs" not in a  # the executor mounts /tmp, /testbed, /root, /dev/shm in each generation
    assert pairs(a, "--dir") == ["/.sl/gen", "/.sl/fork", "/tmp", "/root", "/testbed"]  # their mount points
    assert pairs(a, "--proc") == ["/proc"] and pairs(a, "--dev") == ["/dev"]
    # /proc/sys read-only right after /proc (bwrap itself leaves it writable)
    i = a.index("--proc")
    assert a[i + 2 : i + 5] == ["--ro-bind", "/proc/sys", "/proc/sys"]
    # the root is made read-only by the executor, in the bind of it that commands see
    assert "--remount-ro" not in a and "rootro=1" in a[a.index(EXE) :]
    assert "--bind" not in a  # nothing writable from the host by default


def test_tmpfs_sizes_follow_limits():
    a = argv(limits={"tmp_mb": 5, "testbed_mb": 7})
    tail = a[a.index(EXE) :]
    assert f"tmp={5 << 20}" in tail and f"testbed={7 << 20}" in tail


def test_copy_on_write_root_over_an_image_owned_by_the_jails_uid(tmp_path):
    p = jail(owner=1000, mounts=[f"{tmp_path}:/data:ro"], limits={"overlay_mb": 3})
    a = list(p.argv)
    assert p.copy_on_write and p.cow_reason == ""
    assert ["--ro-bind", "/img", "/.sl/lower"] == a[a.index("/.sl/lower") - 2 : a.index("/.sl/lower") + 1]
    assert "/img/usr" not in a  # the image is reached through the overlay only
    tail = a[a.index(EXE) :]
    assert {"lower=/.sl/lower", f"upper={3 << 20}", "bind=/data"} <= set(tail)
    assert "rootro=1" not in tail


def test_no_copy_on_write_and_why():
    p = jail(owner=0)  # the image belongs to someone else: overlayfs could not copy its files up
    assert not p.copy_on_write and "owned by uid 0, not by the sandbox's host uid 1000" in p.cow_reason
    assert "/img/usr" in p.argv and "/.sl/lower" not in p.argv
    h = plan(SandboxConfig(), USER, RootfsPlan("host", "host", "/", (("/usr", "/usr"),), ()))
    assert not h.copy_on_write and "rootfs 'host'" in h.cow_reason
    # a root caller's images belong to the uid its jails run as
    assert jail(host=ROOT, owner=999).copy_on_write and not jail(host=ROOT, owner=0).copy_on_write


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
    p = jail(limits={"cpu_s": 9, "fsize_mb": 1, "pids": 50, "nofile": 64, "memory_mb": 100})
    tail = list(p.argv[p.argv.index(EXE) :])
    assert tail[1:4] == [f"ctrl={CTRL_FD}", f"exe={EXECUTOR_FD}", f"seccomp={SECCOMP_FD}"]
    assert {"cpu=9", f"as={100 << 20}", f"fsize={1 << 20}", "nproc=50", "nofile=64", "core=0"} <= set(tail[4:])
    assert dict(p.fds) == {"ctrl": CTRL_FD, "executor": EXECUTOR_FD, "seccomp": SECCOMP_FD, "info": 6}
    assert list(p.argv[p.argv.index("--info-fd") + 1 :][:1]) == ["6"]


def test_rlimits_defer_to_cgroups_and_lift_with_none():
    c = SandboxConfig(limits={"memory_mb": 100, "cpu_s": None, "fsize_mb": None})
    r = rlimit_args(c, memory_by_cgroup=True, nproc_enforced=False)
    assert not any(x.startswith(("as=", "nproc=")) for x in r)
    assert "cpu=inf" in r and "fsize=inf" in r
    # with a cgroup, memory is the cgroup's limit, not RLIMIT_AS
    assert not any(x.startswith("as=") for x in jail(host=ROOT, owner=999).argv)


def test_old_bwrap_without_features():
    old = Host(bwrap=BwrapInfo(path="/b", version=(0, 8, 0), disable_userns=False), euid=1000)
    a = jail(host=old).argv
    assert "--disable-userns" not in a and a[0] == "/b"


def test_argv_is_a_list_of_strings():
    assert all(isinstance(x, str) for x in argv(env={"A": "b c; rm -rf /"}))
    assert not any("rm -rf" in x for x in argv(env={"A": "rm -rf"}))  # env goes over the socket, not argv


def test_network_is_left_to_the_launcher_only_when_it_joins_a_namespace():
    """A root caller's launcher may join a namespace made ahead of time (netns.py): no --unshare-net then."""
    from sandboxlite.network.netns import NetnsPool

    def never() -> int:  # a plan makes no namespace: launch() is handed one
        raise AssertionError("plan() made a namespace")

    host = dataclasses.replace(ROOT, netns=NetnsPool(4, make=never))
    config = SandboxConfig()
    own = plan(config, host, PLAN, image_owner=999, netns_ready=False)
    joined = plan(config, host, PLAN, image_owner=999, netns_ready=True)
    assert own.netns == "bwrap" and joined.netns == "pooled"
    assert "--unshare-net" in own.argv and "--unshare-net" not in joined.argv
    assert [a for a in own.argv if a != "--unshare-net"] == list(joined.argv)  # nothing else changes
    assert ("netns", NETNS_FD) in joined.fds and "netns" not in dict(own.fds)
    # the descriptor is the launcher's (it joins, then drops to the jails' uid), not bwrap's
    assert joined.spawn_argv()[:5] == ["sandboxlite-launcher", "-n", str(NETNS_FD), "999", "998"]
    assert own.spawn_argv()[:3] == ["sandboxlite-launcher", "999", "998"]
    # a plain user cannot join a namespace it does not own: bwrap makes one
    assert plan(config, USER, PLAN, netns_ready=True).netns == "bwrap"
    assert plan(SandboxConfig(network="host"), host, PLAN, netns_ready=True).netns == "host"


def test_a_root_caller_is_launched_as_its_unprivileged_uid_and_joins_cgroup_v1_groups_early():
    p = jail(host=ROOT, owner=999)
    assert p.program == "/cache/sandboxlite-launcher" and p.run_as == (999, 998)
    assert p.cgroup.mode == "launcher" and p.cgroup.kind == "v1"
    a = p.spawn_argv(["/cg/pids/x/tasks", "/cg/memory/x/tasks"])
    assert a[:7] == ["sandboxlite-launcher", "-t", "/cg/pids/x/tasks", "-t", "/cg/memory/x/tasks", "999", "998"]
    assert a[7:] == list(p.argv) and p.argv[0] == "/usr/bin/bwrap"
    # a plain user runs bwrap itself
    u = jail()
    assert u.program == "/usr/bin/bwrap" and u.spawn_argv() == list(u.argv) and u.run_as is None


def test_cgroup_modes_and_why():
    assert jail().cgroup.mode == "off" and jail().cgroup.reason == "not detected"
    assert jail(host=ROOT, owner=999, cgroups="off").cgroup.mode == "off"
    v2 = Host(bwrap=INFO, euid=1000, cgroups=Support("v2", "/sys/fs/cgroup/user/sl"))
    c = jail(host=v2, limits={"memory_mb": 64, "pids": 20}).cgroup
    assert (c.mode, c.kind, c.memory_bytes, c.pids) == ("attach", "v2", 64 << 20, 20)
    with pytest.raises(SetupError, match="cgroups are required but unavailable: not detected"):
        jail(cgroups="required")


def test_a_ready_made_dev_for_root_callers_only():
    r = jail(host=ROOT, owner=999)
    assert r.dev == "/dev/.sandboxlite-1" and pairs(list(r.argv), "--dev-bind") == ["/dev/.sandboxlite-1"]
    assert "devdir=1" in r.generation and "--dev" not in r.argv
    u = jail()
    assert u.dev is None and pairs(list(u.argv), "--dev") == ["/dev"] and "devdir=1" not in u.generation


def test_a_root_caller_without_the_launcher_is_refused():
    broken = Host(bwrap=INFO, euid=0, run_as=(999, 998))
    with pytest.raises(SetupError, match="launcher"):
        jail(host=broken)


def test_a_sandbox_of_its_own_uid_gets_its_image_idmapped_and_its_own_dev():
    """slots.py / idmap.py: the jail runs as the slot's uid; the image (owned by run_as) is a tree
    the launcher attaches at the stage directory, which bwrap binds as the overlay's lower layer."""
    from sandboxlite.jail.plan import LOWER_FD, Slot

    host = dataclasses.replace(ROOT, stage="/cache/stage")
    slot = Slot(uid=1879048200, gid=998, dev="/dev/.sandboxlite-u1879048200", idmapped=True)
    p = plan(SandboxConfig(), host, PLAN, image_owner=999, slot=slot)
    assert p.run_as == (1879048200, 998) and p.idmapped and p.copy_on_write and p.cow_reason == ""
    assert ("lower", LOWER_FD) in p.fds
    a = list(p.argv)
    assert ["--ro-bind", "/cache/stage", "/.sl/lower"] == a[a.index("/.sl/lower") - 2 : a.index("/.sl/lower") + 1]
    assert "/img" not in a  # bwrap never binds the image itself
    assert pairs(a, "--dev-bind") == ["/dev/.sandboxlite-u1879048200"]
    spawn = p.spawn_argv(["/cg/tasks"])
    assert spawn[:4] == ["sandboxlite-launcher", "-m", str(LOWER_FD), "/cache/stage"]  # before anything else
    assert spawn[4:6] == ["-t", "/cg/tasks"] and spawn[6:8] == ["1879048200", "998"]


def test_an_image_of_another_owner_is_not_idmapped_and_has_no_copy_on_write():
    from sandboxlite.jail.plan import Slot

    host = dataclasses.replace(ROOT, stage="/cache/stage")
    slot = Slot(uid=1879048200, gid=998, dev=None, idmapped=True)
    p = plan(SandboxConfig(), host, PLAN, image_owner=1234, slot=slot)
    assert not p.idmapped and not p.copy_on_write and "owned by uid 1234" in p.cow_reason
    assert "-m" not in p.spawn_argv() and p.run_as == (1879048200, 998)
    assert pairs(list(p.argv), "--ro-bind")[:2] == ["/img/usr", "/img/etc"]
    # without a slot (uids shared, SANDBOXLITE_UID_RANGE=off): as before, run_as owns the image
    shared = plan(SandboxConfig(), host, PLAN, image_owner=999)
    assert shared.run_as == (999, 998) and shared.copy_on_write and not shared.idmapped


def test_hostname_none_sets_none():
    """Where sethostname is refused (podman's default profile), hostname=None leaves it alone."""
    assert "--hostname" not in argv(hostname=None)
    assert pairs(argv(), "--hostname") == ["sandbox"]
    from sandboxlite.config import base_env

    assert "HOSTNAME" not in base_env(SandboxConfig(hostname=None))
    with pytest.raises(Exception, match="1-64 characters or None"):
        SandboxConfig(hostname="")


def test_an_allowlist_keeps_a_namespace_of_its_own_and_trusts_the_host_s_cas(tmp_path):
    """network="allow:..." is network "none" plus the proxy: the same namespace decisions (pooled
    or bwrap's, never the host's), and the host's CA bundle over the image's, read-only."""
    from sandboxlite.jail.plan import SANDBOX_CA_BUNDLE
    from sandboxlite.network.netns import NetnsPool

    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    host = dataclasses.replace(ROOT, netns=NetnsPool(4, make=lambda: 0), ca_bundle=str(ca))
    allow = SandboxConfig(network="allow:pypi")
    assert plan(allow, host, PLAN, image_owner=999, netns_ready=True).netns == "pooled"
    own = plan(allow, dataclasses.replace(USER, ca_bundle=str(ca)), PLAN)
    assert own.netns == "bwrap" and "--unshare-net" in own.argv
    a = list(own.argv)
    i = a.index(str(ca))
    assert a[i - 1 : i + 2] == ["--ro-bind", str(ca), SANDBOX_CA_BUNDLE]
    # without an allowlist, or without a bundle on the host, or with the caller's own: none of ours
    for config, h in ((SandboxConfig(), dataclasses.replace(USER, ca_bundle=str(ca))), (allow, USER),
                      (allow.replace(mounts=[f"{tmp_path}:{SANDBOX_CA_BUNDLE}"]),
                       dataclasses.replace(USER, ca_bundle=str(ca)))):  # fmt: skip
        assert str(ca) not in plan(config, h, PLAN).argv


def test_an_allowlist_or_exposed_ports_are_refused_without_a_network_namespace():
    from sandboxlite.errors import ConfigError
    from sandboxlite.jail.plan import check_landlock

    with pytest.raises(ConfigError, match="no network namespace of its own"):
        check_landlock(SandboxConfig(network="allow:pypi", rootfs="host"))
    check_landlock(SandboxConfig(network="host", rootfs="host"))
