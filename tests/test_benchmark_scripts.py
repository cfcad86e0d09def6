"""The scripts under ``benchmarks/`` run as ``python benchmarks/X.py``, which puts their folder
first on ``sys.path`` (https://docs.python.org/3/library/sys_path_init.html): no file there may
share its name with a module the scripts or their libraries import."""

from __future__ import annotations

import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def _importable_names() -> set[str]:
    """Top-level names importable without ``benchmarks/``: the standard library, the
    repository's packages and folders, and every installed distribution's modules."""
    paths = [p for p in sys.path if Path(p or ".").resolve() != BENCHMARKS]
    installed = {m.name for m in pkgutil.iter_modules(paths)}
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    return set(sys.stdlib_module_names) | set(sys.builtin_module_names) | installed | folders


def test_no_benchmark_shadows_a_module():
    clashes = sorted({p.stem for p in BENCHMARKS.glob("*.py")} & _importable_names())
    assert not clashes, f"benchmarks/ files that shadow a module when run as scripts: {clashes}"
