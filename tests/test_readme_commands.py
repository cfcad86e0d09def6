"""Every shell command in README.md's ```bash blocks runs as written and exits 0.

The install commands of the first block are what ``.ci/run`` runs (a test installing torch
would not be a unit test): the test checks that ``.ci/run`` installs the same packages and
contains the README's test command verbatim, and runs the rest of each line (the install
line's ``ppplan plan``). Every other command runs in a scratch folder that links the
repository's files, so what it writes (``plan.json``) lands there, with the claims
runner's own folder and environment (``benchmarks/claims.py``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.benchmark_modules import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"


def bash_blocks(text: str) -> list[list[str]]:
    """The command lines of each ```bash block (comments and blank lines dropped)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    return [[line.strip() for line in b.splitlines() if line.strip() and not line.strip().startswith("#")]
            for b in blocks]


def split_line(line: str) -> tuple[list[str], list[str]]:
    """(install commands, the others) of one ``a && b && c`` line."""
    parts = [p.strip() for p in line.split("&&")]
    return [p for p in parts if p.startswith("pip install")], [p for p in parts if not p.startswith("pip install")]


def _commands() -> list[str]:
    return [c for block in bash_blocks(README.read_text(encoding="utf-8")) for line in block
            for c in split_line(line)[1]]


def test_readme_has_the_two_blocks_it_documents():
    blocks = bash_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 2 and len(blocks[0]) == 2, blocks
    installs, rest = split_line(blocks[0][1])
    assert installs and rest == [c for c in rest if "pytest" in c], blocks[0]


def test_ci_runs_the_readme_install_and_test_commands():
    """``.ci/run`` installs what the first block installs and runs its test command verbatim."""
    ci = CI_RUN.read_text(encoding="utf-8")
    ci_installs = " ".join(line for line in ci.splitlines() if "pip install" in line)
    for line in bash_blocks(README.read_text(encoding="utf-8"))[0]:
        installs, _ = split_line(line)
        for cmd in installs:
            for package in shlex.split(cmd)[2:]:
                if package != "-e":
                    assert package in shlex.split(ci_installs) + ["."], f".ci/run does not install {package!r}"
    test_command = split_line(bash_blocks(README.read_text(encoding="utf-8"))[0][1])[1][0]
    assert test_command in ci, f".ci/run lacks the README's test command {test_command!r}"


@pytest.mark.parametrize("command", [c for c in _commands() if "pytest" not in c])
def test_readme_command_runs(command):
    """Each non-install, non-test command of the README's bash blocks exits 0 and, where it
    plans, writes its plan."""
    claims = load_benchmark("claims")
    run = claims.run_command(command, timeout=600)
    assert run.rc == 0, f"{command!r} exited {run.rc}: {run.stderr.strip()[-2000:]}"
    if command.startswith("ppplan plan"):
        assert "plan.json" in run.files, f"{command!r} wrote {sorted(run.files)}"
