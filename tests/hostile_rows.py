"""Hostile inputs for ``tests/test_hostile_inputs.py``: the hand-made rows and the matrix
of attacks on every file a verb reads (see that module for the contract they are held to)."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from planner.core.paths import CLUSTERS_DIR, MODELS_DIR

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_PLAN = ROOT / "plans" / "examples" / "qwen3-next-80b-a3b.default.plan.json"
ROUTING = ROOT / "examples" / "routing"


def _json(tmp: Path, name: str, data: Any) -> str:
    (tmp / name).write_text(json.dumps(data))
    return str(tmp / name)


def text(tmp: Path, name: str, content: str) -> str:
    """Write ``content`` to ``tmp/name``; its path."""
    (tmp / name).write_text(content)
    return str(tmp / name)


def _fifo(tmp: Path, name: str) -> str:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return str(path)


def _edit(data: Any, edit: Callable[[Any], None]) -> Any:
    data = copy.deepcopy(data)
    edit(data)
    return data


def _config(tmp: Path, base: str, **changes: Any) -> str:
    folder = tmp / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(json.loads((MODELS_DIR / f"{base}.json").read_text()) | changes))
    return str(folder)


def _sparse(tmp: Path, name: str, size: int) -> str:
    """A file of ``size`` bytes that takes no disk space (a hole)."""
    with open(tmp / name, "wb") as fh:
        fh.truncate(size)
    return str(tmp / name)


def _config_text(tmp: Path, content: str) -> str:
    (tmp / "model").mkdir(exist_ok=True)
    (tmp / "model" / "config.json").write_text(content)
    return str(tmp / "model")


def bomb() -> str:
    """Nine anchors, each a list of nine aliases of the one before: 9^8 strings when expanded."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]" for k in range(1, 9)]
    return "\n".join(lines) + "\n"


def _plan_file(tmp: Path, g: dict, edit: Callable[[dict], None]) -> str:
    return _json(tmp, "plan_in.json", _edit(g["plan"], edit))


def _layers(g: dict, roles: list[str]) -> dict:
    costs = copy.deepcopy(g["costs"])
    for layer, role in zip(costs["layers"], roles):
        layer["role"] = role
    return costs


def _cluster(tmp: Path, g: dict, raw: str | None = None, **changes: Any) -> str:
    """The llama3-8b cluster file with ``changes`` (``section__field=value``), or ``raw`` text."""
    data = copy.deepcopy(g["cluster"])
    for key, value in changes.items():
        section, _, name = key.partition("__")
        (data[section].__setitem__(name, value) if name else data.__setitem__(section, value))
    return text(tmp, "cluster_in.yaml", raw if raw is not None else yaml.safe_dump(data))


_LLAMA = ["llama3-8b", "--quiet", "--out", "out.json"]
_TRACE = ["--routing", str(ROUTING / "hot_late.jsonl"), "--out", "out.json"]
_BIG = 10**30
_ARABIC_3 = "\u0663"
"""ARABIC-INDIC DIGIT THREE: ``float()`` and ``\\d`` read it as 3."""


def _link(tmp: Path, name: str, target: str) -> Path:
    (tmp / name).symlink_to(target)
    return tmp / name





