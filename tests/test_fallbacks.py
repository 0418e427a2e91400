"""No silent fallbacks: what rootfs="auto" and cgroups="auto" chose, when it is the weaker thing,
is logged once (logger "sandboxlite"), and rootfs="auto" follows SANDBOXLITE_ROOTFS and the only
built image before it falls back to the host's /usr."""

from __future__ import annotations

import logging

from sandboxlite import Sandbox
from sandboxlite import images as rootfs
from sandboxlite.jail.host import Host


def _image(home, name):
    d = home / "rootfs" / name
    (d / "root").mkdir(parents=True)
    (d / "manifest.json").write_text("{}")


def test_auto_follows_the_variable_the_default_and_the_only_image(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOXLITE_HOME", str(tmp_path))
    monkeypatch.delenv("SANDBOXLITE_ROOTFS", raising=False)
    name, why = rootfs.auto_choice()
    assert name == "host" and "no image is built" in why
    _image(tmp_path, "lean")
    assert rootfs.auto_choice() == ("lean", "the only built image")
    _image(tmp_path, "other")
    name, why = rootfs.auto_choice()
    assert name == "host" and "several images are built (lean, other)" in why and "SANDBOXLITE_ROOTFS" in why
    _image(tmp_path, rootfs.DEFAULT_PROFILE)
    assert rootfs.auto_choice() == (rootfs.DEFAULT_PROFILE, "the default image")
    monkeypatch.setenv("SANDBOXLITE_ROOTFS", "lean")
    assert rootfs.auto_choice() == ("lean", "SANDBOXLITE_ROOTFS")


def test_falling_back_is_logged_once_per_host(host_dir, monkeypatch, caplog):
    """The host's /usr for rootfs="auto", and rlimits for cgroups="auto": each said once."""
    monkeypatch.setenv("SANDBOXLITE_HOME", str(host_dir))  # no image here
    monkeypatch.setenv("SANDBOXLITE_CGROUP_PARENT", str(host_dir / "not-a-cgroup"))  # no cgroups here
    monkeypatch.delenv("SANDBOXLITE_ROOTFS", raising=False)
    host = Host.detect()
    with caplog.at_level(logging.WARNING, logger="sandboxlite"):
        for _ in range(3):
            with Sandbox(host=host) as sb:
                assert sb.exec("true").exit_code == 0
                assert sb.info["rootfs_kind"] == "host" and sb.info["cgroup"] is None
    said = [r.getMessage() for r in caplog.records if r.name == "sandboxlite"]
    assert len(said) == 2, said
    assert any("rootfs='auto'" in m and "no image is built" in m for m in said)
    assert any("cgroups='auto'" in m and "rlimits" in m for m in said)
