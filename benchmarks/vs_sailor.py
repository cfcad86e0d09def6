"""ppplan beside Sailor (SOSP'25) on Sailor's mixed A100 40 GB / V100 16 GB setting, under both simulators.

Sailor's heterogeneous experiment (https://github.com/eth-easl/sailor ``ae_scripts/planner/run_het.sh``,
figure 8b): OPT-350 (``training_config_opt_350.json``: global batch 1024, sequence 2048) on each mix
of ``sailor/Planner/simulations/configs/gpu_trace_heterogeneous_imbalanced.csv`` (A100-40 beside
V100-16, 4 GPUs per node, one zone). For each mix:

- every Sailor-side planner (Sailor and the planners it re-implements) runs through Sailor's own
  ``sailor/Planner/simulations/simulator.py`` with run_het.sh's arguments, which scores its plan
  with Sailor's simulator (``runtime_simulator.Simulator``, fed by Sailor's measured profiles);
- ppplan plans the same job (``planner.api.plan``, what ``ppplan plan MODEL --cluster FILE``
  runs) for each (tp, dp), each group cut to whole pipeline ranks of tp x dp GPUs, and keeps
  the fastest optimizer step by its own simulator;
- ppplan's plan, written in Sailor's plan form, is scored by Sailor's simulator
  (``check_config_fits`` then ``simulate_iteration_time``, in Sailor's Python);
- a Sailor-side plan is scored by ppplan's simulator only where ppplan can express it (one
  pipeline, every stage's replicas on one GPU type, the same tp and dp on every stage); else the
  row says which of these fails.

The model is ``benchmarks/data/models/opt-350m-as-llama.json`` (OPT-350's sizes in the llama
family ppplan reads). Sailor's code is not imported here: it runs in ``--sailor-python`` (its own
venv) with ``--sailor-dir`` on PYTHONPATH, and ``--libplanner DIR`` (a folder holding Sailor's
``libplanner`` built for that Python) for the Sailor planner itself.

    python benchmarks/vs_sailor.py --sailor-dir DIR --json [--sailor-python PY] [--libplanner DIR]
        [--mixes 0,1,2] [--planners SAILOR,AMP,FlashFlex,Metis] [--work 1] [--sailor-timeout 1800]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from planner.api import plan as api_plan
from planner.core.errors import InfeasibleError, InputError

MODEL = str(Path(__file__).resolve().parent / "data" / "models" / "opt-350m-as-llama.json")
SIM = "sailor/Planner/simulations"
TRACE = f"{SIM}/configs/gpu_trace_heterogeneous_imbalanced.csv"
PLANNERS = ("SAILOR", "AMP", "FlashFlex", "Metis")
GROUPS = {"A100-40": ("a100", 40), "V100-16": ("v100", 16)}
"""Sailor's GPU name -> (ppplan preset, memory GiB): the trace's two types."""
GPUS_PER_NODE = 4
ZONE = "us-central1-a"


def _planner_args(name: str) -> list[str]:
    """run_all_sim.py's arguments for one planner: its ``--baselines heterogeneous`` set, and DTFM
    (of its ``geo`` set). Atlas has none there (no profile path), so it is not offered."""
    base = "sailor/Planner"
    return {"SAILOR": ["--sailor_profile_file_dir", f"{base}/sailor_planner/profiles/OPT-350/",
                       "--quotas_dict", f"{base}/sailor_planner/dummy_quotas_dict.json"],
            "AMP": ["--planner_profile_file", f"{base}/baselines/AMP/profiles/OPT-350"],
            "Metis": ["--planner_profile_file", f"{base}/baselines/Metis/profiles/OPT-350"],
            "FlashFlex": ["--planner_profile_file", f"{base}/baselines/FlashFlex/src/machine_amounts.json"],
            "DTFM": ["--planner_profile_file", f"{base}/simulations/profiles_tmp.json",
                     "--quotas_dict", f"{base}/sailor_planner/dummy_quotas_dict.json"]}[name]


def _sailor_env(root: Path, sailor_dir: Path, libplanner: Path | None) -> dict:
    """Sailor reads ``$SAILOR_PATH/sailor/sailor/...``: ``root`` holds a link ``sailor`` to the repo."""
    path = [str(sailor_dir)] + ([str(libplanner)] if libplanner else [])
    return {**os.environ, "SAILOR_PATH": str(root), "PYTHONPATH": os.pathsep.join(path)}


def _path(root: Path, rel: str) -> str:
    """``root / rel``, keeping a trailing slash: Sailor's C++ planner appends file names to its folder."""
    return str(root / rel) + ("/" if rel.endswith("/") else "")