# (id, verb, input type, argv builder (tmp, good) -> argv after the verb, pattern of the error line)
HOSTILE_ROWS: list[tuple[str, str, str, Callable[[Path, dict], list[str]], str]] = [
    ("fifo", "validate", "plan", lambda t, g: [_fifo(t, "p.json")], r"plan: .*p\.json is a FIFO, not a regular file"),
    ("dev-zero", "validate", "plan", lambda t, g: ["/dev/zero"], r"plan: /dev/zero is a device"),
    ("folder", "validate", "plan", lambda t, g: [str(t)], r"PLAN.*is a directory"),
    ("over-64-MiB", "validate", "plan", lambda t, g: [_sparse(t, "p.json", 65 * 2**20)],
     r"plan: .*p\.json is larger than the 64 MiB an input may be"),
    ("deep-json", "validate", "plan", lambda t, g: [text(t, "p.json", "[" * 100_000 + "]" * 100_000)],
     r"plan: .*nests lists or objects more than 32 deep"),
    ("int-beyond-int64-action", "validate", "plan",
     lambda t, g: [_plan_file(t, g, lambda d: d["schedule"]["0"].__setitem__(0, "0F99999999999999999999999"))],
     r"plan\.schedule\[0\]\[0\]: bad action .*at most 18"),
    ("arabic-digits-action", "validate", "plan",
     lambda t, g: [_plan_file(t, g, lambda d: d["schedule"]["0"].__setitem__(0, f"0F{_ARABIC_3}"))],
     r"plan\.schedule\[0\]\[0\]: bad action .*ASCII digits"),
    ("duplicate-key", "validate", "plan",
     lambda t, g: [text(t, "p.json", json.dumps(g["plan"])[:-1] + ', "model": {}}')],
     r"plan: .*key 'model' is given twice"),
    ("5000-digit-int", "validate", "plan",
     lambda t, g: [text(t, "p.json", json.dumps(g["plan"]).replace('"count": 32', '"count": ' + "9" * 5000))],
     r"plan: .*integer 9{24}\.\.\. does not fit 64 bits"),
    ("count-1e30", "simulate", "plan", lambda t, g: [_plan_file(t, g, lambda d: d["microbatches"].update(count=_BIG))],
     r"plan: .*does not fit 64 bits"),
    ("count-1e12", "simulate", "plan",
     lambda t, g: [_plan_file(t, g, lambda d: d["microbatches"].update(count=10**12))],
     r"plan\.microbatches\.count: .* above the planner's limit"),
    ("microbatch-size-1e17", "simulate", "plan",
     lambda t, g: [_plan_file(t, g, lambda d: d["microbatches"].update(size=10**17))],
     r"plan\.microbatches\.size: expected an integer in 1\.\.65536"),
    ("training-micro-batch-1e9", "simulate", "plan",
     lambda t, g: [_plan_file(t, g, lambda d: d["cluster"]["training"].update(micro_batch_size=10**9))],
     r"plan\.cluster\.training\.micro_batch_size: expected an integer"),
    ("count-1e30", "replay", "plan",
     lambda t, g: [_plan_file(t, g, lambda d: d["microbatches"].update(count=_BIG)), "--out", "out.json"],
     r"plan: .*does not fit 64 bits"),
    ("count-1e12", "replay", "plan",
     lambda t, g: [_plan_file(t, g, lambda d: d["microbatches"].update(count=10**12)), "--out", "out.json"],
     r"plan\.microbatches\.count: .* above the planner's limit"),
    ("duplicate-key", "export", "plan",
     lambda t, g: [text(t, "p.json", json.dumps(g["plan"])[:-1] + ', "stages": []}'), "--format", "torch-csv",
                   "--out", "out.csv"], r"plan: .*key 'stages' is given twice"),
    ("fifo", "plan", "cluster", lambda t, g: [*_LLAMA, "--cluster", _fifo(t, "c.yaml")], r"cluster file: .*is a FIFO"),
    ("dev-zero", "plan", "cluster", lambda t, g: [*_LLAMA, "--cluster", "/dev/zero"], r"cluster file: /dev/zero is a device"),
    ("alias-bomb", "plan", "cluster", lambda t, g: [*_LLAMA, "--cluster", text(t, "c.yaml", bomb())],
     r"cluster file: .*\(line 2\): uses a YAML alias"),
    ("deep-yaml", "plan", "cluster",
     lambda t, g: [*_LLAMA, "--cluster", text(t, "c.yaml", "a: " + "[" * 3000 + "]" * 3000 + "\n")],
     r"cluster file: .*nests lists or mappings more than 32 deep"),
    ("duplicate-key", "plan", "cluster",
     lambda t, g: [*_LLAMA, "--cluster", _cluster(t, g, (CLUSTERS_DIR / "llama3-8b.yaml").read_text() + "gpu: h100\n")],
     r"cluster file: .*key 'gpu' is given twice"),
    ("huge-int", "plan", "cluster", lambda t, g: [*_LLAMA, "--cluster", _cluster(t, g, num_gpus=_BIG)],
     r"cluster file: .*integer 1000.* does not fit 64 bits"),
    ("gpus-per-node-above-gpus", "plan", "cluster", lambda t, g: [*_LLAMA, "--cluster", _cluster(t, g, gpus_per_node=64)],
     r"cluster\.gpus_per_node: 64 is more than num_gpus 16"),
    ("recompute-no", "plan", "cluster",
     lambda t, g: [*_LLAMA, "--cluster", _cluster(t, g, (CLUSTERS_DIR / "llama3-8b.yaml").read_text().replace(
         "memory_headroom: 0.1}", "memory_headroom: 0.1, recompute: no}"))],
     r"cluster\.training\.recompute: expected str, got False \(quote the word, e\.g\. recompute: \"none\""),
    ("fifo", "plan", "config", lambda t, g: [_fifo(t, "model/config.json"), "--quiet", "--out", "out.json"],
     r"model config: .*is a FIFO"),
    ("full-attention-interval-0", "plan", "config",
     lambda t, g: [_config(t, "qwen3-next-80b-a3b", full_attention_interval=0), "--quiet", "--out", "out.json"],
     r"config\.full_attention_interval: must be positive"),
    ("decoder-sparse-step-0", "plan", "config",
     lambda t, g: [_config(t, "qwen3-30b-a3b", decoder_sparse_step=0), "--quiet", "--out", "out.json"],
     r"config\.decoder_sparse_step: must be positive"),
    ("head-dim-0", "plan", "config", lambda t, g: [_config(t, "llama3-8b", head_dim=0), "--quiet", "--out", "out.json"],
     r"config\.head_dim: must be positive"),
    ("more-kv-heads", "plan", "config",
     lambda t, g: [_config(t, "llama3-8b", num_key_value_heads=64), "--quiet", "--out", "out.json"],
     r"config\.num_key_value_heads: 64 key/value heads do not divide the 32 attention heads"),
    ("duplicate-key", "plan", "config",
     lambda t, g: [_config_text(t, (MODELS_DIR / "llama3-8b.json").read_text().rstrip()[:-1] + ', "vocab_size": 7}'),
                   "--quiet", "--out", "out.json"], r"model config: .*key 'vocab_size' is given twice"),
    ("5000-layers", "plan", "costs", lambda t, g: [
        *_LLAMA, "--profile", _json(t, "c.json", _edit(g["costs"], lambda d: d.update(
            layers=d["layers"][:1] + d["layers"][1:2] * 5000 + d["layers"][-1:])))],
     r"profile\.layers: has 5002 entries, above the planner's limit of 514"),
    ("head-first", "plan", "costs",
     lambda t, g: [*_LLAMA, "--profile", _json(t, "c.json", _edit(g["costs"], lambda d: d.update(
         layers=d["layers"][-1:] + d["layers"][:-1])))],
     r"profile\.layers\[1\]\.role: embedding after head"),
    ("two-embeddings", "plan", "costs",
     lambda t, g: [*_LLAMA, "--profile", _json(t, "c.json", _layers(g, ["embedding", "embedding"]))],
     r"profile\.layers\[0\]\.role: a second embedding"),
    ("microbatch-size-1e30", "plan", "costs", lambda t, g: [
        *_LLAMA, "--profile", _json(t, "c.json", _edit(g["costs"], lambda d: d.update(microbatch_size=_BIG)))],
     r"profile: .*does not fit 64 bits"),
    ("microbatch-size-1e9", "plan", "costs", lambda t, g: [
        *_LLAMA, "--profile", _json(t, "c.json", _edit(g["costs"], lambda d: d.update(microbatch_size=10**9)))],
     r"profile\.microbatch_size: expected an integer in 1\.\.65536"),
    ("fifo", "profile --compare", "costs", lambda t, g: ["--compare", _fifo(t, "a.json"), _json(t, "b.json", g["costs"])],
     r"profile: .*a\.json is a FIFO"),
    ("count-1e30", "replan", "trace", lambda t, g: [
        str(SHIPPED_PLAN), "--routing", text(t, "r.jsonl", '{"iter": 1, "layer": 4, "tpe": [%d]}\n' % _BIG),
        "--out", "out.json"], r"r\.jsonl:1: integer 1000.* does not fit 64 bits"),
    ("count-1e30-float", "replan", "trace", lambda t, g: [
        str(SHIPPED_PLAN), "--routing", _json(t, "r.json", _edit(json.loads((ROUTING / "start.json").read_text()),
                                                                lambda d: next(iter(d["layers"].values())).__setitem__(0, 1e30))),
        "--out", "out.json"],
     r"r\.json:1: tpe: token count 1e\+30 is above the planner's limit"),
    ("deep-json-line", "replan", "trace", lambda t, g: [
        str(SHIPPED_PLAN), "--routing", text(t, "r.jsonl", "[" * 100_000 + "]" * 100_000 + "\n"), "--out", "out.json"],
     r"r\.jsonl:1: the line nests lists or objects more than 32 deep"),
    ("fifo", "replan", "trace", lambda t, g: [str(SHIPPED_PLAN), "--routing", _fifo(t, "r.jsonl"), "--out", "out.json"],
     r"routing trace: .*r\.jsonl is a FIFO"),
    ("expert-tp-1000000", "replan", "option",
     lambda t, g: [str(SHIPPED_PLAN), *_TRACE, "--expert-tensor-parallel-size", "1000000"],
     r"--expert-tensor-parallel-size: is read only with Megatron's per-rank logs"),
    ("analytical-routing-dev-zero", "profile", "trace",
     lambda t, g: ["qwen3-30b-a3b", "--analytical", "--routing", "/dev/zero", "--out", "out.json"],
     r"routing trace: /dev/zero is a device"),
    ("seed-2^64", "profile", "option", lambda t, g: ["llama3-8b", "--seed", str(2**64), "--out", "out.json"],
     r"'--seed': 18446744073709551616 is not in the range"),
    ("drop-policy", "profile", "option",
     lambda t, g: ["llama3-8b", "--moe-token-drop-policy", "never", "--out", "out.json"], r"'--moe-token-drop-policy'"),
    ("seed-2^64", "replay", "option", lambda t, g: [str(SHIPPED_PLAN), "--seed", str(2**64), "--out", "out.json"],
     r"'--seed': 18446744073709551616 is not in the range"),
    ("timeout-1e-9", "replay", "option", lambda t, g: [str(SHIPPED_PLAN), "--timeout", "1e-9", "--out", "out.json"],
     r"'--timeout': 1e-09 is not in the range"),
    ("link-scale-nan", "replay", "option", lambda t, g: [str(SHIPPED_PLAN), "--link-scale", "nan", "--out", "out.json"],
     r"'--link-scale': 'nan' is not a finite number"),
    ("capacity-nan", "replay", "option",
     lambda t, g: [str(SHIPPED_PLAN), "--moe-expert-capacity-factor", "nan", "--out", "out.json"],
     r"'--moe-expert-capacity-factor': 'nan' is not a finite number"),
    ("seed-2^64", "plan", "option", lambda t, g: [*_LLAMA, "--seed", str(2**64)], r"'--seed': .* is not in the range"),
    ("memory-limit-1e308mb", "plan", "option", lambda t, g: [*_LLAMA, "--memory-limit", "1e308mb"],
     r"'--memory-limit': '1e308mb' is more microbatches in flight than the planner's limit"),
    ("memory-limit-arabic", "plan", "option", lambda t, g: [*_LLAMA, "--memory-limit", f"8{_ARABIC_3}GiB"],
     r"'--memory-limit': .* has non-ASCII characters"),
    ("deadline-arabic", "plan", "option",
     lambda t, g: [*_LLAMA, "--microbatches", "32", "--deadline", f"0W3={_ARABIC_3}"],
     r"'--deadline': .* has non-ASCII characters"),
    ("gpus-1e9", "plan", "option", lambda t, g: [*_LLAMA, "--gpus", "1000000000"], r"'--gpus': 1000000000 is not in"),
    ("dev-null", "plan", "--out", lambda t, g: ["llama3-8b", "--quiet", "--out", "/dev/null"],
     r"--out: /dev/null exists and is not a regular file"),
    ("symlink-to-device", "plan", "--out",
     lambda t, g: ["llama3-8b", "--quiet", "--out", str(_link(t, "plan.json", "/dev/null"))],
     r"--out: .*plan\.json exists and is not a regular file"),
    ("fifo", "plan", "--out", lambda t, g: ["llama3-8b", "--quiet", "--out", _fifo(t, "o.json")],
     r"--out: .*o\.json exists and is not a regular file"),
    ("name-300-bytes", "plan", "--out", lambda t, g: ["llama3-8b", "--quiet", "--out", "a" * 300 + ".json"],
     r"--out: the name a{24}\.\.\. is 305 bytes, above the file system's 255"),
    ("dev-null", "profile", "--out", lambda t, g: ["llama3-8b", "--analytical", "--out", "/dev/null"],
     r"--out: /dev/null exists and is not a regular file"),
    ("symlink-to-device", "replan", "--out",
     lambda t, g: [str(SHIPPED_PLAN), "--routing", str(ROUTING / "hot_late.jsonl"), "--out", str(_link(t, "n.json", "/dev/null"))],
     r"--out: .*n\.json exists and is not a regular file"),
    ("dev-null", "replay", "--out", lambda t, g: [str(SHIPPED_PLAN), "--out", "/dev/null"],
     r"--out: /dev/null exists and is not a regular file"),
    ("dev-null", "export", "--out", lambda t, g: [str(SHIPPED_PLAN), "--format", "torch-csv", "--out", "/dev/null"],
     r"--out: /dev/null exists and is not a regular file"),
]




