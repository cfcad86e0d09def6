"""A config.json that ppplan does not ship plans with no cluster file when the command line
says enough (``--gpus``, ``--gpu``, ``--global-batch``, ``--seq-len``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from planner.core.paths import MODELS_DIR


@pytest.fixture
def unshipped(tmp_path: Path) -> Path:
    folder = tmp_path / "my-moe"
    folder.mkdir()
    shutil.copy(MODELS_DIR / "qwen3-30b-a3b.json", folder / "config.json")
    return folder / "config.json"


def test_plans_from_the_command_line_alone(ppplan, unshipped):
    res = ppplan("plan", str(unshipped), "--gpus", "8", "--gpu", "h100", "--global-batch", "64",
                 "--seq-len", "2048", "--work", "0.5", "--quiet", "--out", "p.json")
    assert res.code == 0, res.err
    plan = json.loads(Path("p.json").read_text())
    assert plan["model"]["name"] == "my-moe" and plan["cluster"]["num_gpus"] == 8
    assert plan["cluster"]["training"]["seq_len"] == 2048


def test_a_missing_field_is_named(ppplan, unshipped):
    res = ppplan("plan", str(unshipped), "--gpus", "8", "--gpu", "h100", "--out", "p.json")
    assert res.code == 2 and res.err.startswith("error: --global-batch: is needed") and not Path("p.json").exists()
    res = ppplan("plan", str(unshipped), "--out", "p.json")
    assert res.code == 2 and "--gpus N --gpu NAME --global-batch B --seq-len S" in res.err
