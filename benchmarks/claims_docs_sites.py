"""Claims of docs/sites.md: pp or dp across the slow link between two sites (``benchmarks/sites.py``)."""

from __future__ import annotations

from claim_kit import Claim, Page, Ratio, row_pattern
from claim_outputs import by

__all__ = ["CLAIMS"]

_PAGE = "docs/sites.md"
_TABLE = "## pp or dp across the link"
COMMAND = "python benchmarks/sites.py --json"
CASES = ("llama3-8b", "llama3-8b-gb1024", "qwen3-30b-a3b-ep4")
LATENCIES_MS = (1, 10, 100)
BANDWIDTHS_GBPS = (1, 10, 100, 400)


def _row(case: str, latency: int, gbps: int):
    def read(run) -> tuple:
        r = by(run.json()["rows"], case=case, latency_ms=latency, gbps=gbps)
        return r["pp_step_s"], r["dp_step_s"], r["crossing"], r["crossover_gbps"]
    return read


CLAIMS = [
    Claim(id=f"sites-{case}-{lat}ms-{g}gbps", where=f"pp or dp across the link: {case} at {lat} ms, {g} Gb/s",
          command=COMMAND, figure=Page(path=_PAGE, section=_TABLE, pattern=row_pattern(case, str(lat), str(g), cells=4)),
          measured=_row(case, lat, g))
    for case in CASES for lat in LATENCIES_MS for g in BANDWIDTHS_GBPS] + [
    Claim(id="sites-bench-wall", where="pp or dp across the link: the benchmark's wall time",
          command=COMMAND, figure=Page(path=_PAGE, section=_TABLE, pattern=r"--json` \(([\d.]+) s wall"),
          measured=lambda run: sum(r["wall_s"] for r in run.json()["rows"]),
          compare=Ratio(3.0, "wall clock on a shared 2-core machine")),
]
