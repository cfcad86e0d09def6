"""Routing trace parsing (both formats), per-layer imbalance, window, and bad traces."""

from __future__ import annotations

import json

import pytest

from planner.core.errors import InputError
from planner.core.hf_config import load_model
from planner.core.model import AttentionSpec, LayerSpec, ModelSpec, MoeSpec
from profiler.routing import layer_factors, load_routing, max_violation, rank_imbalance, routing_format


def _model() -> ModelSpec:
    """E, dense decoder 1, MoE decoder 2-4, MoE MTP, head; 8 experts."""
    layers = [LayerSpec(index=0, role="embedding"), LayerSpec(index=1, role="decoder", mixer="gqa", ffn="dense")]
    layers += [LayerSpec(index=k, role="decoder", mixer="gqa", ffn="moe") for k in (2, 3, 4)]
    layers += [LayerSpec(index=5, role="mtp", mixer="gqa", ffn="moe"), LayerSpec(index=6, role="head")]
    return ModelSpec(name="tiny-moe", hidden=64, vocab=100, intermediate=128,
                     attention=AttentionSpec(num_heads=2, num_kv_heads=1, head_dim=32),
                     moe=MoeSpec(num_experts=8, top_k=2, expert_intermediate=32), layers=tuple(layers))


BAL = [10, 10, 10, 10, 10, 10, 10, 10]
HOT = [40, 20, 10, 10, 5, 5, 5, 5]  # EP 2: ranks load 80 / 20 -> imbalance 1.6


def _rec(it: int, layer: int, counts: list[int], block: str = "decoder", rows: int = 2) -> dict:
    per = len(counts) // rows
    return {"iter": it, "block": block, "layer": layer, "tpe": [counts[r * per:(r + 1) * per] for r in range(rows)]}


def _write_jsonl(path, records) -> str:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return str(path)


def _full(it: int, hot_layer: int | None = None) -> list[dict]:
    recs = [_rec(it, k, HOT if k == hot_layer else BAL) for k in (2, 3, 4)]
    return recs + [_rec(it, 1, BAL, block="mtp")]


def test_metrics():
    assert rank_imbalance(HOT, 2) == pytest.approx(1.6)
    assert rank_imbalance(BAL, 2) == 1.0
    assert max_violation(HOT) == pytest.approx(40 / 12.5 - 1)


def test_megatron_jsonl_maps_layers_and_aggregates(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _full(100, hot_layer=3) + _full(200, hot_layer=3))
    s = load_routing([path], _model(), ep=2)
    assert s.iterations == (100, 200)
    assert sorted(s.imbalance) == [2, 3, 4, 5]  # decoder 2..4 keep their number, MTP 1 -> index 5
    assert s.imbalance[3] == pytest.approx(1.6) and s.imbalance[2] == 1.0
    assert s.tokens_per_expert[3] == [2.0 * x for x in HOT]
    assert layer_factors(s, _model()) == [1.0, 1.0, 1.0, 1.6, 1.0, 1.0, 1.0]


def test_rows_per_source_rank_are_summed(tmp_path):
    recs = [{"iter": 1, "layer": k, "tpe": [HOT, BAL]} for k in (2, 3, 4)]
    recs.append({"iter": 1, "block": "mtp", "layer": 1, "tpe": [BAL]})
    s = load_routing([_write_jsonl(tmp_path / "t.jsonl", recs)], _model(), ep=2)
    assert s.tokens_per_expert[2] == [a + b for a, b in zip(HOT, BAL)]


def test_window_keeps_last_iterations(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _full(100) + _full(200, hot_layer=4))
    assert load_routing([path], _model(), ep=2, window=1).imbalance[4] == pytest.approx(1.6)
    assert load_routing([path], _model(), ep=2).imbalance[4] == pytest.approx(1.3)  # mean of 1.0 and 1.6


def test_plain_json_and_files_add_up(tmp_path):
    plain = tmp_path / "p.json"
    plain.write_text(json.dumps({"layers": {"2": HOT, "3": BAL, "4": BAL, "5": BAL}}))
    s = load_routing([plain], _model(), ep=2)
    assert s.imbalance[2] == pytest.approx(1.6) and s.iterations == (0, 0)
    s2 = load_routing([plain, plain], _model(), ep=2)
    assert s2.tokens_per_expert[2] == [2.0 * x for x in HOT]


def test_shipped_traces_parse():
    model = load_model("qwen3-next-80b-a3b")
    bal = load_routing(["examples/routing/balanced.json"], model, ep=8)
    late = load_routing(["examples/routing/hot_late.jsonl"], model, ep=8)
    assert len(bal.imbalance) == 49 and max(bal.imbalance.values()) < 1.1
    assert min(late.imbalance[k] for k in range(37, 50)) > 1.2
    assert max(late.imbalance[k] for k in range(1, 37)) < 1.1


