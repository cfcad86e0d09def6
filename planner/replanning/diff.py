"""``ppplan diff OLD NEW``: the migration map between two plans of one model, and its text.

The map is ``device_migration`` (``planner.replanning.migration``) between the two plans'
placements, global rank j on device j in both (no GPU lost), in the ``migration`` section
form ``ppplan replan --gpus`` stores (``planner.replanning.reload``).
"""

from __future__ import annotations

from pathlib import Path

from planner.core.errors import InputError
from planner.core.plan import Plan, load_plan_file
from planner.replanning.inputs import plan_cluster, plan_model
from planner.core.cluster import ClusterSpec
from planner.replanning.migration import Placement, device_migration
from planner.replanning.reload import migration_section
from planner.replanning.search import layer_ranks

__all__ = ["plan_diff", "placement_of", "render_migration", "render_elastic"]

_GB = 1e9


def plan_diff(old: Plan | str | Path, new: Plan | str | Path, *, model: str | None = None) -> dict:
    """The ``migration`` section from ``old`` to ``new`` (one line when the models differ)."""
    a = old if isinstance(old, Plan) else load_plan_file(old)
    b = new if isinstance(new, Plan) else load_plan_file(new)
    if (a.model.name, a.model.num_layers, a.model.layout) != (b.model.name, b.model.num_layers, b.model.layout):
        raise InputError("NEW", f"is a plan of {b.model.name} ({b.model.num_layers} layers), OLD of "
                         f"{a.model.name} ({a.model.num_layers} layers)", "diff two plans of the same model")
    spec = plan_model(a, model)
    ca, cb = plan_cluster(a), plan_cluster(b)
    move = device_migration(spec, placement_of(a, ca, range(ca.num_gpus)), placement_of(b, cb, range(cb.num_gpus)))
    return migration_section(spec, b, move)


def placement_of(plan: Plan, cluster: ClusterSpec, devices) -> Placement:
    """Where ``plan``'s layers live when its global rank j runs on ``devices[j]``."""
    return Placement(cluster=cluster, layer_ranks=tuple(layer_ranks(plan.bounds(), plan.ranks())),
                     devices=tuple(devices))


def render_migration(m: dict) -> str:
    """Per layer devices before/after and bytes, each new stage's local names, totals, reload flags."""
    lines = ["layer  role       before          after           kept            receive  GB/GPU"]
    for t in m["layers"]:
        lines.append(f"{t['layer']:>5}  {t['role']:<10} {_cut(t['before']):<15} {_cut(t['after']):<15} "
                     f"{_cut(t['kept']) or '-':<15} {len(t['sends']):>7}  {t['bytes_per_gpu'] / _GB:>6.2f}"
                     + ("  optimizer from checkpoint" if t["optimizer_lost"] else ""))
    lines += ["", "new stage  rank  layers     local names (Megatron: decoder and MTP blocks from 0)"]
    for s in m["stages"]:
        span = f"[{s['layers'][0]},{s['layers'][1]})"
        lines.append(f"{s['stage']:>9}  {s['rank']:>4}  {span:<10} {_names(s['local'])}")
    links = m["link_bytes"]
    lines += ["", f"bytes moved       {m['bytes_moved'] / _GB:.1f} GB (NVLink {links['nvlink'] / _GB:.1f}, network "
                  f"{links['network'] / _GB:.1f}, checkpoint {links['checkpoint'] / _GB:.1f}; re-sliced in place "
                  f"{links['local'] / _GB:.1f})",
              f"transfer time     {m['seconds']:.2f} s (busiest GPU {m['busiest_device']}; checkpoint reads not "
              "modelled)"]
    reload = m["reload"]
    if reload["args"]:
        lines.append(f"reload (Megatron) {' '.join(reload['args'])}")
    if reload["why"]:
        lines.append(f"                  note: {reload['why']}")
    return "\n".join(lines)


def render_elastic(section: dict, migration: dict) -> str:
    """``replan --gpus`` summary: GPUs, degrees, batch, step and throughput, then the map."""
    s = section
    deg = " ".join(f"{k} {s['degrees_before'][k]}->{s['degrees_after'][k]}" for k in s["degrees_after"])
    head = [f"GPUs              {s['gpus_before']} -> {s['gpus_available']} available, {s['gpus_used']} used"
            + (f" (idle: {migration['idle']})" if migration["idle"] else ""),
            f"lost ranks        {migration['lost'] or 'none'}",
            f"degrees           {deg}",
            f"global batch      {s['global_batch_before']} -> {s['global_batch_after']}",
            f"step              {s['step_before_s']:.3f} s -> {s['step_after_s']:.3f} s",
            f"tokens/s/GPU      {s['tokens_per_s_per_gpu_before']:.0f} -> {s['tokens_per_s_per_gpu_after']:.0f} "
            f"({s['throughput_per_gpu_kept']:.1%} kept)"]
    if "standby" in s:
        head.append(_standby_line(s["standby"]))
    return "\n".join(head + [""]) + render_migration(migration)


def _standby_line(sb: dict) -> str:
    """Which of the old plan's roles a standby GPU fits, and whether spares keep the old plan."""
    roles = ", ".join(f"{r['role']} {r['peak_bytes'] / 2**30:.1f} GiB {'fits' if r['fits'] else 'does not fit'}"
                      for r in sb["roles"])
    out = (f"standby           {sb['count']} x {sb['gpu']} ({sb['memory_limit_bytes'] / 2**30:.1f} GiB usable, "
           f"{sb['compute_ratio']:.2f}x peak FLOP/s): {roles}")
    if sb["lost_roles"]:
        out += (f"; lost ranks were {', '.join(sb['lost_roles'])}: "
                + ("spares keep the old plan" if sb["swap_keeps_plan"] else "spares cannot keep the old plan"))
    return out


def _cut(text: str, width: int = 15) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _names(local: list) -> str:
    """``embedding, decoder 0-5, mtp 0, head`` from ``[global, role, local]`` rows."""
    out: list[list] = []
    for _, role, idx in local:
        if out and out[-1][0] == role and out[-1][2] == idx - 1:
            out[-1][2] = idx
        else:
            out.append([role, idx, idx])
    return ", ".join(role if role in ("embedding", "head") else f"{role} {a}" + (f"-{b}" if b > a else "")
                     for role, a, b in out)