def sailor_plans(name: str, trace: Path, root: Path, env: dict, python: str, timeout: float) -> list[dict]:
    """One Sailor-side planner over every mix of ``trace``, through Sailor's simulator.py."""
    s = root / "sailor"
    out = root / f"res-{name}"
    cmd = [python, str(s / SIM / "simulator.py"), "--sailor_path", str(root), "--trace_file", str(trace),
           "--basic_cluster_config_json", str(s / SIM / "configs/basic_cluster_config.json"),
           "--training_config_json", str(s / SIM / "configs/training_config_opt_350.json"),
           "--result_dir_path", str(out), "--objective", "throughput", "--planner", name,
           "--simulator_profile_file", str(s / SIM / "profiles_tmp.json"),
           *[a if a.startswith("--") else _path(s, a) for a in _planner_args(name)]]
    try:
        done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [{"status": "timed out", "reason": f"no result within --sailor-timeout {timeout:g} s"}]
    res = out / f"{name}_OPT-350.json"
    if done.returncode or not res.exists():
        return [{"status": "failed", "reason": (done.stderr or done.stdout)[-400:]}]
    return [_sailor_row(r) for r in json.loads(res.read_text())]


def _sailor_row(r: dict) -> dict:
    if not r["throughput"]:
        return {"status": "no plan", "sailor_sim_s": None}
    pipes = r["plan"]["pipelines"]
    shape = [{"layers": [len(s) for s in p["layers_per_stage"]], "dp": p["dp_degrees"],
              "stages": [sorted({f"{c[0][0][0]} tp{c[1]}" for c in st}) for st in p["tmp_stages"]]}
             for p in pipes]
    return {"status": "planned", "sailor_sim_s": 1 / r["throughput"], "mbs": r["plan"]["mbs"],
            "pipelines": shape, "search_s": r["search_time"], "plan": r["plan"]}


def mixes(trace: Path) -> list[dict[str, int]]:
    """The trace's rows as {Sailor GPU name: count}."""
    with trace.open() as fh:
        rows = list(csv.DictReader(fh))
    return [{k.split("_")[0]: int(v) for k, v in row.items() if "_" in k} for row in rows]


