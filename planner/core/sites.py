"""Sites joined by a slow link: a cluster file's ``sites`` section and which dimension may cross it.

A job that spans buildings or data centres splits its GPUs evenly over ``count`` sites joined
by one inter-site link (``inter_site_gbps`` Gb/s one direction, all flows together, and
``inter_site_latency_ms`` per message). Only a dimension whose traffic is rare and large
may cross it (CrossPipe, ATC'25: pipeline or data parallelism across data centres; Sailor,
SOSP'25): ``pp`` (a pipeline boundary crosses, ``planner.core.p2p.SiteHop``) or ``dp`` (the
gradient reduction crosses, hierarchically: ``profiler.cost_model.comm.site_ring_seconds``).
Tensor and expert parallelism never cross: a layout that would force them across is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from planner.core.costs import CostTable, P2PCost
from planner.core.errors import InputError
from planner.core.p2p import SiteHop

__all__ = ["SitesSpec", "CROSSINGS", "sites_from_config", "site_hop", "with_site_hop"]

CROSSINGS = ("auto", "pp", "dp")
"""What may cross the inter-site link: the planner's choice (auto), a pipeline boundary, or
the data-parallel gradient reduction."""


@dataclass(frozen=True, kw_only=True)
class SitesSpec:
    """A cluster's ``sites`` section (one site, the default, means no slow link)."""

    count: int = 1
    """Sites the GPUs are split over, evenly."""
    inter_site_gbps: float = 0.0
    """Inter-site link bandwidth, Gb/s (bits), one direction, shared by every flow crossing it."""
    inter_site_latency_ms: float = 0.0
    """One message's latency over the inter-site link, milliseconds."""
    crossing: str = "auto"
    """Dimension that crosses the link: auto (the planner chooses), pp or dp."""

    def link(self, flows: int) -> P2PCost:
        """One of ``flows`` concurrent flows over the link: the latency, an equal share of the
        bandwidth (bytes/s)."""
        return P2PCost(latency_s=self.inter_site_latency_ms * 1e-3,
                       bandwidth=self.inter_site_gbps * 1e9 / 8 / max(flows, 1))

    def crossings(self, *, num_gpus: int, pp: int, dp: int, tp: int, cp: int, ep: int, etp: int) -> tuple[str, ...]:
        """The dimensions that can cross for these degrees: pp when pp splits over the sites;
        dp when dp does and each site's replicas still hold whole expert-parallel groups."""
        if self.count == 1 or num_gpus % self.count:
            return ()
        out = ("pp",) if pp % self.count == 0 else ()
        if dp % self.count == 0 and (dp // self.count * cp * tp) % (ep * etp) == 0:
            out += ("dp",)
        return tuple(c for c in out if self.crossing in ("auto", c))

    def check_degrees(self, *, num_gpus: int, pp: int, dp: int, tp: int, cp: int, ep: int, etp: int) -> tuple[str, ...]:
        """``crossings`` of these degrees, refused in one line when there is none."""
        if num_gpus % self.count:
            raise InputError("sites.count", f"{num_gpus} GPUs do not split evenly over {self.count} sites",
                             f"use a GPU count that is a multiple of {self.count}")
        found = self.crossings(num_gpus=num_gpus, pp=pp, dp=dp, tp=tp, cp=cp, ep=ep, etp=etp)
        if found:
            return found
        per_site = num_gpus // self.count
        if self.crossing == "auto":
            problem = (f"neither pp {pp} nor dp {dp} splits over {self.count} sites of {per_site} GPUs "
                       f"(tp x cp = {tp * cp}, ep x etp = {ep * etp}): tp or ep would cross the inter-site link")
        else:
            degree = pp if self.crossing == "pp" else dp
            problem = (f"crossing {self.crossing} is not possible: {self.crossing} {degree} does not split over "
                       f"{self.count} sites holding whole tp x ep groups")
        raise InputError("sites", problem, f"make pp or dp a multiple of {self.count} with tp x ep within one "
                         f"site's {per_site} GPUs, or use fewer sites")

    def record(self, crossing: str, crossover_gbps: float | None, steps: dict[str, float]) -> dict[str, Any]:
        """What a plan's ``sites`` section says (``steps``: optimizer step of each crossing planned)."""
        return {"count": self.count, "inter_site_gbps": self.inter_site_gbps,
                "inter_site_latency_ms": self.inter_site_latency_ms, "crossing": crossing,
                "crossover_gbps": crossover_gbps, "steps_s": steps}


def sites_from_config(value: Any, *, where: str = "cluster.sites") -> SitesSpec:
    """Build and check a ``SitesSpec`` from a parsed mapping (absent: one site)."""
    if value is None:
        return SitesSpec()
    if not isinstance(value, dict):
        raise InputError(where, "expected a mapping like {count: 2, inter_site_gbps: 100, inter_site_latency_ms: 10}")
    known = ("count", "inter_site_gbps", "inter_site_latency_ms", "crossing")
    for key, v in value.items():
        if key not in known:
            raise InputError(f"{where}.{key}", "unknown field", f"known fields: {', '.join(known)}")
    count = value.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InputError(f"{where}.count", f"expected a positive integer, got {count!r}", "e.g. 2")
    for key, low in (("inter_site_gbps", "positive"), ("inter_site_latency_ms", "non-negative")):
        v = value.get(key, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v == float("inf") or v < 0 \
                or (low == "positive" and count > 1 and v == 0):
            raise InputError(f"{where}.{key}", f"expected a {low} number, got {v!r}",
                             "e.g. inter_site_gbps: 100 (Gb/s, one direction) and inter_site_latency_ms: 10")
    if value.get("crossing", "auto") not in CROSSINGS:
        raise InputError(f"{where}.crossing", f"unknown {value['crossing']!r}", f"use one of {', '.join(CROSSINGS)}")
    return SitesSpec(count=count, inter_site_gbps=float(value.get("inter_site_gbps", 0.0)),
                     inter_site_latency_ms=float(value.get("inter_site_latency_ms", 0.0)),
                     crossing=value.get("crossing", "auto"))


def site_hop(sites: SitesSpec, p2p: P2PCost, *, num_gpus: int, pp: int) -> SiteHop | None:
    """The inter-site hop of the pipeline boundaries between sites when pp crosses: the link's
    latency, and the smaller of the GPU's own pipeline link (``p2p``) and its share of the
    inter-site link, which the ``num_gpus / pp`` GPUs of a boundary stage all cross at once.
    None when pp does not cross."""
    if sites.count == 1 or sites.crossing != "pp":
        return None
    link = sites.link(num_gpus // pp)
    return SiteHop(count=sites.count, link=P2PCost(latency_s=link.latency_s,
                                                   bandwidth=min(link.bandwidth, p2p.bandwidth)))


def with_site_hop(table: CostTable, sites: SitesSpec, *, num_gpus: int, pp: int) -> CostTable:
    """``table`` with its ``site_hop`` (``site_hop``); unchanged when pp does not cross."""
    hop = site_hop(sites, table.p2p, num_gpus=num_gpus, pp=pp)
    return table if hop is None else replace(table, site_hop=hop)