BAD_LINES = [
    (lambda: [_rec(200, 2, BAL), _rec(100, 3, BAL)], r"t\.jsonl:2: iteration 100 comes after 200"),
    (lambda: [_rec(1, 2, [-1, 2, 3, 4, 5, 6, 7, 8])], r"t\.jsonl:1: tpe: negative token count -1"),
    (lambda: [_rec(1, 2, BAL[:6])], r"t\.jsonl:1: tpe: 2 rows of 3 counts do not match 8 experts"),
    (lambda: [_rec(1, 9, BAL)], r"t\.jsonl:1: layer: decoder layer 9 is not in 1\.\.4"),
    (lambda: [_rec(1, 0, BAL)], r"t\.jsonl:1: layer: .*numbers layers from 1 .*--routing-format megatron"),
    (lambda: [_rec(1, 1, BAL)], r"t\.jsonl:1: layer: decoder layer 1 of tiny-moe has no experts"),
    (lambda: [_rec(1, 2, BAL), _rec(1, 2, BAL)], r"t\.jsonl:2: second record for iteration 1"),
    (lambda: [{"iter": "x", "layer": 2, "tpe": [BAL]}], r"t\.jsonl:1: iter: expected an integer"),
    (lambda: [_rec(1, 2, BAL, block="encoder")], r"t\.jsonl:1: block: unknown 'encoder'"),
    (lambda: [_rec(1, 2, BAL)], r"no counts for MoE layer\(s\) 3, 4, 5"),
]


@pytest.mark.parametrize("records, match", BAD_LINES)
def test_bad_jsonl_is_one_line_error(tmp_path, records, match):
    path = _write_jsonl(tmp_path / "t.jsonl", records())
    with pytest.raises(InputError, match=match) as exc:
        load_routing([path], _model(), ep=2)
    assert "\n" not in str(exc.value)


def test_bad_json_line_and_empty_trace(tmp_path):
    bad = tmp_path / "t.jsonl"
    bad.write_text(json.dumps(_rec(1, 2, BAL)) + "\n{oops\n")
    with pytest.raises(InputError, match=r"t\.jsonl:2: not valid JSON"):
        load_routing([bad], _model(), ep=2)
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(InputError, match=r"e\.jsonl:1: empty trace"):
        load_routing([empty], _model(), ep=2)
    with pytest.raises(InputError, match=r"cannot read"):
        load_routing([tmp_path / "missing.jsonl"], _model(), ep=2)


def test_bad_plain_json(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"layers": {"2": BAL, "3": BAL}}))
    with pytest.raises(InputError, match=r"p\.json:1: layers: has 2 layers, model tiny-moe has 4 MoE layers"):
        load_routing([p], _model(), ep=2)
    p.write_text('{"layers": {\n"2": [1,2,3,4,5,6,7,8],\n"3": [1,2,3],\n"4": [1,1,1,1,1,1,1,1],\n"5": [1,1,1,1,1,1,1,1]}}')
    with pytest.raises(InputError, match=r"p\.json:3: tpe: 1 rows of 3 counts do not match 8 experts"):
        load_routing([p], _model(), ep=2)
    p.write_text('{"layers": {"1": [1,1,1,1,1,1,1,1], "3": [1,1,1,1,1,1,1,1], "4": [1,1,1,1,1,1,1,1], "5": [1,1,1,1,1,1,1,1]}}')
    with pytest.raises(InputError, match=r"layers\.1: is not an MoE layer of tiny-moe"):
        load_routing([p], _model(), ep=2)


def test_bad_arguments(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _full(1))
    with pytest.raises(InputError, match=r"ep: 3 does not divide 8 experts"):
        load_routing([path], _model(), ep=3)
    with pytest.raises(InputError, match=r"--window: must be >= 1"):
        load_routing([path], _model(), ep=2, window=0)
    with pytest.raises(InputError, match=r"no trace given"):
        load_routing([], _model(), ep=2)


def test_layer_without_tokens(tmp_path):
    recs = _full(1)
    recs[0] = _rec(1, 2, [0] * 8)
    with pytest.raises(InputError, match=r"MoE layer 2 has a record with no tokens"):
        load_routing([_write_jsonl(tmp_path / "t.jsonl", recs)], _model(), ep=2)


def test_format_is_detected_or_forced(tmp_path):
    lines = _write_jsonl(tmp_path / "t.jsonl", _full(1, hot_layer=2))
    plain = tmp_path / "p.json"
    plain.write_text(json.dumps({"layers": {"2": HOT, "3": BAL, "4": BAL, "5": BAL}}))
    assert routing_format([lines]) == routing_format([plain]) == "single-file"
    assert routing_format([tmp_path]) == routing_format([tmp_path / "rank3.jsonl"]) == "megatron"
    for fmt in ("jsonl", "auto"):
        assert load_routing([lines], _model(), ep=2, fmt=fmt).imbalance[2] == pytest.approx(1.6)
    assert load_routing([plain], _model(), ep=2, fmt="json").imbalance[2] == pytest.approx(1.6)
    with pytest.raises(InputError, match=r"t\.jsonl:1: not a \{\"layers\": \.\.\.\} JSON object"):
        load_routing([lines], _model(), ep=2, fmt="json")
    with pytest.raises(InputError, match=r"--routing: a folder is a Megatron log, not jsonl"):
        load_routing([tmp_path], _model(), ep=2, fmt="jsonl")
    with pytest.raises(InputError, match=r"--routing: Megatron's per-rank tokens-per-expert logs need the plan"):
        load_routing([tmp_path], _model(), ep=2)
    with pytest.raises(InputError, match=r"--routing-format: unknown 'csv'"):
        load_routing([lines], _model(), ep=2, fmt="csv")
