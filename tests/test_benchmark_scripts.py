"""The scripts under ``benchmarks/`` run as the pages document them, ``python benchmarks/X.py``,
which puts their folder first on ``sys.path`` (https://docs.python.org/3/library/sys_path_init.html):
no file there shares its name with a module, none rewrites ``sys.path``, and each documented
script starts."""

from __future__ import annotations

import io
import pkgutil
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
ELSEWHERE: set[str] = set()
"""The overlap runtime's benchmark files, edited in another line of work: they still name
``sys.path`` and carry an issue tag."""


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


def _sys_path_uses(path: Path) -> list[int]:
    """Lines of ``path`` whose code (not strings or comments) names ``sys.path``."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
              if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)]
    return [a.start[0] for a, b, c in zip(tokens, tokens[1:], tokens[2:])
            if (a.string, b.string, c.string) == ("sys", ".", "path")]


def test_no_benchmark_rewrites_sys_path():
    """Scripts import the installed packages and their sibling modules as Python finds them."""
    uses = {p.name: _sys_path_uses(p) for p in sorted(BENCHMARKS.glob("*.py")) if p.name not in ELSEWHERE}
    bad = {name: lines for name, lines in uses.items() if lines}
    assert not bad, f"sys.path named in benchmarks/ (file: lines): {bad}"


def _documented_scripts() -> list[str]:
    """Every ``benchmarks/X.py`` a page or a claim's command runs."""
    texts = [p.read_text(encoding="utf-8") for p in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
                                                      *sorted(BENCHMARKS.glob("claim*.py")))]
    return sorted({m for t in texts for m in re.findall(r"python3? (benchmarks/\w+\.py)", t)})


@pytest.mark.parametrize("script", _documented_scripts())
def test_documented_benchmark_starts(script):
    """``python benchmarks/X.py --help`` from the checkout, as the pages run it."""
    assert (ROOT / script).exists(), f"{script} is documented but missing"
    done = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr[-2000:]


def test_no_issue_tags_in_benchmarks():
    """Comments and docstrings say what and why, not which tracker entry asked for it."""
    tagged = {p.name: [i + 1 for i, line in enumerate(p.read_text().splitlines())
                       if re.search(r"\bissues? \d+|\(#\d+\)", line, re.IGNORECASE)]
              for p in sorted(BENCHMARKS.glob("*.py")) if p.name not in ELSEWHERE}
    bad = {name: lines for name, lines in tagged.items() if lines}
    assert not bad, f"issue tags in benchmarks/ (file: lines): {bad}"


def test_frameworks_imports_a_megatron_lm_tree_without_sys_path(tmp_path):
    """``--megatron-lm DIR``: the tree's packages that no wheel has come from DIR, the
    installed ``megatron.core`` stays, and nothing else of DIR becomes importable."""
    (tmp_path / "megatron" / "training").mkdir(parents=True)
    (tmp_path / "megatron" / "legacy").mkdir()
    (tmp_path / "megatron" / "training" / "__init__.py").write_text("from megatron.legacy import LEGACY\n")
    (tmp_path / "megatron" / "training" / "arguments.py").write_text("")
    (tmp_path / "megatron" / "legacy" / "__init__.py").write_text("LEGACY = 1\n")
    (tmp_path / "megatron" / "core").mkdir()
    (tmp_path / "megatron" / "core" / "__init__.py").write_text("")
    (tmp_path / "elsewhere_in_the_tree.py").write_text("")
    probe = ("import importlib, sys\nfrom pathlib import Path\nfrom tests.benchmark_modules import load_benchmark\n"
             "frameworks = load_benchmark('frameworks')\n"
             f"with frameworks.megatron_lm_tree(Path({str(tmp_path)!r})):\n"
             "    arguments = importlib.import_module('megatron.training.arguments')\n"
             "    print(arguments.__file__, importlib.util.find_spec('megatron.core').origin)\n"
             f"    print(importlib.util.find_spec('elsewhere_in_the_tree'), {str(tmp_path)!r} not in sys.path)\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    tree_file, core_file, rest = *done.stdout.split()[:2], done.stdout.split()[2:]
    assert tree_file == str(tmp_path / "megatron" / "training" / "arguments.py")
    assert not core_file.startswith(str(tmp_path)) and rest == ["None", "True"], done.stdout
