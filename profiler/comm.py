"""Communication microbenchmarks on a real process group, fitted as latency + bytes / bandwidth.

- Point-to-point: rank 0 and rank 1 ping-pong a message (``send``/``recv``); one
  one-way time is half the round trip.
- All-to-all: every rank calls ``all_to_all_single`` with equal splits; the bytes that
  count are the ones that leave the rank, ``total x (P - 1) / P``.

Each size runs ``warmup + repeats`` times; the medians are fitted by ordinary least
squares ``t = latency + bytes / bandwidth`` (numpy ``lstsq``). A non-positive slope
(noise swamping a fast link) falls back to the best measured bytes / second and a
negative intercept to zero latency, so the fit never predicts negative times.

``p2p_cost`` is the point-to-point fit as a cost table's ``P2PCost``, known on every rank
(the replay's re-prediction: latency from a 4-byte message, bandwidth from one pipeline
message of ``nbytes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from planner.core.costs import P2PCost
from profiler.timing import Clock

__all__ = ["LinkFit", "fit_link", "p2p_benchmark", "p2p_cost", "all_to_all_benchmark", "DEFAULT_SIZES"]

DEFAULT_SIZES = (4 << 10, 64 << 10, 512 << 10, 2 << 20)
"""Message sizes in bytes (per rank for the all-to-all)."""


@dataclass(frozen=True, kw_only=True)
class LinkFit:
    """A fitted link: time(bytes) = latency_s + bytes / bandwidth."""

    latency_s: float
    """Fitted per-message latency, seconds."""
    bandwidth: float
    """Fitted bytes per second."""
    points: tuple[tuple[int, float], ...]
    """(bytes, median seconds) measured."""

    def time(self, nbytes: float) -> float:
        """Predicted seconds for ``nbytes``."""
        return self.latency_s + nbytes / self.bandwidth


def fit_link(points: list[tuple[int, float]]) -> LinkFit:
    """Least-squares latency + bytes / bandwidth through (bytes, seconds) points."""
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    design = np.stack([np.ones_like(x), x], axis=1)
    (intercept, slope), *_ = np.linalg.lstsq(design, y, rcond=None)
    fastest = max(b / t for b, t in points if t > 0) if any(t > 0 for _, t in points) else 1e12
    return LinkFit(latency_s=max(0.0, float(intercept)),
                   bandwidth=1.0 / slope if slope > 0 else fastest,
                   points=tuple((int(b), float(t)) for b, t in points))


def _median_time(fn: Any, clock: Clock, warmup: int, repeats: int) -> float:
    times = []
    for r in range(warmup + repeats):
        start = clock.mark()
        fn()
        end = clock.mark()
        clock.sync()
        if r >= warmup:
            times.append(clock.elapsed(start, end))
    return float(np.median(times))


def p2p_benchmark(*, device: torch.device, sizes=DEFAULT_SIZES, warmup: int = 2,
                  repeats: int = 5) -> LinkFit | None:
    """Ping-pong between global ranks 0 and 1 (other ranks idle); rank 0 returns the fit."""
    rank = dist.get_rank()
    clock = Clock(device)
    points = []
    for size in sizes:
        buf = torch.zeros(size // 4, dtype=torch.float32, device=device)

        def ping() -> None:
            if rank == 0:
                dist.send(buf, 1)
                dist.recv(buf, 1)
            elif rank == 1:
                dist.recv(buf, 0)
                dist.send(buf, 0)

        points.append((size, _median_time(ping, clock, warmup, repeats) / 2))
    return fit_link(points) if rank == 0 else None


def p2p_cost(*, device: torch.device, nbytes: int, repeats: int = 20) -> P2PCost:
    """``p2p_benchmark`` of a 4-byte message and one of ``nbytes``, broadcast from rank 0 so
    that every rank returns the same cost (every rank of the group calls it)."""
    fit = p2p_benchmark(device=device, sizes=(4, max(8, nbytes)), repeats=repeats)
    obj: list[Any] = [(fit.latency_s, fit.bandwidth) if fit is not None else None]
    dist.broadcast_object_list(obj, src=0)
    latency, bandwidth = obj[0]
    return P2PCost(latency_s=latency, bandwidth=bandwidth)


def all_to_all_benchmark(*, device: torch.device, group: Any = None, sizes=DEFAULT_SIZES,
                         warmup: int = 2, repeats: int = 5) -> LinkFit:
    """Equal-split ``all_to_all_single`` of each size on every rank; the fit uses the bytes
    that leave a rank."""
    world = dist.get_world_size(group)
    clock = Clock(device)
    points = []
    for size in sizes:
        n = max(world, size // 4 // world * world)
        send = torch.zeros(n, dtype=torch.float32, device=device)
        recv = torch.empty_like(send)
        t = _median_time(lambda: dist.all_to_all_single(recv, send, group=group), clock, warmup, repeats)
        points.append((n * 4 * (world - 1) // world, t))
    return fit_link(points)
