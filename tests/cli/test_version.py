"""``warpspec --version`` and ``warpspec.__version__``: one version, written once in the package and read by the
build (pyproject.toml's dynamic version) and by the command."""

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

import warpspec
from warpspec.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_a_release_number():
    packaging_version = pytest.importorskip("packaging.version")
    assert str(packaging_version.Version(warpspec.__version__)) == warpspec.__version__


def test_version_option_through_main(capsys):
    assert main(["--version"]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == (f"warpspec {warpspec.__version__}\n", "")


def test_version_option_as_a_process():
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "warpspec.cli", "--version"], capture_output=True, text=True,
                            env=environment, timeout=120)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"warpspec {warpspec.__version__}\n", "")


def test_pyproject_reads_the_version_from_the_package():
    tomllib = pytest.importorskip("tomllib")
    expand = pytest.importorskip("setuptools.config.expand")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    attribute = pyproject["tool"]["setuptools"]["dynamic"]["version"]
    assert attribute == {"attr": "warpspec.__version__"}
    # As the build reads it: from the source, without importing the package (and its dependencies).
    assert expand.read_attr(attribute["attr"], package_dir={"": "src"}, root_dir=ROOT) == warpspec.__version__


def test_installed_metadata_has_the_packages_version():
    try:
        installed = importlib.metadata.version("warpspec")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("warpspec is not installed (run from a checkout with PYTHONPATH=src)")
    assert installed == warpspec.__version__
