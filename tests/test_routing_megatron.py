"""Megatron's per-rank tokens-per-expert logs: rank order, local layers and experts, bad logs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from planner.core.errors import InputError
from planner.replanning.megatron_layout import ORDERS, rank_coords, recompute_calls, schedule_table, tpe_layout
from profiler.megatron_tpe import TpeLayout, read_megatron
from profiler.routing import load_routing
from test_routing import _model

_SPEC = importlib.util.spec_from_file_location(
    "make_traces", Path(__file__).resolve().parent.parent / "examples" / "routing" / "make_traces.py")
make_traces = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(make_traces)

# Tiny model (test_routing._model): 0 E, 1 dense decoder, 2-4 MoE decoders, 5 MoE MTP, 6 head; 8 experts.
MOE = (2, 3, 4, 5)


def _layout(*, tp: int = 2, dp: int = 2, ep: int = 2, cp: int = 1, vpp: int = 1, microbatches: int = 4,
            order: str = ORDERS[False], expert_tp: int | None = None) -> TpeLayout:
    bounds = [(0, 3), (3, 7)] if vpp == 1 else [(0, 2), (2, 3), (3, 4), (4, 7)]
    return tpe_layout(_model(), bounds=bounds, pp=2, vpp=vpp, tp=tp, ep=ep, dp=dp, cp=cp,
                      microbatches=microbatches, order=order, expert_tp=expert_tp)


def _counts(iterations=(10, 20)) -> dict[tuple[int, int], list[int]]:
    """Different counts per (iteration, layer) so a mix-up shows."""
    return {(it, idx): [it + 7 * idx + 3 * e for e in range(8)] for it in iterations for idx in MOE}


def _logs(tmp_path: Path, layout: TpeLayout, **kw) -> Path:
    folder = tmp_path / "tokens_per_expert"
    make_traces.write_megatron_logs(folder, layout, _counts(), seed=0, **kw)
    return folder


@pytest.mark.parametrize("order, tp, etp, ep, dp", [(ORDERS[False], 2, 2, 2, 4), (ORDERS[False], 2, 1, 4, 2),
                                                    (ORDERS[True], 2, 1, 2, 4)])
def test_rank_order_matches_megatron_rank_generator(order, tp, etp, ep, dp):
    ps = pytest.importorskip("megatron.core.parallel_state")
    pp = 2
    attn = ps.RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=1, order=order)
    expert = ps.RankGenerator(tp=etp, ep=ep, dp=tp * dp // (etp * ep), pp=pp, cp=1, order=order)
    assert attn.get_ranks("pp") == expert.get_ranks("pp")  # what initialize_model_parallel asserts
    layout = tpe_layout(_model(), bounds=[(0, 3), (3, 7)], pp=pp, vpp=1, tp=tp, ep=ep, dp=dp,
                        microbatches=4, order=order, expert_tp=etp)
    for dim, field in (("pp", "pp"), ("ep", "ep"), ("dp", "edp"), ("tp", "etp")):
        for group in expert.get_ranks(dim):
            assert [getattr(layout.ranks[r], field) for r in group] == list(range(len(group)))
    assert rank_coords(5, order, {"tp": tp, "cp": 1, "ep": 1, "dp": dp, "pp": pp})["tp"] == 1


def test_rank_orders_megatron_refuses():
    with pytest.raises(InputError, match=r"expert data-parallel size 2 differs from dp 4"):
        tpe_layout(_model(), bounds=[(0, 3), (3, 7)], pp=2, vpp=1, tp=2, ep=2, dp=4, microbatches=4,
                   order=ORDERS[True])
    with pytest.raises(InputError, match=r"world 8 is not divisible by etp x ep x pp = 16"):
        tpe_layout(_model(), bounds=[(0, 3), (3, 7)], pp=2, vpp=1, tp=2, ep=4, dp=2, microbatches=4)


def test_schedule_table_is_megatrons():
    # Megatron's docstring example (schedules.py, get_schedule_table): PP2 N3M5 with VP2.
    assert [mb for mb, _ in schedule_table(5, 2, 3)] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [ch for _, ch in schedule_table(5, 2, 3)] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


def test_local_layers_and_experts():
    layout = _layout()
    # pipeline rank 0: E, dense decoder (local 0), MoE decoder 2 (local 1); rank 1: 3, 4, MTP 5, head.
    assert layout.moe_layers[0] == {("decoder", -1, 1): ((0, 2),)}
    assert layout.moe_layers[1] == {("decoder", -1, 0): ((0, 3),), ("decoder", -1, 1): ((0, 4),),
                                    ("mtp", 0, 0): ((0, 5),)}
    assert layout.local_experts == 4 and layout.world_size == 8


@pytest.mark.parametrize("kw", [dict(), dict(tp=1, dp=4), dict(tp=1, cp=2), dict(order=ORDERS[True], expert_tp=1), dict(vpp=2),
                                dict(tp=1, dp=4, ep=4, vpp=2, microbatches=6)],
                         ids=["tp2-etp-duplicates", "edp2-summed", "cp2-summed", "tp-pp-dp-etp1", "vpp2", "vpp2-odd-group"])
def test_logs_read_back_to_the_iteration_counts(tmp_path, kw):
    layout = _layout(**kw)
    folder = _logs(tmp_path, layout)
    assert read_megatron([folder], _model(), layout) == {k: [float(x) for x in v] for k, v in _counts().items()}
    assert read_megatron([tmp_path], _model(), layout) == read_megatron(sorted(folder.iterdir()), _model(), layout)


@pytest.mark.parametrize("vpp", [1, 2])
def test_recomputed_forwards_are_not_counted_twice(tmp_path, vpp):
    layout = _layout(vpp=vpp)
    folder = _logs(tmp_path, layout, recompute=True)
    rows = [len(json.loads(line)["tpe"]) for line in (folder / "rank4.jsonl").read_text().splitlines()]
    assert rows[0] == (8 if vpp == 1 else 16)  # vpp 2: local decoder 0 holds layers 2 and 4
    assert read_megatron([folder], _model(), layout) == {k: [float(x) for x in v] for k, v in _counts().items()}


def test_virtual_chunks_sharing_a_local_index_split_by_forward_order(tmp_path):
    layout = _layout(tp=1, dp=2, ep=2, vpp=2, microbatches=2)
    # rank 1: chunk 0 = layer 2 (local 0), chunk 1 = layers 4 (local 0), MTP, head.
    assert layout.moe_layers[1][("decoder", -1, 0)] == ((0, 2), (1, 4))
    assert [ch for _, ch in layout.forward_calls] == [0, 0, 1, 1]
    a, b = [1, 0, 0, 0], [0, 0, 0, 1]
    lines = {0: [{"iter": 1, "block": "decoder", "layer": 0, "tpe": [a, a]}],  # rank 0: layer 3 (chunk 1)
             1: [{"iter": 1, "block": "decoder", "layer": 0, "tpe": [a, a, b, b]},
                 {"iter": 1, "block": "mtp", "mtp_idx": 0, "layer": 0, "tpe": [b, b]}]}
    for rank, c in enumerate(layout.ranks):
        (tmp_path / f"rank{rank}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines[c.pp]))
    out = read_megatron([tmp_path], _model(), layout)
    assert out[(1, 2)] == [2.0, 0, 0, 0, 2.0, 0, 0, 0]  # EP ranks 0 and 1 both logged [a, a] for chunk 0
    assert out[(1, 4)] == [0, 0, 0, 2.0, 0, 0, 0, 2.0]
    bad = {"iter": 1, "block": "decoder", "layer": 0, "tpe": [a] * 6}
    (tmp_path / "rank2.jsonl").write_text(json.dumps(bad) + "\n")  # ranks 2 and 3 are pipeline rank 1
    with pytest.raises(InputError, match=r"rank2\.jsonl:1: tpe: 6 rows for a local index that 2 model chunks "
                       r"share, expected 4 .* or 8 .*merges the chunks"):
        read_megatron([tmp_path], _model(), layout)


def test_recompute_calls_follow_megatrons_interleaved_schedule():
    # pp 2, vpp 2, 4 microbatches, group 2: table (0,0) (1,0) (0,1) (1,1) (2,0) (3,0) (2,1) (3,1).
    # Rank 0 warms up (2-0-1)*2 + 1*2 = 4 forwards, rank 1 2; backward k runs chunk 1 - table chunk.
    assert recompute_calls(4, 2, 2, 0) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (0, 1), (3, 0), (1, 1),
                                           (2, 1), (0, 0), (3, 1), (1, 0), (2, 1), (3, 1), (2, 0), (3, 0)]
    assert recompute_calls(4, 2, 2, 1) == [(0, 0), (1, 0), (0, 1), (0, 1), (1, 1), (1, 1), (2, 0), (0, 0),
                                           (3, 0), (1, 0), (2, 1), (2, 1), (3, 1), (3, 1), (2, 0), (3, 0)]
    assert recompute_calls(3, 1, 4, 0) == [(0, 0), (1, 0), (2, 0), (0, 0), (1, 0), (2, 0)]  # warm-up 3 of 3


def _edit(folder: Path, rank: int, line: int, **changes) -> None:
    path = folder / f"rank{rank}.jsonl"
    lines = path.read_text().splitlines()
    rec = json.loads(lines[line - 1])
    rec.update(changes)
    lines[line - 1] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")


def _drop_line(folder: Path, rank: int, line: int) -> None:
    path = folder / f"rank{rank}.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:line - 1] + lines[line:]) + "\n")


# Rank 0 logs one record per iteration (decoder local 1); rank 4 (pipeline rank 1) logs three.
BAD = [
    (lambda f: (f / "rank8.jsonl").write_text("{}\n"),
     r"rank8\.jsonl: rank 8 is beyond the plan's world size 8 \(pp 2 x tp 2 x cp 1 x dp 2"),
    (lambda f: (f / "rank3.jsonl").unlink(), r"no log for rank\(s\) 3: the plan implies 8 ranks"),
    (lambda f: _edit(f, 4, 2, layer=2), r"rank4\.jsonl:2: layer: decoder layer 2 is beyond pipeline rank 1's 2 "
                                         r"decoder layers"),
    (lambda f: _edit(f, 0, 1, layer=0), r"rank0\.jsonl:1: layer: decoder layer 0 of pipeline rank 0 has no experts"),
    (lambda f: _edit(f, 4, 3, mtp_idx=1), r"rank4\.jsonl:3: mtp_idx: mtp layer 1\.0 is beyond"),
    (lambda f: _edit(f, 0, 1, tpe=[[1] * 8] * 4), r"rank0\.jsonl:1: tpe: a row has 8 counts, the rank holds "
                                                   r"4 local experts"),
    (lambda f: _edit(f, 0, 1, tpe=[[1] * 4] * 3), r"rank0\.jsonl:1: tpe: 3 rows, expected 4 \(one per "
                                                   r"microbatch\) or 8"),
    (lambda f: _edit(f, 0, 1, tpe=[[1, -1, 1, 1]] * 4), r"rank0\.jsonl:1: tpe: -1 is not a token count"),
    (lambda f: _edit(f, 0, 2, iter=5), r"rank0\.jsonl:2: iter: iteration 5 comes after 10"),
    (lambda f: _edit(f, 0, 2, iter=30), r"rank0\.jsonl:2: iter: iteration 30 is not in the other logs"),
    (lambda f: _drop_line(f, 0, 2), r"rank0\.jsonl: iter: no records for iteration 20, which .*rank1\.jsonl has"),
    (lambda f: _drop_line(f, 4, 2), r"rank4\.jsonl:1: layer: iteration 10 has no record for decoder layer 1"),
    (lambda f: _edit(f, 4, 2, layer=0), r"rank4\.jsonl:2: second record for iteration 10, decoder layer 0"),
    (lambda f: _edit(f, 1, 1, tpe=[[9, 9, 9, 9]] * 4), r"rank1\.jsonl:1: tpe: iteration 10, decoder layer 1 "
                                                        r"differs from rank 0, its expert-tensor-parallel peer"),
    (lambda f: _edit(f, 0, 1, block="encoder"), r"rank0\.jsonl:1: block: unknown 'encoder'"),
    (lambda f: (f / "rank2.jsonl").write_text("{oops\n"), r"rank2\.jsonl:1: not valid JSON"),
    (lambda f: (f / "rank2.jsonl").write_text("\n"), r"rank2\.jsonl:1: empty log"),
]


@pytest.mark.parametrize("spoil, match", BAD)
def test_bad_logs_are_one_line_errors(tmp_path, spoil, match):
    layout = _layout()
    folder = _logs(tmp_path, layout)
    spoil(folder)
    with pytest.raises(InputError, match=match) as exc:
        load_routing([folder], _model(), ep=2, fmt="megatron", layout=layout)
    assert "\n" not in str(exc.value)


def test_file_names_and_folders(tmp_path):
    layout = _layout()
    with pytest.raises(InputError, match=r"holds no rank<R>\.jsonl files"):
        read_megatron([tmp_path], _model(), layout)
    other = tmp_path / "trace.jsonl"
    other.write_text("{}\n")
    with pytest.raises(InputError, match=r"trace\.jsonl: is not named rank<R>\.jsonl"):
        read_megatron([other], _model(), layout)
    folder = _logs(tmp_path / "run", layout)
    with pytest.raises(InputError, match=r"rank 0 given twice"):
        read_megatron([folder, folder / "rank0.jsonl"], _model(), layout)
