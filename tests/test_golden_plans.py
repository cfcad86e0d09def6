"""Golden plans: the default plan of every shipped model, checked in under plans/examples/.

Each test plans one shipped model exactly as ``ppplan plan MODEL --out FILE`` does (no
other option) and compares the result with ``plans/examples/<model>.default.plan.json``,
so a change in the search, the cost model or the plan format shows up in review.

What is compared: everything (partition, schedule, microbatches, predictions, costs, stage
costs, model and cluster sections, baselines, the solver's whole search trace) except the
``wall_s`` timing fields. The search spends a work budget, not wall time ([Note: work
budget] in ``solvers.schedule.search.budget``), so the plans match on any machine at any load and
the test never skips.

Rewrite them on purpose (after a change that is meant to change plans; say so in the
commit message)::

    PPPLAN_REGEN_GOLDEN=1 python -m pytest -q tests/test_golden_plans.py

Each default plan takes about 6-18 s on a shared 2-core machine (deepseek-v3 the longest).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from planner.cli import cli
from planner.core.paths import SHIPPED_MODELS

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "plans" / "examples"
MODELS = SHIPPED_MODELS  # a newly shipped model needs its golden plan too
REGEN = os.environ.get("PPPLAN_REGEN_GOLDEN") == "1"
_RUN_DEPENDENT: set[tuple[str, ...]] = set()
"""Fields left out of the comparison besides ``wall_s`` (none: the search is deterministic)."""

pytestmark = pytest.mark.slow


def stable(data: Any, path: tuple[str, ...] = ()) -> Any:
    """``data`` without the fields that depend on the machine's speed (see the module doc)."""
    if isinstance(data, dict):
        return {k: stable(v, path + (k,)) for k, v in data.items()
                if k != "wall_s" and path + (k,) not in _RUN_DEPENDENT}
    if isinstance(data, list):
        return [stable(v, path) for v in data]
    return data


def differences(want: Any, got: Any, where: str = "") -> list[str]:
    """Paths where two JSON values differ, e.g. ``stages[3].layers: [..] != [..]``."""
    if isinstance(want, dict) and isinstance(got, dict):
        at = (lambda k: f"{where}.{k}" if where else k)
        out = [f"{at(k)}: only in {'golden' if k in want else 'new plan'}"
               for k in sorted(set(want) ^ set(got))]
        for k in sorted(set(want) & set(got)):
            out += differences(want[k], got[k], at(k))
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (a, b) in enumerate(zip(want, got)) for d in differences(a, b, f"{where}[{i}]")]
    return [] if want == got else [f"{where}: {json.dumps(want)[:80]} != {json.dumps(got)[:80]}"]


def default_plan_text(model: str, out: Path) -> str:
    """What ``ppplan plan MODEL --out FILE`` writes."""
    res = CliRunner().invoke(cli, ["plan", model, "--out", str(out), "--quiet"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return out.read_text()


@pytest.mark.parametrize("model", MODELS)
def test_default_plan_matches_golden(model: str, tmp_path: Path) -> None:
    golden = GOLDEN / f"{model}.default.plan.json"
    text = default_plan_text(model, tmp_path / "plan.json")
    if REGEN:
        tmp = golden.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(golden)
        return
    assert golden.exists(), f"{golden} missing: run PPPLAN_REGEN_GOLDEN=1 pytest {__file__}"
    diff = differences(stable(json.loads(golden.read_text())), stable(json.loads(text)))
    assert not diff, (f"default plan of {model} changed ({len(diff)} fields); if intended, "
                      f"rewrite with PPPLAN_REGEN_GOLDEN=1 pytest tests/test_golden_plans.py:\n"
                      + "\n".join(diff[:25]))


def test_comparison_ignores_only_timing_fields() -> None:
    """The filter drops ``wall_s`` fields and keeps the plan and its search trace."""
    plan = {"stages": [{"layers": [0, 4]}], "solver": {"name": "dp", "wall_s": 1.0, "budget": {"x": 1},
                                                       "schedule_solver": {"wall_s": 2.0, "status": "OK"}},
            "baselines": {"uniform": {}}, "predicted": {"step_time_s": 1.5}}
    assert stable(plan) == {"stages": [{"layers": [0, 4]}], "solver": {"name": "dp", "budget": {"x": 1},
                            "schedule_solver": {"status": "OK"}}, "baselines": {"uniform": {}},
                            "predicted": {"step_time_s": 1.5}}
    other = json.loads(json.dumps(plan))
    other["stages"][0]["layers"] = [0, 5]
    other["solver"]["wall_s"] = 9.0
    assert differences(stable(plan), stable(other)) == ["stages[0].layers[1]: 4 != 5"]
