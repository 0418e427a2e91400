"""The wheel carries the image recipes: ``rootfs/`` (profiles, hooks, dpkg excludes) is copied
into it as ``sandboxlite/images/recipes/`` (sandboxlite.images.recipes reads either place).
Everything else is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithRecipes(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads rootfs/ in the checkout
        src, dst = HERE / "rootfs", Path(self.build_lib) / "sandboxlite" / "images" / "recipes"
        if not (src / "profiles").is_dir():
            raise SystemExit(f"setup.py: {src}/profiles is missing: the wheel would build no image")
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("README*", "build", "__pycache__"))


setup(cmdclass={"build_py": BuildWithRecipes})
