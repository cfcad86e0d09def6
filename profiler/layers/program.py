"""A layer as a program: compute segments separated by expert-parallel all-to-alls.

Every layer module describes its forward as a tuple of steps over a named state:
``Compute`` steps read named tensors and add new ones, ``Exchange`` steps move one
tensor across the expert-parallel group with ``all_to_all_single`` (MoE dispatch and
combine); the state starts as ``{"x": input}``, the output is ``"y"``, and non-tensor
facts (split sizes, token order) go into a per-run ``ctx`` dict. [Note: one program,
two runners] ``run_program`` executes the steps with differentiable all-to-alls, which is
what ``module.forward`` does; the profiler runs the same steps cut at every step, to time
each segment and interleave two layers (``profiler.pairs``), so the module that is timed
is the module that trains.

[Note: comm points] Every all-to-all a module issues (token counts, dispatch, combine,
and their gradients) is started asynchronously and then handed to ``wait_for``: by
default that just waits; an overlap runtime (``planner.runtime``) installs a hook
(``set_wait_hook``) that lets another microbatch compute while the exchange travels.
A group may also be an ``EmulatedLink``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Union

import threading
import time

import torch
import torch.distributed as dist

from profiler.trace.record import a2a as trace_a2a

__all__ = ["Compute", "Exchange", "Step", "Ctx", "State", "all_to_all", "run_program", "EmulatedLink", "SideStreamLink",
           "group_size", "group_rank", "wait_for", "set_wait_hook", "moe_steps"]

State = dict[str, torch.Tensor]
"""Named tensors flowing through a program."""
Ctx = dict[str, Any]
"""Per-run facts written by one step and read by later ones (split sizes, token order)."""


@dataclass(frozen=True, kw_only=True)
class Compute:
    """A compute segment: ``fn(state, ctx)`` returns new named tensors."""

    name: str
    """Segment name (attn, experts, post, layer, embed, head)."""
    fn: Callable[[State, Ctx], State]
    """The computation; reads only ``inputs`` from the state."""
    inputs: tuple[str, ...]
    """State names it reads."""
    expert: bool = False
    """Routed-expert compute: its time scales with the routing imbalance."""


@dataclass(frozen=True, kw_only=True)
class Exchange:
    """An all-to-all of ``state[src]`` into ``state[dst]`` over the expert-parallel group."""

    name: str
    """dispatch or combine."""
    src: str
    """State name sent."""
    dst: str
    """State name received."""
    splits: str
    """``ctx`` key holding (input split sizes, output split sizes) in rows."""
    group: Any
    """The process group."""
    differentiable: bool = True
    """False for an integer payload (the token counts): no gradient goes back through it."""


Step = Union[Compute, Exchange]


@dataclass(frozen=True, kw_only=True)
class EmulatedLink:
    """An expert-parallel "group" of one process whose exchanges take a set time.

    Each all-to-all copies its rows locally (the same tokens, the same bytes moved) and
    its work completes no earlier than issue time + ``seconds[name]`` (``name``:
    ``dispatch``, ``combine``, ``dispatch.grad``, ``combine.grad``; missing = 0): an
    emulated network, for machines whose loopback copies would eat the overlap."""

    seconds: dict[str, float]
    """Link time of each exchange of one layer, in seconds."""


@dataclass(frozen=True, kw_only=True)
class SideStreamLink(EmulatedLink):
    """A one-process stand-in for an expert-parallel group on one GPU (NCCL refuses two
    ranks on one device): each all-to-all is a device-to-device copy of the same bytes on
    a side stream, so it costs memory bandwidth and can overlap compute as NCCL's own
    stream would; ``wait`` orders the current stream after it. On the CPU a plain copy.
    Used by ``benchmarks/gpu_check.py``."""

    seconds: dict[str, float] = field(default_factory=dict)
    """Unused (the copy takes what it takes)."""


class _StreamWork:
    """A copy queued on a side stream; ``wait`` makes the current stream wait for it."""

    def __init__(self, event: Any) -> None:
        self.event = event

    def wait(self, timeout: Any = None) -> bool:
        if self.event is not None:
            torch.cuda.current_stream().wait_event(self.event)
        return True

    def is_completed(self) -> bool:
        return self.event is None or self.event.query()


def _side_stream_copy(x: torch.Tensor) -> tuple[torch.Tensor, _StreamWork]:
    if not x.is_cuda:
        return x.detach().clone(), _StreamWork(None)
    if x.device not in _SIDE_STREAMS:
        _SIDE_STREAMS[x.device] = torch.cuda.Stream(device=x.device)
    side = _SIDE_STREAMS[x.device]
    side.wait_stream(torch.cuda.current_stream(x.device))
    x.record_stream(side)  # x stays allocated until the side stream has read it
    with torch.cuda.stream(side):
        out = x.detach().clone()
        event = torch.cuda.Event()
        event.record(side)
    out.record_stream(torch.cuda.current_stream(x.device))
    return out, _StreamWork(event)


_SIDE_STREAMS: dict[Any, Any] = {}


class _DeadlineWork:
    """A finished local copy that reports completion only after its deadline."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def wait(self, timeout: Any = None) -> bool:
        left = self.deadline - time.perf_counter()
        if left > 0:
            time.sleep(left)
        return True

    def is_completed(self) -> bool:
        return time.perf_counter() >= self.deadline


