"""The loop closed on a CPU: ``ppplan replay --torch-profile`` records one trace per rank,
``ppplan profile --from-trace`` reads them into a cost table, ``ppplan plan --profile`` plans
from it (gloo on 127.0.0.1, with timeouts)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from planner.core.paths import CLUSTERS_DIR

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from test_replay_run import PLANS, SEQ, make_plan, tiny_config  # noqa: E402  (same tests folder)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_replay_trace_profile_plan(tmp_path, ppplan):
    cfg = tiny_config(tmp_path)
    schedule, bounds = PLANS["1f1b-iw"][0](), PLANS["1f1b-iw"][1]
    make_plan(cfg, schedule, bounds).save(tmp_path / "plan.json")
    run = subprocess.run([sys.executable, "-m", "planner.cli", "replay", str(tmp_path / "plan.json"),
                          "--seq-len", str(SEQ), "--steps", "2", "--warmup", "0", "--threads", "1", "--timeout", "20",
                          "--no-grad-check", "--torch-profile", str(tmp_path / "traces"), "--out", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=200)
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["rank-0.json.gz", "rank-1.json.gz"]
    cluster = str(CLUSTERS_DIR / "qwen3-next-80b-a3b.yaml")  # the tiny model is a Qwen3-Next
    res = ppplan("profile", "--from-trace", str(tmp_path / "traces"), "--cluster", cluster, "--out", "T.json")
    assert res.code == 0, res.err
    table = json.loads((tmp_path / "T.json").read_text())
    trace = table["meta"]["trace"]
    # 1F1B with split backwards: every layer type's F, I and W, 4 microbatches x 2 steps per layer
    assert trace["samples"]["gqa+moe"] == {"F": 8, "I": 8, "W": 8, "B": 0, "L": 0}
    assert trace["samples"]["head"]["F"] == 8 and trace["run"]["seq_len"] == SEQ
    # the loss runs after the head's forward, outside its F range: its own range, added to the head's F
    assert trace["samples"]["head"]["L"] == 8
    for lc in table["layers"]:
        assert lc["f"] > 0 and lc["w"] > 0, lc  # the embedding has no input-gradient
        with_loss = "; with the loss" if lc["type"] == "head" else ""
        assert trace["provenance"]["layers"][lc["type"]]["f"] == "trace less the profiler's own cost" + with_loss
    # the recorder measured what one recorded event costs in each rank's process (microseconds, not more)
    assert sorted(trace["profiler_overhead_s_per_event"]) == ["0", "1"]
    assert all(0 <= v < 1e-4 for v in trace["profiler_overhead_s_per_event"].values())
    res = ppplan("plan", "--profile", "T.json", "--pp", "2", "--microbatches", "4", "--out", "plan2.json", "--quiet")
    assert res.code == 0, res.err
    assert json.loads((tmp_path / "plan2.json").read_text())["parallel"]["pp"] == 2


def test_trace_hook_example_is_read_back(tmp_path, ppplan):
    """``examples/trace_hook.py``: F and B ranges from module hooks in a plain training loop;
    the importer splits each B by the analytical I:W ratio and says so; the README's three
    commands (trace, ``profile --from-trace``, ``plan --profile``) in one folder."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1] / "examples"))
    from trace_hook import train

    train(str(tmp_path / "traces"), model="llama3-8b", scale=0.01, seq_len=8, steps=2)
    res = ppplan("profile", "--from-trace", str(tmp_path / "traces"), "--out", "T.json")
    assert res.code == 0, res.err
    trace = json.loads((tmp_path / "T.json").read_text())["meta"]["trace"]
    assert trace["samples"]["gqa+dense"] == {"F": 64, "I": 0, "W": 0, "B": 64, "L": 0}  # 32 layers x 2 steps
    assert trace["provenance"]["layers"]["gqa+dense"]["i"] == ("trace less the profiler's own cost; "
                                                                "B split by the analytical I:W ratio")
    res = ppplan("plan", "llama3-8b", "--profile", "T.json", "--quiet")  # the README's third command
    assert res.code == 0, res.err
    assert json.loads((tmp_path / "plan.json").read_text())["costs"]["source"] == "measured"
