"""A replay inside a process group the launcher already joined, as a Megatron-style script does.

``python -m torch.distributed.run --nproc-per-node 2`` starts a script that joins a gloo
group itself and calls ``planner.replay.replay`` twice on its 2 processes: a pp 2 plan,
then a pp 1 plan with EP 2 (groups of the replay's own making). Afterwards the group
must still work (an all-reduce, a barrier) and the process keep its torch thread count.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from test_replay_run import make_plan, tiny_config  # noqa: E402  (same tests folder)

from solvers.schedule.families.generators import one_f_one_b

SCRIPT = """
import json, sys
from datetime import timedelta
import torch
import torch.distributed as dist
from planner.core.plan import Plan
from planner.replay import ReplayOptions, replay

pp2_path, pp1_path, out_dir = sys.argv[1:4]
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank = dist.get_rank()
torch.set_num_threads(2)
checks = []
for path, ep in ((pp2_path, 1), (pp1_path, 2)):
    plan = Plan.from_dict(json.load(open(path)))
    res = replay(plan, ReplayOptions(ep=ep, steps=1, warmup=0, threads=1, timeout_s=30.0))
    checks.append(None if res is None else res.report["grad_check"])
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
dist.barrier()
json.dump({"rank": rank, "world": dist.get_world_size(), "checks": checks, "sum": float(total),
           "threads": torch.get_num_threads(), "initialized": dist.is_initialized()},
          open(f"{out_dir}/rank{rank}.json", "w"))
dist.destroy_process_group()
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_replay_runs_in_the_launchers_group_and_leaves_it_usable(tmp_path: Path):
    config = tiny_config(tmp_path)
    paths = [tmp_path / "pp2.json", tmp_path / "pp1.json"]
    make_plan(config, one_f_one_b(2, 4, fuse=True), [(0, 4), (4, 7)]).save(paths[0])
    make_plan(config, one_f_one_b(1, 4, fuse=True), [(0, 7)], pp=1).save(paths[1])
    script = tmp_path / "launcher.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(_port()), str(script), *map(str, paths), str(tmp_path)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and the ranks it started: this test's session
        _, err = proc.communicate()
        pytest.fail(f"torchrun did not finish within 240 s: {err[-2000:]}")
    assert proc.returncode == 0, err[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["sum"] for r in ranks] == [3.0, 3.0]
    assert all(r["initialized"] and r["world"] == 2 and r["threads"] == 2 for r in ranks)
    summary = [{k: v for k, v in c.items() if "losses" not in k} for c in ranks[0]["checks"]]
    assert [c["passed"] for c in ranks[0]["checks"]] == [True, True], summary
    assert ranks[1]["checks"] == [None, None]
