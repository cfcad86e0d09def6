"""Text of ``ppplan plan --gpus N``'s ranked degree table."""

from __future__ import annotations

__all__ = ["degrees_text"]

_COLS = ("rank", "tp", "pp", "vpp", "ep", "cp", "dp", "mbs", "recompute", "ep_overlap",
         "tokens_per_s_per_gpu", "mfu", "peak_memory_gib")


def _aligned(table: list[dict]) -> list[str]:
    """The header and rows in columns as wide as their widest cell; numbers right-aligned."""
    cells = [[str(row[c]) for c in _COLS] for row in table]
    widths = [max([len(c), *(len(r[k]) for r in cells)]) for k, c in enumerate(_COLS)]
    numeric = [all(isinstance(row[c], (int, float)) and not isinstance(row[c], bool) for row in table)
               for c in _COLS]

    def line(texts: list[str]) -> str:
        return "  ".join(t.rjust(w) if n else t.ljust(w) for t, w, n in zip(texts, widths, numeric)).rstrip()

    return [line(list(_COLS)), *(line(r) for r in cells)]


def _screened(screen: dict) -> str:
    """How much of the candidate list the screen estimated, why it stopped, and its wall time."""
    cut = " (stopped by its share of --work)" if screen["work_cut"] else ""
    cut = " (cut by --time-limit)" if screen["wall_cut"] else cut
    return f"screened {screen['screened']} of {screen['candidates']} configurations{cut} in {screen['wall_s']} s"


def _outcome(planned: dict) -> str:
    """A full plan's optimizer step, or why there is none."""
    if planned["step_time_s"] is not None:
        return f"{planned['step_time_s']:.3f} s planned optimizer step (schedule + DP + Adam)"
    return "no plan within the budget (not proven infeasible)" if planned.get("status") == "budget" else "infeasible"


def degrees_text(section: dict) -> str:
    """The ranked table, the fully planned configurations and why the winner won."""
    lines = [f"degree search for {section['gpus']} GPUs (closed-form estimate, top {len(section['table'])}; "
             f"{_screened(section['screen'])}):", *_aligned(section["table"])]
    for p in section["fully_planned"]:
        lines.append(f"planned fully: {p['config']}: {_outcome(p)}")
    lines.append(f"why: {section['why']}")
    return "\n".join(lines)
