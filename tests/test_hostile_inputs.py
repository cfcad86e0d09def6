"""Hand-made hostile inputs through every verb and input type (the inputs: ``hostile_rows``).

The contract: exit 2, one ``error: ...`` line on stderr naming the field and the fix, no
traceback, no output file, the inputs unchanged, and (for the inputs that once hung or
grew without bound) an answer within seconds; a stop signal exits 128 + signal with one
line and leaves no child process. The per-(verb, input type) counts in docs/reliability.md
come from here: set ``PPPLAN_HOSTILE_REPORT=path`` and ``test_write_hostile_report`` writes
them as JSON.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hostile_rows import ATTACKS, HOSTILE_ROWS, MATRIX, PAIRS, SHIPPED_PLAN, bomb, text

from planner.core.paths import CLUSTERS_DIR

_COUNTS: dict[tuple[str, str], list[int]] = {}
"""(verb, input type) -> [hostile inputs tried, inputs that met the contract]."""


@pytest.fixture(scope="module")
def good() -> dict[str, Any]:
    """Valid inputs to spoil: the shipped plan, an analytical cost table, a cluster, configs."""
    from planner.api import resolve_cluster
    from planner.core.costs_io import costs_to_dict
    from planner.core.hf_config import load_model
    from profiler.analytical import analytical_costs

    spec = load_model("llama3-8b")
    return {"plan": json.loads(SHIPPED_PLAN.read_text()),
            "costs": costs_to_dict(analytical_costs(spec, resolve_cluster(spec, None).with_recompute("none"))),
            "cluster": yaml.safe_load((CLUSTERS_DIR / "llama3-8b.yaml").read_text())}


def _regular_files(folder: Path) -> dict[Path, bytes]:
    """Every regular file under ``folder`` and its bytes (FIFOs are not opened)."""
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.mark.parametrize("verb, kind, build, pattern", [r[1:] for r in HOSTILE_ROWS],
                         ids=[f"{r[1]}-{r[2]}-{r[0]}" for r in HOSTILE_ROWS])
def test_hostile_input_meets_the_contract(ppplan, tmp_path, good, verb, kind, build, pattern):
    _meets_contract(ppplan, tmp_path, verb, kind, build(tmp_path, good), pattern)


def _meets_contract(ppplan, tmp_path: Path, verb: str, kind: str, argv: list[str], pattern: str) -> None:
    before = _regular_files(tmp_path)
    started = time.monotonic()
    result = ppplan(*verb.split()[:1], *argv)
    seconds = time.monotonic() - started
    lines = result.err.strip().splitlines()
    problems = [what for what, bad in (
        (f"exit {result.code}", result.code != 2),
        ("not one error line", len(lines) != 1 or not lines[0].startswith("error: ")),
        ("traceback", "Traceback" in result.err or "internal error" in result.err),
        ("pattern", not lines or not re.search(pattern, lines[0])),
        ("output written", any((tmp_path / n).exists() for n in ("out.json", "out.csv", "plan.json", "profile.json",
                                                                  "replay.json")) and kind != "--out"),
        ("input changed", _regular_files(tmp_path) != before),
        (f"took {seconds:.1f} s", seconds > 30),
    ) if bad]
    _count(verb, kind, not problems)
    assert not problems, (problems, result.err[:400])
    assert os.path.exists("/dev/null") and not Path("/dev/null").is_file()



@pytest.mark.parametrize("attack, verb, kind", MATRIX, ids=[f"{v}-{k}-{a}" for a, v, k in MATRIX])
def test_every_input_is_read_guarded(ppplan, tmp_path, attack, verb, kind):
    """[Note: input matrix]: one attack on the file of one (verb, input type)."""
    if attack == "alias-bomb":
        path, pattern = text(tmp_path, "in.yaml", bomb()), r"uses a YAML alias"
    else:
        make, pattern = ATTACKS[attack]
        path = make(tmp_path, "trace" in kind)
    _meets_contract(ppplan, tmp_path, verb, kind, PAIRS[(verb, kind)](path), pattern)


def _count(verb: str, kind: str, met: bool) -> None:
    counts = _COUNTS.setdefault((verb, kind), [0, 0])
    counts[0] += 1
    counts[1] += met


def _one_error_line(run: subprocess.CompletedProcess, pattern: str) -> bool:
    return run.returncode == 2 and run.stderr.count("\n") == 1 and re.match(f"error: .*{pattern}", run.stderr) is not None


@pytest.mark.parametrize("verb", ["validate", "simulate"])
def test_full_stdout_is_one_line(verb, tmp_path):
    """Standard output on a full device (``> /dev/full``): ENOSPC is the user's, not a bug."""
    with open("/dev/full", "w") as full:
        run = subprocess.run([sys.executable, "-m", "planner.cli", verb, str(SHIPPED_PLAN)], stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=120, cwd=tmp_path)
    met = _one_error_line(run, r"cannot write standard output: No space left on device")
    _count(verb, "stdout", met)
    assert met, (run.returncode, run.stderr)


