"""The image recipes as data (rootfs/ at the repository's root), and a wheel that carries them.

The wheel test builds sandboxlite's wheel from this checkout, installs it into a clean virtualenv
with only the core dependencies, and runs `sandboxlite rootfs build lean` and `sandboxlite exec`
from there (cwd outside the checkout): the recipes and the executor's C sources must come from
the wheel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sandboxlite.errors import RootfsError
from sandboxlite.images import build, recipes

ROOT = Path(__file__).resolve().parents[1]


def test_the_checkout_reads_the_recipes_at_the_top():
    assert recipes.recipes_dir() == ROOT / "rootfs"
    assert recipes.profile_names() == ["full", "lean", "science", "trixie"]
    assert set(recipes.hooks()) == {p.stem for p in (ROOT / "rootfs" / "hooks").glob("*.sh")}


def test_comments_are_not_part_of_a_hook_or_the_excludes():
    for name, text in recipes.hooks().items():
        assert text and not any(line.startswith("#") for line in text.splitlines()), name
    assert (ROOT / "rootfs" / "hooks" / "no-setuid.sh").read_text().startswith("#")
    excludes = recipes.dpkg_excludes()
    assert "path-exclude=/usr/share/doc/*" in excludes and not any(x.startswith("#") for x in excludes)
    argv = build.mmdebstrap_argv(build.load_profile("lean"), "-", mode="root")
    assert f"--customize-hook={recipes.hooks()['no-setuid']}" in argv
    assert "--dpkgopt=path-include=/usr/share/doc/*/copyright" in argv


def test_a_profile_name_is_not_a_path_and_bad_json_is_said(tmp_path, monkeypatch):
    for bad in ("../lean", "/etc/passwd", ".hidden", "huge"):
        with pytest.raises(RootfsError, match="no rootfs profile named"):
            recipes.profile_data(bad)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "hooks").mkdir()
    (tmp_path / "profiles" / "broken.json").write_text("{not json")
    (tmp_path / "profiles" / "list.json").write_text("[]")
    monkeypatch.setattr(recipes, "recipes_dir", lambda: tmp_path)
    with pytest.raises(RootfsError, match="not valid JSON"):
        recipes.profile_data("broken")
    with pytest.raises(RootfsError, match="expected an object"):
        recipes.profile_data("list")


def test_missing_recipes_say_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setattr(recipes, "HERE", tmp_path / "sandboxlite" / "images")
    with pytest.raises(RootfsError, match="recipes are missing") as e:
        recipes.recipes_dir()
    assert "reinstall" in (e.value.hint or "")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                       capture_output=True, text=True, cwd=out)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    (whl,) = out.glob("sandboxlite-*.whl")
    return whl


def test_the_wheel_carries_the_recipes_and_the_executor(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in (ROOT / "rootfs").rglob("*"):
        if path.is_file() and not path.name.startswith("README"):
            assert f"sandboxlite/images/recipes/{path.relative_to(ROOT / 'rootfs')}" in names, path
    executor = {p.name for p in (ROOT / "sandboxlite" / "executor").iterdir() if p.suffix in (".c", ".h")}
    assert executor and {f"sandboxlite/executor/{n}" for n in executor} <= names
    assert not any(n.startswith(("tests/", "bench/", "tools/", "rootfs/")) for n in names)


@pytest.mark.slow
def test_an_installed_wheel_builds_an_image_and_runs_a_command(wheel, tmp_path, host_dir_factory):
    """A clean virtualenv, the wheel and its declared (core) dependencies only; the build and the
    command run from outside the checkout, into a SANDBOXLITE_HOME of their own (one the uid
    sandboxes run as can reach, as a root caller's must be)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    home = host_dir_factory("sandboxlite-wheel-home-")
    env["SANDBOXLITE_HOME"] = str(home)
    where = subprocess.run([str(py), "-c", "import sandboxlite, sandboxlite.images.recipes as r; "
                            "print(sandboxlite.__file__); print(r.recipes_dir())"], capture_output=True, text=True,
                           cwd=tmp_path, env=env, check=True).stdout.split()  # fmt: skip
    assert all(w.startswith(str(venv)) for w in where), where
    built = subprocess.run([str(venv / "bin" / "sandboxlite"), "rootfs", "build", "lean"], capture_output=True,
                           text=True, cwd=tmp_path, env=env, timeout=900)  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    image = Path(built.stdout.strip().splitlines()[-1])
    assert image.is_relative_to(home)
    manifest = json.loads((image / "manifest.json").read_text())
    assert manifest["recipe"] == build.recipe_digest(build.load_profile("lean"))  # the same recipe as the checkout's
    r = subprocess.run([str(venv / "bin" / "sandboxlite"), "exec", "--rootfs", "lean", "--",
                        "python3", "-c", "import numpy; print(6*7)"], capture_output=True, text=True, cwd=tmp_path,
                       env=env, timeout=300)  # fmt: skip
    assert (r.returncode, r.stdout) == (0, "42\n"), r.stderr[-3000:]
