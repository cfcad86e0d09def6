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


def degrees_text(section: dict) -> str:
    """The ranked table, the fully planned configurations and why the winner won."""
    lines = [f"degree search for {section['gpus']} GPUs (closed-form estimate, top {len(section['table'])}; "
             f"screened in {section['screen_s']} s):", *_aligned(section["table"])]
    for p in section["fully_planned"]:
        step = "infeasible" if p["step_time_s"] is None else f"{p['step_time_s']:.3f} s planned optimizer step (schedule + DP + Adam)"
        lines.append(f"planned fully: {p['config']}: {step}")
    lines.append(f"why: {section['why']}")
    return "\n".join(lines)