@pytest.mark.parametrize("module, argv", [
    ("ortools", ["plan", "llama3-8b", "--quiet", "--vpp", "2"]),  # the virtual-stage partition's CP-SAT model
    ("jsonschema", ["validate", str(SHIPPED_PLAN)]),
])
def test_missing_dependency_says_what_to_install(tmp_path, module, argv):
    code = f"import sys; sys.modules[{module!r}] = None\nfrom planner.cli import main; main({argv!r})"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    met = _one_error_line(run, rf"missing dependency: .*'{module}'.*pip install {module}") and not list(tmp_path.iterdir())
    _count(argv[0], "environment", met)
    assert met, (run.returncode, run.stderr)


def test_long_valid_out_name_is_written(tmp_path):
    """A 251-byte name is valid; its temporary name would not be, so a shorter one is used."""
    from planner.core.outputs import check_outputs, write_text_atomic

    target = tmp_path / ("p" * 246 + ".json")
    check_outputs({"--out": target})
    write_text_atomic(target, "{}\n")
    assert target.read_text() == "{}\n" and [p.name for p in tmp_path.iterdir()] == [target.name]


@pytest.mark.slow
def test_sigterm_to_replay_ends_its_ranks(tmp_path):
    """SIGTERM to ``ppplan replay`` while its ranks run: every rank process ends, one line, exit 143."""
    from test_replay_run import make_plan, one_f_one_b, tiny_config

    path = tmp_path / "plan.json"
    make_plan(tiny_config(tmp_path), one_f_one_b(2, 4), [(0, 4), (4, 7)]).save(path)
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "replay", str(path), "--fault", "hang:1",
                             "--timeout", "600", "--out", str(tmp_path / "r.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    ranks = _wait_for_children(proc.pid, 2, timeout_s=240)
    time.sleep(2.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    time.sleep(1.0)
    alive = [pid for pid in ranks if _alive(pid)]
    met = proc.returncode == 143 and err.strip().splitlines() == ["stopped by SIGTERM; no output written"] \
        and not alive and not (tmp_path / "r.json").exists()
    _count("replay", "signal", met)
    assert met, (proc.returncode, err[-400:], alive)


@pytest.mark.slow
def test_sighup_stops_profile(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "profile", "qwen3-30b-a3b", "--device", "cpu",
                             "--repeats", "1000", "--out", str(tmp_path / "p.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    time.sleep(15.0)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=180)  # how fast it stops is benchmarks/interrupt.py's
    met = proc.returncode == 129 and err.strip().splitlines()[-1] == "stopped by SIGHUP; no output written" \
        and not (tmp_path / "p.json").exists()
    _count("profile", "signal", met)
    assert met, (proc.returncode, err[-400:])


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _wait_for_children(pid: int, count: int, *, timeout_s: float) -> list[int]:
    """The rank processes of launcher ``pid`` (its spawned children that run the ranks)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        kids = [k for k in _children(pid) if "spawn_main" in _cmdline(k) and "resource_tracker" not in _cmdline(k)]
        if len(kids) >= count:
            return kids
        time.sleep(0.5)
    raise AssertionError(f"no {count} rank processes after {timeout_s} s")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_write_hostile_report():
    """Writes the per-(verb, input type) counts to $PPPLAN_HOSTILE_REPORT (after the rows above)."""
    target = os.environ.get("PPPLAN_HOSTILE_REPORT")
    if not target:
        pytest.skip("set PPPLAN_HOSTILE_REPORT=path to write the counts")
    rows = [{"verb": v, "input": k, "hostile": n, "met_contract": met} for (v, k), (n, met) in sorted(_COUNTS.items())]
    Path(target).write_text(json.dumps(rows, indent=1) + "\n")
