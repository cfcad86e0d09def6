"""The launcher examples run: Megatron argument builder and a real torch.distributed pipeline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from solvers.schedule.families.generators import one_f_one_b
from megatron_oracle import megatron_stages
from test_export_plans import build_plan, case_plan, defer_w

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run a script in its own process group; on timeout kill the whole group (no orphans)."""
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_megatron_launcher_builds_its_arguments_from_a_plan():
    run = _run([str(EXAMPLES / "megatron_launcher.py"), "--json", "--pp", "4"], timeout=180)
    assert run.returncode == 0, run.stderr
    cmd = json.loads(run.stdout)
    assert cmd[:4] == ["torchrun", "--nnodes=2", "--nproc-per-node=8", "pretrain_gpt.py"]
    layout = cmd[cmd.index("--pipeline-model-parallel-layout") + 1]
    stages = megatron_stages(layout, 4, "E" + "t" * 32 + "L")  # Llama3-8B: 32 decoder layers
    assert "".join(stages).count("t") == int(cmd[cmd.index("--num-layers") + 1]) == 32


def test_megatron_launcher_refuses_what_megatron_cannot_run():
    run = _run([str(EXAMPLES / "megatron_launcher.py"), "--model", "qwen3-30b-a3b", "--nodes", "4",
                "--schedule", "1f1b-overlap", "--pp", "4"], timeout=180)
    assert run.returncode == 2 and run.stdout == ""
    assert "1f1b-overlap fuses F&B pairs, which megatron runs only with virtual stages when pp > 1" in run.stderr


@pytest.mark.slow
def test_torch_pipelining_runs_plans_with_gloo(tmp_path):
    from planner import plan

    plans = {
        "default": plan("llama3-8b", pp=2, microbatches=4, schedule="1f1b", work=2),
        "vpp2": case_plan("vpp2"),
        "v": case_plan("v"),
        "custom": case_plan("custom"),
        "fused": case_plan("fused"),
        "w_moved": build_plan("llama3-8b", pp=2, microbatches=4, name="zb-deferred",
                              schedule=defer_w(one_f_one_b(2, 4, split_w=True))),
    }
    args = [str(EXAMPLES / "torch_pipelining.py")]
    for name, p in plans.items():
        p.save(tmp_path / f"{name}.json")
        args += ["--plan", str(tmp_path / f"{name}.json")]
    run = _run(args, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    for k, (name, p) in enumerate(plans.items()):
        assert f"plan {k} ({p.model['name']}" in run.stdout
    assert run.stdout.count("max |diff|") == 2 * len(plans)