def group_size(group: Any) -> int:
    """Ranks in an expert-parallel group (an ``EmulatedLink`` is one process)."""
    return 1 if isinstance(group, EmulatedLink) else dist.get_world_size(group)


def group_rank(group: Any) -> int:
    """This process's rank in an expert-parallel group."""
    return 0 if isinstance(group, EmulatedLink) else dist.get_rank(group)


_HOOK: list[Callable[[Any], None] | None] = [None]
_HOOK_LOCK = threading.Lock()


def set_wait_hook(hook: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
    """Install ``hook(work)`` as the way comm points wait (None = plain ``work.wait()``);
    returns the previous hook. See [Note: comm points]."""
    with _HOOK_LOCK:
        previous, _HOOK[0] = _HOOK[0], hook
    return previous


def wait_for(work: Any) -> None:
    """Wait for an exchange started with ``async_op=True`` (through the hook, if any)."""
    hook = _HOOK[0]
    if hook is None:
        work.wait()
    else:
        hook(work)


def moe_steps(route: Callable[[State, Ctx], State], experts: Callable[[torch.Tensor, Ctx], torch.Tensor],
              finish: Callable[[State, Ctx], State], group: Any, *, counts: bool,
              finish_inputs: tuple[str, ...]) -> tuple[Step, ...]:
    """The steps of an MoE layer, one owner for native and transformers modules.

    ``route`` (segment ``attn``) writes ``send`` and ``ctx["tokens_per_expert"]`` (ours,
    sorted by expert); with a group and ``counts``, those counts travel in an exchange step
    of their own, then ``splits`` reads them into the dispatch and combine splits, then
    dispatch, ``experts`` (on ``recv``), combine and ``finish`` (on ``back``). The counts
    are a step, not a wait inside ``attn``: a wait for a peer inside a compute segment
    is charged to compute, so a rank that arrived first (on a CPU, its peer descheduled)
    timed its forward several times too slow; as a step it is a comm point the overlap
    runtime can hide, and its time is all-to-all, as in a trace (``ppplan/a2a/counts``).
    A padded capacity layer has static splits: ``counts`` False, no counts step."""
    if group is None:
        return (Compute(name="attn", fn=route, inputs=("x",)),
                Compute(name="experts", fn=lambda s, c: {"back": experts(s["send"], c)}, inputs=("send",),
                        expert=True),
                Compute(name="post", fn=finish, inputs=finish_inputs))
    ep = group_size(group)
    attn = (lambda s, c: _with_counts(route(s, c), ep, c)) if counts else route
    steps: list[Step] = [Compute(name="attn", fn=attn, inputs=("x",))]
    if counts:
        steps += [Exchange(name="counts", src="counts", dst="recv_counts", splits="counts", group=group,
                           differentiable=False),
                  Compute(name="splits", fn=lambda s, c: _splits_from(s["recv_counts"], ep, c),
                          inputs=("recv_counts",))]
    return (*steps,
            Exchange(name="dispatch", src="send", dst="recv", splits="dispatch", group=group),
            Compute(name="experts", fn=lambda s, c: {"out": experts(s["recv"], c)}, inputs=("recv",), expert=True),
            Exchange(name="combine", src="out", dst="back", splits="combine", group=group),
            Compute(name="post", fn=finish, inputs=finish_inputs))


def _with_counts(out: State, ep: int, ctx: "Ctx") -> State:
    """``route``'s state plus ``counts`` [experts] to send, each rank getting the counts of
    its own experts (the counts exchange's splits in ``ctx["counts"]``)."""
    counts = ctx["tokens_per_expert"]
    ctx["counts"] = ([counts.numel() // ep] * ep,) * 2
    return {**out, "counts": counts}


def _splits_from(recv: torch.Tensor, ep: int, ctx: "Ctx") -> State:
    """``recv_counts`` [ep, local experts] and the row splits of dispatch and combine from
    the received counts (on an ``EmulatedLink`` every rank routes alike: our own)."""
    ctx["recv_counts"] = recv.view(ep, -1)
    ctx["dispatch"] = (ctx["tokens_per_expert"].view(ep, -1).sum(1).tolist(), ctx["recv_counts"].sum(1).tolist())
    ctx["combine"] = tuple(reversed(ctx["dispatch"]))
    return {}


def all_to_all(x: torch.Tensor, in_splits: list[int], out_splits: list[int], group: Any, *,
               async_op: bool = False, name: str = "") -> tuple[torch.Tensor, Any]:
    """Rows of ``x`` split by ``in_splits`` go to each rank; returns (received, work or None).
    On an ``EmulatedLink`` the rows are copied locally and the work ends after the link's
    time for ``name``."""
    if isinstance(group, SideStreamLink):
        out, work = _side_stream_copy(x)
        if not async_op:
            work.wait()
        return out, (work if async_op else None)
    if isinstance(group, EmulatedLink):
        issued = time.perf_counter()
        out = x.detach().clone()
        work = _DeadlineWork(issued + group.seconds.get(name, 0.0))
        if not async_op:
            work.wait()
        return out, (work if async_op else None)
    out = x.new_empty((sum(out_splits), *x.shape[1:]))
    work = dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group,
                                  async_op=async_op)
    return out, work


def _exchange(x: torch.Tensor, in_splits: list[int], out_splits: list[int], group: Any, name: str) -> torch.Tensor:
    """One all-to-all at a comm point ([Note: comm points]), in a range a trace importer
    reads (``profiler.trace.names``)."""
    with trace_a2a(name):
        out, work = all_to_all(x, in_splits, out_splits, group, async_op=True, name=name)
        wait_for(work)
    return out


class _AllToAll(torch.autograd.Function):
    """Differentiable all-to-all: the backward sends gradients back along reversed splits."""

    @staticmethod
    def forward(ctx, x, in_splits, out_splits, group, name):  # noqa: D401 - autograd signature
        ctx.splits, ctx.group, ctx.name = (in_splits, out_splits), group, name
        return _exchange(x, in_splits, out_splits, group, name)

    @staticmethod
    def backward(ctx, grad):
        in_splits, out_splits = ctx.splits
        return _exchange(grad, out_splits, in_splits, ctx.group, f"{ctx.name}.grad"), None, None, None, None


def run_program(steps: tuple[Step, ...], x: torch.Tensor) -> torch.Tensor:
    """Run a layer program end to end (autograd flows through the all-to-alls)."""
    state: State = {"x": x}
    ctx: Ctx = {}
    for step in steps:
        if isinstance(step, Compute):
            state.update(step.fn(state, ctx))
        else:
            in_splits, out_splits = ctx[step.splits]
            move = _AllToAll.apply if step.differentiable else _exchange
            state[step.dst] = move(state[step.src], in_splits, out_splits, step.group, step.name)
    return state["y"]
