"""The built wheel plans on its own: build it, install it into a fresh virtual environment
outside the checkout, and run ``ppplan plan`` and ``ppplan validate`` from a directory
outside the checkout.

Getting torch/ortools/numpy into the venv: ``--system-site-packages`` reuses the ones
already installed. The same site-packages may hold this project's editable install,
whose ``.pth`` adds a meta-path finder mapping ``planner``/``solvers``/``profiler`` to
the checkout. That finder is appended after the normal path finder, so the venv's own
copy wins; the test does not rely on it and checks that every package and the package
data are read from inside the venv.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SOURCES = ("pyproject.toml", "README.md", "planner", "solvers", "profiler")
_MODEL = "llama3-8b"
"""The quickest shipped model to plan (dense, 32 layers: about 3 s on one core)."""

pytestmark = pytest.mark.slow


def _run(cmd: list[str], *, cwd: Path, timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(map(str, cmd))} -> {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def _copy_sources(dest: Path) -> Path:
    """What the wheel is built from, copied so the build leaves nothing in the checkout."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    dest.mkdir()
    for name in _SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    return dest


def _build_wheel(tmp: Path) -> Path:
    src, dist = _copy_sources(tmp / "src"), tmp / "dist"
    # With setuptools already here, build without an isolated env (no download, seconds).
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    _run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", *isolation, "-w", str(dist)], cwd=tmp)
    (wheel,) = dist.glob("ppplan-*.whl")
    return wheel


def test_wheel_installs_and_plans_outside_the_checkout(tmp_path: Path) -> None:
    assert not tmp_path.is_relative_to(ROOT)
    wheel = _build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    for data in ("planner/data/models/llama3-8b.json", "planner/data/clusters/llama3-8b.yaml",
                 "planner/data/schemas/plan.schema.json"):
        assert data in names, f"{data} missing from the wheel"
    assert not [n for n in names if n.startswith(("tests/", "examples/", "benchmarks/"))]

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], cwd=tmp_path)
    py, ppplan = venv / "bin" / "python", venv / "bin" / "ppplan"
    # --ignore-installed: the editable install seen through the system site-packages must
    # not count as "already satisfied"; --no-index: the dependencies come from that site.
    _run([str(py), "-m", "pip", "install", "--no-deps", "--ignore-installed", "--no-index", str(wheel)],
         cwd=tmp_path)

    work = tmp_path / "work"
    work.mkdir()
    where = _run([str(py), "-c", "import importlib.resources as r, planner, solvers, profiler, planner.cli;"
                  "print(planner.__file__, solvers.__file__, profiler.__file__, planner.cli.__file__,"
                  " r.files('planner.data').joinpath('models', 'llama3-8b.json'), sep='\\n')"], cwd=work)
    for line in where.split():
        assert Path(line).resolve().is_relative_to(venv.resolve()), f"{line} is not the wheel's copy"

    _run([str(ppplan), "plan", _MODEL, "--out", "plan.json"], cwd=work)
    assert (work / "plan.json").stat().st_size > 0
    assert "valid" in _run([str(ppplan), "validate", "plan.json"], cwd=work)
