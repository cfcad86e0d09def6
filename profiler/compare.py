"""Two cost tables side by side per layer type (``ppplan profile --compare A B``).

Layers of one base type (the type key without the ``@index`` a routing imbalance adds)
are averaged. Times are in milliseconds per microbatch; because a measured profile is
usually taken at reduced width and an analytical one at full width, each type's share
of the table's total serial time (``F + I + W + A2A`` over all layers) is shown too:
the shares compare the *shape* of two tables whose absolute scale differs. A second
block lists the hidden share ``1 - OV / serial`` of every pair of base types both
tables hold (taken at the first layer of each type).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from planner.core.costs import CostTable, LayerCost

__all__ = ["TypeRow", "type_rows", "render_comparison"]


@dataclass(frozen=True, kw_only=True)
class TypeRow:
    """Mean costs of one base layer type in one table."""

    f_ms: float
    """Forward compute."""
    i_ms: float
    """Input-gradient compute."""
    w_ms: float
    """Weight-gradient compute."""
    a2a_ms: float
    """Exposed all-to-all, forward + backward."""
    share: float
    """Share of the table's total serial time taken by all layers of this type."""
    count: int
    """Layers of this type."""


def _base(t: str) -> str:
    return t.split("@", 1)[0]


def _serial(lc: LayerCost) -> float:
    return lc.f + lc.i + lc.w + lc.a2a_f + lc.a2a_b


def type_rows(table: CostTable) -> dict[str, TypeRow]:
    """Mean costs per base layer type, in order of first appearance."""
    groups: dict[str, list[LayerCost]] = defaultdict(list)
    for lc in table.layers:
        groups[_base(lc.type)].append(lc)
    total = sum(_serial(lc) for lc in table.layers) or 1.0
    return {t: TypeRow(f_ms=1e3 * sum(lc.f for lc in g) / len(g), i_ms=1e3 * sum(lc.i for lc in g) / len(g),
                       w_ms=1e3 * sum(lc.w for lc in g) / len(g),
                       a2a_ms=1e3 * sum(lc.a2a_f + lc.a2a_b for lc in g) / len(g),
                       share=sum(_serial(lc) for lc in g) / total, count=len(g))
            for t, g in groups.items()}


def _hidden(table: CostTable) -> dict[tuple[str, str], float]:
    """Hidden share per base type pair, from the first layer of each base type."""
    first: dict[str, LayerCost] = {}
    for lc in table.layers:
        first.setdefault(_base(lc.type), lc)
    out = {}
    for ba, la in first.items():
        for bb, lb in first.items():
            serial = la.serial_f + lb.serial_i
            if (la.type, lb.type) in table.pairs and serial > 0:
                out[(ba, bb)] = 1.0 - table.pairs[(la.type, lb.type)] / serial
    return out


def _label(table: CostTable, name: str) -> str:
    return f"{name}: {table.model}, {table.source} on {table.device or '?'}, scale {table.scale:g}, " \
           f"{table.microbatch_size} x {table.seq_len} tokens"


def render_comparison(a: CostTable, b: CostTable, *, names: tuple[str, str] = ("A", "B")) -> str:
    """A text table: per type F / I / W / A2A (ms) and share of serial time, A then B."""
    ra, rb = type_rows(a), type_rows(b)
    types = list(dict.fromkeys([*ra, *rb]))
    lines = [_label(a, names[0]), _label(b, names[1]), ""]
    head = f"{'type':<16}" + "".join(f"{n + ' ' + c:>11}" for n in names for c in ("F", "I", "W", "A2A", "share"))
    lines += [head + "  (ms; share of serial time)", "-" * len(head)]
    for t in types:
        cells = []
        for rows in (ra, rb):
            r = rows.get(t)
            cells += ([f"{v:>11.3f}" for v in (r.f_ms, r.i_ms, r.w_ms, r.a2a_ms)] + [f"{r.share:>11.1%}"]
                      if r else [f"{'-':>11}"] * 5)
        lines.append(f"{t:<16}" + "".join(cells))
    ha, hb = _hidden(a), _hidden(b)
    both = [k for k in ha if k in hb]
    if both:
        lines += ["", f"{'pair (F / B)':<34}{names[0] + ' hidden':>12}{names[1] + ' hidden':>12}"]
        lines += [f"{fa + ' / ' + fb:<34}{ha[(fa, fb)]:>12.1%}{hb[(fa, fb)]:>12.1%}" for fa, fb in both]
    return "\n".join(lines)