def cluster_file(mix: dict[str, int], tp: int, dp: int, folder: Path) -> Path:
    """The mix as a ppplan cluster file, each group cut to whole pipeline ranks of tp x dp GPUs
    (like Sailor, a plan may leave GPUs idle): A100 group first, 4 GPUs per node."""
    w = tp * dp
    groups = [f"  - {{type: {GROUPS[g][0]}, count: {n // w * w}, memory_gib: {GROUPS[g][1]}, "
              f"gpus_per_node: {GPUS_PER_NODE}}}" for g, n in mix.items()]
    pp = sum(n // w for n in mix.values())
    path = folder / f"mix-{'-'.join(map(str, mix.values()))}-tp{tp}-dp{dp}.yaml"
    path.write_text("description: Sailor's heterogeneous OPT-350 mix\ndevices:\n" + "\n".join(groups) +
                    f"\nparallel: {{pp: {pp}, vpp: 1, tp: {tp}, dp: {dp}}}\n"
                    "training: {global_batch: 1024, seq_len: 2048, micro_batch_size: 1, precision: bf16, "
                    "memory_headroom: 0.1}\n")
    return path


def ppplan_plans(mix: dict[str, int], folder: Path, work: float) -> list[dict]:
    """ppplan on every (tp, dp) giving each group at least one pipeline rank and 2 <= pp <= 26 layers."""
    out = []
    for tp in (1, 2, 4):
        for dp in (1, 2, 4, 8, 16, 32, 64):
            pp = sum(n // (tp * dp) for n in mix.values())
            if min(mix.values()) < tp * dp or not 2 <= pp <= 26 or 1024 % dp:
                continue
            try:
                p = api_plan(model=MODEL, cluster=cluster_file(mix, tp, dp, folder), work=work)
            except (InputError, InfeasibleError) as exc:
                out.append({"tp": tp, "dp": dp, "status": "refused", "reason": str(exc)[:200]})
                continue
            out.append({"tp": tp, "dp": dp, "pp": p.pp, "status": "planned", "mbs": p.microbatches.size,
                        "gpus": pp * tp * dp, "ppplan_sim_s": p.predicted.optimizer_step_time_s,
                        "stages": [{"layers": list(s.layers), "device": s.device} for s in p.stages]})
    return out


def to_sailor(row: dict) -> dict:
    """A ppplan plan (one pipeline, tp and dp on every stage) in Sailor's ``pipeline_list`` form."""
    back = {v[0]: k for k, v in GROUPS.items()}
    stages = row["stages"]
    types = [back[s["device"].split("-")[0]] for s in stages]
    per_stage = [[[[[t, GPUS_PER_NODE, ZONE]], row["tp"]] for _ in range(row["dp"])] for t in types]
    used: dict[str, int] = {}
    for t in types:
        used[t] = used.get(t, 0) + row["tp"] * row["dp"]
    return {"mbs": row["mbs"], "used_gpus": used,
            "pipeline_list": [{"num_stages": len(stages), "tmp_per_stage": per_stage, "dp": [row["dp"]] * len(stages),
                               "layers_per_stage": [list(range(*s["layers"])) for s in stages]}]}


_SCORER = """
import json, sys
from sailor.Planner.simulations.runtime_simulator import Simulator
root, plans = sys.argv[1], json.load(sys.stdin)
s = root + "/sailor/sailor/Planner"
cfg = json.load(open(s + "/simulations/configs/training_config_opt_350.json"))
sim = Simulator(root, cfg, json.load(open(s + "/llm_info.json")), False,
                json.load(open(s + "/simulations/profiles_tmp.json")), zone="us-central1-a")
out = []
for p in plans:
    fits = sim.check_config_fits(p)
    out.append({"fits": fits, "sailor_sim_s": sim.simulate_iteration_time(p)[0] if fits else None})
print("SCORES " + json.dumps(out))
"""
"""Runs in Sailor's Python: its simulator's memory check and iteration time (fp32, as run_het.sh)."""


def sailor_scores(plans: list[dict], root: Path, env: dict, python: str) -> list[dict]:
    done = subprocess.run([python, "-c", _SCORER, str(root)], input=json.dumps(plans), cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    line = [x for x in done.stdout.splitlines() if x.startswith("SCORES ")]
    if done.returncode or not line:
        return [{"fits": None, "sailor_sim_s": None, "reason": done.stderr[-300:]}] * len(plans)
    return json.loads(line[-1][len("SCORES "):])


def expressible(row: dict) -> str:
    """Why ppplan cannot write a Sailor-side plan ('' when it can)."""
    pipes = row["pipelines"]
    if len(pipes) > 1:
        return f"{len(pipes)} pipelines of different shapes (ppplan: one pipeline, dp replicas alike)"
    p = pipes[0]
    mixed = [i for i, s in enumerate(p["stages"]) if len(s) > 1]
    if mixed:
        return f"stage {mixed[0]} mixes {' and '.join(p['stages'][mixed[0]])} replicas (ppplan: a stage on one group)"
    if len(set(p["dp"])) > 1:
        return f"per-stage dp {p['dp']} (ppplan: the same dp on every stage)"
    if len({st[0].split()[1] for st in p["stages"]}) > 1:
        return "per-stage tp (ppplan: the same tp on every stage)"
    if len(p["layers"]) == 1:
        return "one stage (no pipeline to plan)"
    return ""


def run(sailor_dir: Path, python: str, libplanner: Path | None, mix_ids: list[int], planners: list[str],
        work: float, timeout: float) -> dict:
    """Every mix: the Sailor-side planners, ppplan, and the cross scores."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "sailor").symlink_to(sailor_dir.resolve())
        env = _sailor_env(root, sailor_dir.resolve(), libplanner)
        all_mixes = mixes(sailor_dir / TRACE)
        trace = root / "trace.csv"
        with (sailor_dir / TRACE).open() as fh:
            lines = fh.read().splitlines()
        trace.write_text("\n".join([lines[0]] + [lines[1 + i] for i in mix_ids]) + "\n")
        side = {name: sailor_plans(name, trace, root, env, python, timeout) for name in planners}
        rows = []
        for k, i in enumerate(mix_ids):
            ours = ppplan_plans(all_mixes[i], root, work)
            planned = [r for r in ours if r["status"] == "planned"]
            for r, score in zip(planned, sailor_scores([to_sailor(r) for r in planned], root, env, python)):
                r.update(score)  # every candidate under Sailor's simulator too
            best = min(planned, key=lambda r: r["ppplan_sim_s"]) if planned else None
            theirs = {}
            for name in planners:
                r = side[name][k] if len(side[name]) > k else side[name][0]
                r = {key: v for key, v in r.items() if key != "plan"}
                if r["status"] == "planned":
                    r["ppplan_sim_s"], r["why_not_in_ppplan"] = None, expressible(r)
                theirs[name] = r
            rows.append({"mix": all_mixes[i], "ppplan": best or {}, "ppplan_candidates": ours,
                         "sailor_side": theirs})
    return {"rows": rows, "work": work}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sailor-dir", type=Path, required=True, help="Sailor's checkout (holds sailor/Planner)")
    ap.add_argument("--sailor-python", default=sys.executable, help="the Python of Sailor's venv")
    ap.add_argument("--libplanner", type=Path, help="folder holding Sailor's libplanner built for that Python")
    ap.add_argument("--mixes", default="0,1,2", help="rows of Sailor's heterogeneous trace")
    ap.add_argument("--planners", default=",".join(PLANNERS))
    ap.add_argument("--work", type=float, default=1.0, help="search effort of every ppplan plan (--work)")
    ap.add_argument("--sailor-timeout", type=float, default=1800, help="seconds for one Sailor-side planner")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    if not (args.sailor_dir / TRACE).exists():
        ap.error(f"--sailor-dir: no {TRACE} under {args.sailor_dir} (give Sailor's checkout)")
    out = run(args.sailor_dir, args.sailor_python, args.libplanner,
              [int(x) for x in args.mixes.split(",")], args.planners.split(","), args.work,
              args.sailor_timeout)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    for r in out["rows"]:
        p = r["ppplan"]
        print(f"{r['mix']}: ppplan tp {p.get('tp')} dp {p.get('dp')} pp {p.get('pp')}: own {p.get('ppplan_sim_s')} s, "
              f"Sailor's sim {p.get('sailor_sim_s')} s")
        for name, s in r["sailor_side"].items():
            print(f"  {name}: Sailor's sim {s.get('sailor_sim_s')} s, in ppplan: {s.get('why_not_in_ppplan') or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
