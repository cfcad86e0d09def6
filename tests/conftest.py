"""Shared fixtures: hand-computable stage costs, small cost tables, an in-process CLI runner."""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest

from planner.core.costs import CostTable, LayerCost, P2PCost
from planner.core.placement import stage_ranks
from planner.core.stage_costs import StageCosts

ZERO_P2P = P2PCost(latency_s=0.0, bandwidth=math.inf)
"""A free pipeline link: every P2P transfer takes 0 s."""


def _per_stage(value: float | Sequence[float], n: int) -> tuple:
    return tuple(value) if isinstance(value, Sequence) else (value,) * n


@pytest.fixture
def make_costs() -> Callable[..., StageCosts]:
    """Factory of ``StageCosts``: scalars are repeated per stage, sequences taken as given."""

    def make(pp: int, vpp: int = 1, *, f: float | Sequence[float] = 1.0,
             i: float | Sequence[float] = 1.0, w: float | Sequence[float] = 0.0,
             act: int | Sequence[int] = 0, act_w: int | Sequence[int] = 0,
             static: int | Sequence[int] = 0, out: int | Sequence[int] = 0,
             p2p: P2PCost = ZERO_P2P, placement: str = "loop",
             fused: dict[tuple[int, int], float] | None = None) -> StageCosts:
        n = pp * vpp
        return StageCosts(f=_per_stage(f, n), i=_per_stage(i, n), w=_per_stage(w, n),
                          act_bytes=_per_stage(act, n), act_w_bytes=_per_stage(act_w, n),
                          static_bytes=_per_stage(static, n), out_bytes=_per_stage(out, n),
                          ranks=tuple(stage_ranks(n, pp, placement)), fused=fused or {}, p2p=p2p)

    return make


@pytest.fixture
def toy_table() -> Callable[..., CostTable]:
    """Factory of a small dense/MoE cost table with embedding and head layers."""

    def make(num_decoder: int = 6, *, moe_every: int = 2, overlap: float = 0.7) -> CostTable:
        layers = [LayerCost(type="embedding", role="embedding", f=1e-4, i=1e-4, w=0.0,
                            act_bytes=1 << 20, out_bytes=1 << 20, param_bytes=1 << 24)]
        for k in range(num_decoder):
            moe = (k + 1) % moe_every == 0
            layers.append(LayerCost(
                type="gqa+moe" if moe else "gqa+dense", f=2e-3, i=4e-3, w=2e-3,
                a2a_f=1e-3 if moe else 0.0, a2a_b=1e-3 if moe else 0.0,
                act_bytes=1 << 24, act_w_bytes=1 << 22, param_bytes=1 << 26, grad_bytes=1 << 27,
                optim_bytes=1 << 26, out_bytes=1 << 20, flops=1e12))
        layers.append(LayerCost(type="head", role="head", f=1e-3, i=1e-3, w=1e-3,
                                act_bytes=1 << 22, act_w_bytes=1 << 20, param_bytes=1 << 24,
                                out_bytes=1 << 20, flops=1e11))
        serial = {lc.type: lc for lc in layers}
        pairs = {(a, b): overlap * (serial[a].serial_f + serial[b].serial_i)
                 for a in ("gqa+moe", "gqa+dense") for b in ("gqa+moe", "gqa+dense")}
        return CostTable(model="toy", source="user", layers=tuple(layers), pairs=pairs,
                         p2p=P2PCost(latency_s=1e-5, bandwidth=1e10), seq_len=128)

    return make


@dataclass(frozen=True)
class CliResult:
    """Outcome of one in-process ``ppplan`` run."""

    code: int
    """Exit code."""
    out: str
    """Captured stdout."""
    err: str
    """Captured stderr."""


@pytest.fixture
def ppplan(capsys, monkeypatch, tmp_path) -> Callable[..., CliResult]:
    """Run ``planner.cli.main(argv)`` in ``tmp_path``; returns its exit code and output.

    An exception escaping ``main`` (a traceback for the user) fails the calling test.
    """
    from planner.cli import main

    monkeypatch.chdir(tmp_path)

    def run(*argv: str) -> CliResult:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main(list(argv))
        captured = capsys.readouterr()
        code = exc.value.code
        return CliResult(code if isinstance(code, int) else (0 if code is None else 1),
                         captured.out, captured.err)

    return run


class TtyStream(io.StringIO):
    """A text stream that says it is a terminal (progress bars draw on terminals only)."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def progress_shown(monkeypatch):
    """Progress output on (``PPPLAN_QUIET`` unset, ``set_quiet(False)``), and again after."""
    from planner import progress as prog

    monkeypatch.delenv("PPPLAN_QUIET", raising=False)
    prog.set_quiet(False)
    yield
    prog.set_quiet(False)
