"""Property-based fuzzing of every JSON/YAML input type through every verb that reads it.

Each example takes a valid shipped (or freshly planned) file, applies one mutation
(a value of the wrong type, a flipped sign, NaN/Infinity, a huge number, zero, a key
dropped, an extra key, the text truncated, the file emptied) and runs the verb
in-process. The contract (issue 15): exit 0, or exit 2 with exactly one ``error: ...``
line on stderr (``validate`` may also answer 1: its "invalid" verdict); never a
traceback or an ``internal error``; no output file unless exit 0; the input unchanged.

Counts of fuzzed inputs and of those meeting the contract, per verb and input type,
are written as JSON to ``$PPPLAN_FUZZ_REPORT`` when it is set (the README figure).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.core.paths import CLUSTERS_DIR, MODELS_DIR

ROUTING = Path(__file__).resolve().parent.parent / "examples" / "routing"
EXAMPLES = int(os.environ.get("PPPLAN_FUZZ_EXAMPLES", "60"))
"""Examples per (verb, input type); CI uses the default (a few seconds each)."""
REPLAN_EXAMPLES = int(os.environ.get("PPPLAN_FUZZ_REPLAN_EXAMPLES", "15"))
"""Examples for the two replan rows (a valid mutation costs a re-planning search, ~2 s)."""

MUTATIONS = ("type", "sign", "nan", "inf", "huge", "zero", "drop", "extra", "truncate", "empty")
_WRONG_TYPES = ("text", [], {}, True, None, 1.5, [1, 2])
_SEEN: dict[tuple[str, str, str], set] = {}
"""(verb, input type, fuzzed|met) -> the distinct mutations (Hypothesis replays some while shrinking)."""
_FAST_PLAN = ["--schedule", "1f1b", "--recompute", "none", "--work", "0.2", "--quiet"]


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value in a JSON-like tree (the root included)."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node[:6]):  # the first few items of long lists are enough
            out += _paths(v, prefix + (i,))
    return out


def _mutate(data: Any, kind: str, path: tuple, pick: int) -> Any:
    data = copy.deepcopy(data)
    if not path:
        return {"zz_extra": 1, **data} if kind == "extra" and isinstance(data, dict) else _WRONG_TYPES[pick % 7]
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    key, value = path[-1], parent[path[-1]]
    if kind == "drop":
        del parent[key]
    elif kind == "extra":
        target = value if isinstance(value, dict) else parent
        if isinstance(target, dict):
            target["zz_extra"] = 1
        else:
            target.append(target[-1] if target else 1)
    else:
        parent[key] = {
            "type": _WRONG_TYPES[pick % len(_WRONG_TYPES)],
            "sign": -value if isinstance(value, (int, float)) and not isinstance(value, bool) else -1,
            "nan": float("nan"), "inf": float("inf") if pick % 2 else float("-inf"),
            "huge": 10**30 if pick % 2 else 1e308, "zero": 0,
        }[kind]
    return data


def _render(data: Any, fmt: str) -> str:
    return yaml.safe_dump(data, sort_keys=False) if fmt == "yaml" else json.dumps(data)


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, tuple[Any, str, str]]:
    """input type -> (parsed valid data, format, file name)."""
    from planner.api import plan, resolve_cluster
    from planner.core.costs_io import costs_to_dict
    from planner.core.hf_config import load_model
    from profiler.analytical import analytical_costs

    spec = load_model("llama3-8b")
    costs = costs_to_dict(analytical_costs(spec, resolve_cluster(spec, None).with_recompute("none")))
    return {
        "config": (json.loads((MODELS_DIR / "llama3-8b.json").read_text()), "json", "config.json"),
        "cluster": (yaml.safe_load((CLUSTERS_DIR / "llama3-8b.yaml").read_text()), "yaml", "cluster.yaml"),
        "costs": (costs, "json", "costs.json"),
        "plan": (plan(work=0.5).to_dict(), "json", "plan.json"),
        "trace": (json.loads((ROUTING / "start.json").read_text()), "json", "trace.json"),
    }


def _argv(verb: str, kind: str, path: str, folder: Path) -> list[str]:
    """The command line that feeds ``path`` (of input type ``kind``) to ``verb``."""
    cluster = str(CLUSTERS_DIR / "llama3-8b.yaml")
    good_plan = str(folder / "good_plan.json")
    return {
        ("plan", "config"): ["plan", str(Path(path).parent), "--cluster", cluster, *_FAST_PLAN],
        ("profile", "config"): ["profile", str(Path(path).parent), "--analytical", "--cluster", cluster],
        ("plan", "cluster"): ["plan", "llama3-8b", "--cluster", path, *_FAST_PLAN],
        ("profile", "cluster"): ["profile", "llama3-8b", "--analytical", "--cluster", path],
        ("plan", "costs"): ["plan", "llama3-8b", "--profile", path, *_FAST_PLAN],
        ("profile --compare", "costs"): ["profile", "--compare", path, str(folder / "good_costs.json")],
        ("validate", "plan"): ["validate", path],
        ("simulate", "plan"): ["simulate", path],
        ("export", "plan"): ["export", path, "--format", "torch-csv"],
        ("replan", "plan"): ["replan", path, "--routing", str(ROUTING / "hot_late.jsonl")],
        ("replan", "trace"): ["replan", good_plan, "--routing", path],
    }[(verb, kind)]


CASES = [("plan", "config"), ("profile", "config"), ("plan", "cluster"), ("profile", "cluster"),
         ("plan", "costs"), ("profile --compare", "costs"), ("validate", "plan"), ("simulate", "plan"),
         ("export", "plan"), ("replan", "plan"), ("replan", "trace")]


def _run(argv: list[str], cwd: Path) -> tuple[int, str]:
    from planner.cli import cli
    from planner.cli.common import run_guarded

    err, here = io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = run_guarded(cli, argv)
    finally:
        os.chdir(here)
    return code, err.getvalue()


def _problems(verb: str, code: int, err: str, out: Path, before: bytes, src: Path) -> list[str]:
    found = []
    if code not in ((0, 1, 2) if verb == "validate" else (0, 2)):
        found.append(f"exit code {code}")
    if "Traceback" in err or "internal error" in err:
        found.append("traceback or internal error")
    if code == 2 and (err.count("\n") != 1 or not err.startswith("error: ")):
        found.append("not one 'error:' line")
    if code != 0 and out.exists():
        found.append("output written")
    if src.read_bytes() != before:
        found.append("input changed")
    return found


@pytest.mark.parametrize("verb, kind", CASES, ids=[f"{v}-{k}" for v, k in CASES])
def test_fuzzed_inputs_meet_the_contract(bases, tmp_path, verb, kind):
    data, fmt, name = bases[kind]
    (tmp_path / "good_costs.json").write_text(json.dumps(bases["costs"][0]))
    (tmp_path / "good_plan.json").write_text(json.dumps(bases["plan"][0]))
    paths = _paths(data)

    @settings(max_examples=REPLAN_EXAMPLES if verb == "replan" else EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(kind_=st.sampled_from(MUTATIONS), where=st.integers(0, len(paths) - 1), pick=st.integers(0, 99))
    def one(kind_: str, where: int, pick: int) -> None:
        with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
            folder = Path(scratch)
            (folder / "m").mkdir()
            src = folder / "m" / name
            if kind_ in ("truncate", "empty"):
                text = _render(data, fmt)
                text = text[: (pick * len(text)) // 100] if kind_ == "truncate" else ""
            else:
                text = _render(_mutate(data, kind_, paths[where], pick), fmt)
            src.write_text(text)
            before = src.read_bytes()
            out = folder / "out.file"
            argv = _argv(verb, kind, str(src), tmp_path)
            if verb not in ("validate", "simulate", "profile --compare"):
                argv += ["--out", str(out)]
            code, err = _run(argv, folder)
            problems = _problems(verb, code, err, out, before, src)
            key = (kind_, where, pick if kind_ in ("type", "inf", "huge", "truncate") else 0)
            _SEEN.setdefault((verb, kind, "fuzzed"), set()).add(key)
            if not problems:
                _SEEN.setdefault((verb, kind, "met"), set()).add(key)
            _SEEN.setdefault((verb, kind, f"exit {code}"), set()).add(key)
            assert not problems, f"{kind_} at {paths[where]}: exit {code}: {problems}: {err[:300]}"

    one()


def test_write_fuzz_report():
    """Writes the per-(verb, input type) counts to $PPPLAN_FUZZ_REPORT (after the fuzz tests)."""
    target = os.environ.get("PPPLAN_FUZZ_REPORT")
    if not target:
        pytest.skip("set PPPLAN_FUZZ_REPORT=path to write the counts")
    rows = [{"verb": v, "input": k, "fuzzed": len(_SEEN.get((v, k, "fuzzed"), ())),
             "met_contract": len(_SEEN.get((v, k, "met"), ())),
             "exit_codes": {c: len(_SEEN.get((v, k, f"exit {c}"), ())) for c in (0, 1, 2)}} for v, k in CASES]
    Path(target).write_text(json.dumps(rows, indent=1) + "\n")
