"""The layering rules of the package, checked on the source tree (AST, nothing is imported).

Rules (lower layers never import higher ones):
- ``planner.core`` imports neither torch nor ortools, nor ``planner`` outside core, nor
  ``solvers``/``profiler``: it is the vocabulary everyone shares.
- ``solvers`` never imports torch, ``profiler``, or ``planner`` outside core.
- ``profiler`` never imports ``solvers``.
- ``planner.export`` never imports the search (``solvers.partition``, ``solvers.joint``,
  ``solvers.schedule.search``: candidates, searches and their budgets, ``solvers.schedule.cpsat``,
  ``planner.planning``); the schedule families are allowed as the model of what a framework runs.
- ``solvers.partition`` never imports ``solvers.schedule``.
- ``planner.runtime`` needs torch and never imports ortools.

What a module "imports" is checked over the closure of what using it loads: every import
it names (at module level or inside a function; ``if TYPE_CHECKING:`` blocks excepted),
then, transitively, the imports those modules run when loaded (their module-level
imports and their parent packages' ``__init__``). A dependency's function-level imports
are that dependency's own business and are checked by its own rule.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("planner", "solvers", "profiler")


@dataclass(frozen=True, kw_only=True)
class Rule:
    """Modules under ``source`` must not (transitively) import anything under ``forbidden``."""

    source: str
    """Dotted package prefix the rule applies to."""
    forbidden: tuple[str, ...]
    """Dotted prefixes (internal or third-party) that must not be reached."""
    allowed: tuple[str, ...] = ()
    """Prefixes exempt from ``forbidden`` (e.g. ``planner.core`` inside ``planner``)."""
    why: str = ""
    """The rule in words, shown on failure."""


_SEARCH = ("solvers.partition", "solvers.joint", "solvers.schedule.search", "solvers.schedule.cpsat",
           "planner.planning")

RULES = (
    Rule(source="planner.core", forbidden=("torch", "ortools", "planner", "solvers", "profiler"),
         allowed=("planner.core",), why="planner/core is plain data: no torch, no ortools, nothing above it"),
    Rule(source="solvers", forbidden=("torch", "profiler", "planner"), allowed=("planner.core",),
         why="solvers/ use planner.core and ortools/numpy only"),
    Rule(source="profiler", forbidden=("solvers",), why="profiler/ never imports solvers/"),
    Rule(source="planner.export", forbidden=_SEARCH,
         why="exports read plans; schedule generators model a framework, the search is off limits"),
    Rule(source="solvers.partition", forbidden=("solvers.schedule",),
         why="the partition engines never import the schedule engines"),
    Rule(source="planner.runtime", forbidden=("ortools",), why="planner/runtime needs torch, never ortools"),
)


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


class _Imports(ast.NodeVisitor):
    """Imported names of one module: ``eager`` at module level, ``all`` anywhere."""

    def __init__(self, module: str, is_package: bool, known: set[str]) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.known = known
        self.depth = 0
        self.eager: set[str] = set()
        self.all: set[str] = set()

    def _add(self, names: Iterable[str]) -> None:
        for n in names:
            self.all.add(n)
            if self.depth == 0:
                self.eager.add(n)

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def _scoped(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _scoped

    def visit_Import(self, node: ast.Import) -> None:
        self._add(a.name for a in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            pkg = self.package.split(".")
            pkg = pkg[: len(pkg) - (node.level - 1)]
            base = ".".join(pkg + ([base] if base else []))
        # ``from a import b`` loads a, and a.b too when b is a submodule.
        self._add([base] + [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in self.known])


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


@dataclass(frozen=True, kw_only=True)
class ImportGraph:
    """Per internal module: the names it imports anywhere and those it imports on load."""

    named: dict[str, set[str]]
    """Module -> every name it imports (lazy ones included)."""
    on_load: dict[str, set[str]]
    """Module -> names imported when the module is loaded (module level + parent packages)."""

    def reach(self, module: str) -> dict[str, list[str]]:
        """Everything ``module`` may load, each with one import chain leading to it."""
        paths: dict[str, list[str]] = {}
        todo = [(n, [module]) for n in sorted(self.named[module])]
        while todo:
            name, chain = todo.pop()
            for target in _parents(name):
                if target in paths or target == module:
                    continue
                paths[target] = chain + [target]
                todo += [(n, paths[target]) for n in sorted(self.on_load.get(target, ()))]
        return paths


def build_graph(root: Path, packages: Iterable[str] = PACKAGES) -> ImportGraph:
    """Parse every ``.py`` file under ``root/<package>``."""
    files = {(_module_name(root, p)): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}
    known = set(files)
    named, eager = {}, {}
    for mod, path in files.items():
        v = _Imports(mod, path.name == "__init__.py", known)
        v.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        named[mod] = v.all
        parents = [p for p in _parents(mod)[:-1] if p in known]
        eager[mod] = v.eager | set(parents)
    for mod in named:  # a module's own parent packages load with it
        named[mod] |= {p for p in _parents(mod)[:-1] if p in known}
    return ImportGraph(named=named, on_load=eager)


def violations(graph: ImportGraph, rules: Iterable[Rule] = RULES) -> list[str]:
    """One line per (rule, module, forbidden import reached), with the import chain."""
    out = []
    for rule in rules:
        for mod in sorted(m for m in graph.named if _under(m, rule.source)):
            for target, chain in sorted(graph.reach(mod).items()):
                if any(_under(a, target) for a in (*rule.allowed, mod)):
                    continue  # a parent package of mod or of an allowed one (what it loads is followed)
                bad = any(_under(target, f) for f in rule.forbidden)
                if bad and not any(_under(target, a) for a in rule.allowed):
                    out.append(f"{mod} reaches {target} via {' -> '.join(chain)} ({rule.why})")
    return out


def test_source_tree_keeps_the_layering() -> None:
    found = violations(build_graph(ROOT))
    assert not found, "layering broken:\n" + "\n".join(found)


def test_every_rule_applies_to_something() -> None:
    """A rule whose source package vanished would pass silently; runtime is allowed to be absent."""
    graph = build_graph(ROOT)
    for rule in RULES:
        if rule.source != "planner.runtime":
            assert any(_under(m, rule.source) for m in graph.named), rule.source


# The checker, checked on a tiny fake tree.

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for d in list(tmp_path.rglob("*")):
        if d.is_dir() and not (d / "__init__.py").exists():
            (d / "__init__.py").write_text("")
    return tmp_path


_CLEAN = {
    "planner/core/model.py": "import numpy as np\nfrom planner.core import schedule\n",
    "planner/core/schedule.py": "from .model import np\n",
    "solvers/partition/ranges.py": "from planner.core.model import np\nimport ortools\n",
    "solvers/schedule/search/search.py": "from solvers.partition import ranges\n",
    "planner/export/megatron.py": "from solvers.schedule.families import generators\n",
    "solvers/schedule/families/generators.py": "from planner.core.schedule import *\n",
    "profiler/layers.py": "import torch\n",
}


def test_checker_passes_a_clean_tree(tmp_path: Path) -> None:
    assert violations(build_graph(_tree(tmp_path, _CLEAN))) == []


@pytest.mark.parametrize(("change", "expected"), [
    ({"planner/core/model.py": "import torch\n"}, "planner.core.model reaches torch"),
    ({"planner/core/model.py": "def f():\n    from ortools.sat.python import cp_model\n"},
     "planner.core.model reaches ortools"),
    ({"planner/core/schedule.py": "from ..export import megatron\n"}, "planner.core.schedule reaches planner.export"),
    # transitive: solvers -> profiler is wrong itself, and through it torch is reached
    ({"solvers/schedule/families/generators.py": "from profiler import layers\n"},
     "solvers.schedule.families.generators reaches torch via solvers.schedule.families.generators -> "
     "profiler.layers -> torch"),
    ({"profiler/layers.py": "import solvers.partition.ranges\n"}, "profiler.layers reaches solvers"),
    # export -> generators (allowed) -> search (forbidden): found through the allowed module
    ({"solvers/schedule/families/generators.py": "from solvers.schedule.search.search import *\n"},
     "planner.export.megatron reaches solvers.schedule.search.search via planner.export.megatron -> "
     "solvers.schedule.families.generators -> solvers.schedule.search.search"),
    ({"solvers/partition/ranges.py": "from solvers.schedule.families import generators\n"},
     "solvers.partition.ranges reaches solvers.schedule"),
    ({"planner/runtime/overlap.py": "import torch\nfrom solvers.partition import ranges\n"},
     "planner.runtime.overlap reaches ortools"),
    # a package __init__ runs when anything below it loads
    ({"solvers/schedule/__init__.py": "import torch\n"}, "solvers.schedule.families.generators reaches torch"),
])
def test_checker_finds_each_broken_rule(tmp_path: Path, change: dict[str, str], expected: str) -> None:
    found = violations(build_graph(_tree(tmp_path, {**_CLEAN, **change})))
    assert any(line.startswith(expected) for line in found), found


def test_type_checking_imports_and_lazy_imports_of_dependencies_are_not_followed(tmp_path: Path) -> None:
    """Annotations-only imports load nothing; a dependency's own lazy import is its rule's business."""
    files = {**_CLEAN,
             "planner/core/model.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n",
             "planner/export/megatron.py": "from planner.core import model\n",
             "planner/core/__init__.py": "def f():\n    import planner.planning\n"}
    found = violations(build_graph(_tree(tmp_path, files)))
    assert found == ["planner.core reaches planner.planning via planner.core -> planner.planning "
                     "(planner/core is plain data: no torch, no ortools, nothing above it)"]