# [Note: input matrix] Every file a verb reads goes through the guarded reader
# (planner.core.reader), so each attack on the file itself is tried on every (verb, input) pair.
PAIRS: dict[tuple[str, str], Callable[[str], list[str]]] = {
    ("validate", "plan"): lambda p: [p],
    ("simulate", "plan"): lambda p: [p],
    ("export", "plan"): lambda p: [p, "--format", "torch-csv", "--out", "out.csv"],
    ("replan", "plan"): lambda p: [p, *_TRACE],
    ("replay", "plan"): lambda p: [p, "--out", "out.json"],
    ("plan", "config"): lambda p: [p, "--cluster", str(CLUSTERS_DIR / "llama3-8b.yaml"), "--quiet", "--out", "out.json"],
    ("profile", "config"): lambda p: [p, "--analytical", "--cluster", str(CLUSTERS_DIR / "llama3-8b.yaml"),
                                      "--out", "out.json"],
    ("plan", "cluster"): lambda p: [*_LLAMA, "--cluster", p],
    ("profile", "cluster"): lambda p: ["llama3-8b", "--analytical", "--cluster", p, "--out", "out.json"],
    ("plan", "costs"): lambda p: [*_LLAMA, "--profile", p],
    ("profile --compare", "costs"): lambda p: ["--compare", p, str(SHIPPED_PLAN)],
    ("replan", "costs"): lambda p: [str(SHIPPED_PLAN), *_TRACE, "--profile", p],
    ("replan", "trace"): lambda p: [str(SHIPPED_PLAN), "--routing", p, "--out", "out.json"],
    ("replan", "--then trace"): lambda p: [str(SHIPPED_PLAN), *_TRACE, "--then", p],
    ("profile", "trace"): lambda p: ["qwen3-30b-a3b", "--analytical", "--routing", p, "--out", "out.json"],
}
_LINE = '{"iter": 1, "layer": 4, "tpe": [1, 2]}'
ATTACKS: dict[str, tuple[Callable[[Path, bool], str], str]] = {
    "fifo": (lambda t, lines: _fifo(t, "in.json"), r"is a FIFO, not a regular file"),
    "dev-zero": (lambda t, lines: "/dev/zero", r"/dev/zero is a device"),
    "over-size-cap": (lambda t, lines: _sparse(t, "in.json", (257 if lines else 65) * 2**20), r"is larger than the"),
    "binary": (lambda t, lines: _bytes(t, b"\x80\x81\x00\xff" * 8), r"is not UTF-8 text"),
    "deep": (lambda t, lines: text(t, "in.json", "[" * 100_000 + "]" * 100_000 + "\n"),
             r"nests lists or (objects|mappings) more than 32 deep"),
    "duplicate-key": (lambda t, lines: text(t, "in.json", (_LINE[:-1] + ', "iter": 2}' if lines else
                                                            '{"model_type": "llama", "model_type": "llama"}') + "\n"),
                      r"key 'iter' is given twice|key 'model_type' is given twice"),
    "int-beyond-int64": (lambda t, lines: text(t, "in.json", (_LINE.replace('"iter": 1', '"iter": ' + "9" * 30) if lines
                                                               else '{"zz": ' + "9" * 30 + "}") + "\n"),
                         r"does not fit 64 bits"),
}
MATRIX = [(a, v, k) for (v, k) in PAIRS for a in ATTACKS] + [("alias-bomb", v, k) for (v, k) in PAIRS if k == "cluster"]


def _bytes(tmp: Path, data: bytes) -> str:
    (tmp / "in.json").write_bytes(data)
    return str(tmp / "in.json")
