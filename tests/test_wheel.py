"""The wheel a user installs: built as ``python -m build`` builds it, it holds every file of
the package (the compiled kernels' source ``kernels.cc`` included: the first CPU training
run compiles it) and nothing else, the ``keras-electra`` command, and the version that
``keras-electra --version`` prints, which ``CITATION.cff`` and ``CHANGELOG.md`` name too.

The build runs on a copy of the source tree (it writes ``build/`` and ``*.egg-info`` next to
its input) without isolation, from the installed setuptools. Installing the wheel into a
fresh virtual environment downloads TensorFlow, too slow for the suite: done by hand
(docs/development.md, "Releasing").
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import keras_electra

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "keras_electra"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("build", reason="the dev extra installs build: pip install -e '.[dev]'")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(PACKAGE, source / PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (built,) = dist.glob("*.whl")
    assert [p.name for p in dist.glob("*.tar.gz")] == [f"keras_electra-{_version()}.tar.gz"]
    return built


def _version() -> str:
    return keras_electra.__version__


def test_the_wheel_holds_the_package_its_data_and_the_command(wheel):
    assert wheel.name == f"keras_electra-{_version()}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"keras_electra-{_version()}.dist-info"
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        metadata = archive.read(f"{info}/METADATA").decode()
    package = {
        p.relative_to(REPO).as_posix()
        for p in PACKAGE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert "keras_electra/kernels/kernels.cc" in package
    assert sorted(package - names) == []  # every module and data file the package reads
    assert sorted(n for n in names - package if not n.startswith(f"{info}/")) == []
    assert re.search(r"^keras-electra = keras_electra\.cli:main$", entry_points, re.M)
    assert f"\nVersion: {_version()}\n" in metadata
    assert "\nRequires-Dist: h5py" in metadata


def test_one_version_everywhere():
    citation = (REPO / "CITATION.cff").read_text(encoding="utf-8")
    assert f"\nversion: {_version()}\n" in citation
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.findall(r"^## (\S+)", changelog, re.M)[0] == _version()
    for module in ("keras_electra.cli", "keras_electra"):  # python -m keras_electra too
        done = subprocess.run(
            [sys.executable, "-m", module, "--version"],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "KERAS_BACKEND": "jax"},
        )
        assert done.returncode == 0 and done.stdout == f"keras-electra {_version()}\n", done
