"""The round trip: each configuration of the grid (tests/round_trip_grid.py) through
``ppplan plan``, ``validate``, ``simulate`` and ``export``, every output checked.

A configuration passes when ``ppplan plan`` either

- exits 0 with a plan that ``ppplan validate`` accepts (schema, schedule, memory limit),
  whose ``ppplan simulate`` step time and per-rank peak memory equal its ``predicted`` ones
  bit for bit ([Note: exact prediction]), which records the ``--target`` and a byte limit asked
  for, and which ``ppplan export`` writes in every format whose framework runs it (at least the
  formats of the target it was made for), each file read back by that framework's own loader
  (tests/round_trip_checks.py), every other format refused in one line; or
- exits 2 (bad input, proven infeasible) or 3 (out of budget, "not proven") with exactly
  one line on stderr, no traceback and no file written.

Commands run in-process (``planner.cli.main``, as the ``ppplan`` script), each configuration
in an empty folder of its own; nothing is kept between configurations.

    python -m tests.round_trip --json [--work 0.2] [--only g017,p3] [--keep DIR]

[Note: exact prediction] ``predicted`` is the planner's own ``simulate()`` of the schedule over
the stage costs it records; the plan JSON stores floats in ``repr`` form, which reads back
to the same double, and the simulator is deterministic, so ``ppplan simulate`` must give the
same doubles. Any difference, even one ulp, means the planner predicted from costs or a
schedule other than the ones it wrote.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules, under pytest and -m alike

from planner.core.errors import NOT_PROVEN  # noqa: E402
from planner.core.targets import DEFAULT_TARGET, TARGETS, target_for_format, target_of  # noqa: E402
from planner.export import FORMATS, LaunchPlan  # noqa: E402
from round_trip_grid import GRID, Config, cluster_file  # noqa: E402

__all__ = ["WORK", "Outcome", "ppplan", "run_config", "run_grid", "summary", "main"]

ROOT = Path(__file__).resolve().parents[1]

WORK = 0.2
"""``--work`` of every plan, a fiftieth of the default (``solvers.schedule.search.budget.DEFAULT_WORK``).
The search screens fewer candidates and polishes less, so some plans are slower, more
configurations run out of budget (exit 3, a legal outcome) and more keep a screened schedule
unpolished (a path of its own, with its own bugs), in exchange for the grid fitting CI's minutes."""

KINDS = ("planned", "refused", "out_of_budget", "failing")

FORMAT_TARGET = {fmt: target_for_format(fmt) for fmt in FORMATS} | {"megatron-bridge": "megatron"}
"""Format -> the target whose plans it runs (Megatron-Bridge runs Megatron-Core)."""


@dataclass(frozen=True)
class Outcome:
    """What one configuration did."""

    name: str
    commands: tuple[str, ...]
    kind: str
    """One of ``KINDS``."""
    detail: str = ""
    """The refusal line, or what failed."""
    checks: tuple[str, ...] = ()
    """Formats exported and framework loaders that read them back."""

    def report(self) -> str:
        return f"[{self.name}] {self.kind}: {self.detail}\n  " + "\n  ".join(self.commands)


@dataclass(frozen=True)
class _Run:
    code: int | None
    """Exit code; None when an exception escaped ``main``."""
    out: str
    err: str


class _Failed(Exception):
    """A step of the round trip refused what the previous one produced."""


def ppplan(*argv: str) -> _Run:
    """``ppplan ARGV`` in this process, its output captured, warnings shown as a fresh process shows them."""
    from planner.cli import main as cli_main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _fresh_warnings():
        try:
            cli_main(list(argv))
            code: int | None = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception:  # noqa: BLE001 - a traceback for the user, reported as a failure
            code = None
            err.write(traceback.format_exc())
    return _Run(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _fresh_warnings():
    """Warnings filtered as Python's defaults filter them and written to ``sys.stderr`` each time,
    as a new ``ppplan`` process would (not once per process, nor into pytest's recorder)."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)  # Python's default filters
        warnings.showwarning = lambda m, c, f, n, file=None, line=None: sys.stderr.write(
            warnings.formatwarning(m, c, f, n, line))
        yield


def run_config(config: Config, folder: Path, *, work: float = WORK) -> Outcome:
    """Run ``config`` in the empty ``folder`` and judge every step (module docstring)."""
    commands = tuple(config.commands(work, root=ROOT))
    before = Path.cwd()
    os.chdir(folder)
    try:
        kind, detail, checks = _journey(config, work)
    except _Failed as exc:
        kind, detail, checks = "failing", str(exc), ()
    except Exception as exc:  # noqa: BLE001 - a check of the round trip raised: the export is refused
        kind, detail, checks = "failing", f"{type(exc).__name__}: {exc}".splitlines()[0][:400], ()
    finally:
        os.chdir(before)
    return Outcome(config.name, commands, kind, detail, checks)


def _journey(config: Config, work: float) -> tuple[str, str, tuple[str, ...]]:
    text = cluster_file(config)
    if text is not None:
        Path("cluster.yaml").write_text(text)
    for step in config.setup:
        _expect_success(ppplan(*config.resolve(step, ROOT)), f"ppplan {step[0]}")
    files = _files()
    run = ppplan("plan", *config.resolve(config.plan, ROOT), "--work", f"{work:g}", "--quiet", "--out", "plan.json")
    if run.code in (2, 3):
        line = _refusal(run, files, "ppplan plan")
        if (NOT_PROVEN in line) != (run.code == 3):
            raise _Failed(f"exit {run.code} with {line!r}: exit 3 is for, and only for, {NOT_PROVEN}")
        return ("refused" if run.code == 2 else "out_of_budget"), line, ()
    _expect_success(run, "ppplan plan")
    return "planned", "", tuple(_check_plan(config))


def _check_plan(config: Config) -> list[str]:
    from planner.core.plan import load_plan_file

    run = ppplan("validate", "plan.json")
    _expect_success(run, "ppplan validate")
    data = json.loads(Path("plan.json").read_text())
    sim = json.loads(_expect_success(ppplan("simulate", "plan.json", "--json"), "ppplan simulate").out)
    for key in ("step_time_s", "peak_memory_bytes"):  # [Note: exact prediction]
        if sim[key] != data["predicted"][key]:
            raise _Failed(f"ppplan simulate {key} {sim[key]!r} != the plan's predicted {data['predicted'][key]!r}")
    target = _option(config.plan, "--target") or DEFAULT_TARGET
    if target_of(data.get("target")) != target:
        raise _Failed(f"the plan records target {data.get('target')!r}, --target was {target}")
    _check_limit(config, data)
    plan = LaunchPlan.of(load_plan_file("plan.json"))
    return _check_exports(plan, target, config.name)


def _check_limit(config: Config, data: dict) -> None:
    """A byte limit asked for is the limit the plan was validated against (read as the command reads it)."""
    from planner.cli.plan_options import MemoryLimit
    from solvers.schedule.engines.memory_limit import parse_memory_limit

    text = _option(config.plan, "--memory-limit")
    if text is None:
        return
    with contextlib.redirect_stderr(io.StringIO()):  # the old spelling's deprecation line
        asked = parse_memory_limit(MemoryLimit().convert(text, None, None)).bytes
    if asked is not None and data["predicted"]["memory_limit_bytes"] != asked:
        raise _Failed(f"--memory-limit {text} is {asked} bytes, the plan records "
                      f"{data['predicted']['memory_limit_bytes']}")


def _check_exports(plan: LaunchPlan, target: str, name: str) -> list[str]:
    from round_trip_checks import CHECKS, same_as_library

    done = []
    for fmt in FORMATS:
        main = f"ppplan_tt_{name.replace('-', '_')}.py" if fmt == "torchtitan" else f"export.{fmt}"
        files = _files()
        run = ppplan("export", "plan.json", "--format", fmt, "--out", main, "--json")
        if run.code == 2:
            line = _refusal(run, files, f"ppplan export --format {fmt}")
            if FORMAT_TARGET[fmt] == target:
                raise _Failed(f"made for --target {target}, the plan is refused by --format {fmt}: {line}")
            continue
        summary = json.loads(_expect_success(run, f"ppplan export --format {fmt}").out)
        same_as_library(plan, fmt, main, summary)
        try:
            done += [fmt, *CHECKS[fmt](plan, Path.cwd(), main, summary)]
        except Exception as exc:  # noqa: BLE001 - the framework's own refusal, in its own words
            raise _Failed(f"--format {fmt}: {type(exc).__name__}: {str(exc).strip()[:400]}") from None
    return done


def _expect_success(run: _Run, what: str) -> _Run:
    if run.code != 0:
        raise _Failed(f"{what} exited {run.code}: {_tail(run.err or run.out)}")
    if "Traceback" in run.err:
        raise _Failed(f"{what} exited 0 with a traceback: {_tail(run.err)}")
    return run


def _refusal(run: _Run, files: set[str], what: str) -> str:
    """The one ``error: ...`` line of a refusal; ``_Failed`` unless it is exactly that and nothing was written."""
    lines = run.err.splitlines()
    if len(lines) != 1 or not lines[0].startswith("error: ") or "Traceback" in run.err:
        raise _Failed(f"{what} exited {run.code} with {len(lines)} lines on stderr: {_tail(run.err)}")
    if _files() != files:
        raise _Failed(f"{what} exited {run.code} and wrote {sorted(_files() - files)}: {lines[0]}")
    return lines[0]


def _files() -> set[str]:
    return {str(p) for p in Path.cwd().rglob("*")}


def _option(args: tuple[str, ...], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def _tail(text: str) -> str:
    """A traceback's last lines, or the first lines of a message (validate's finding)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    shown = lines[-3:] if "Traceback" in text else lines[:2]
    return " | ".join(shown)[:400] if lines else "(nothing)"


def run_grid(configs: list[Config], *, work: float = WORK, keep: Path | None = None) -> list[Outcome]:
    """Every configuration, each in a fresh folder (under ``keep``, or a temporary one)."""
    import tempfile

    out = []
    for config in configs:
        if keep is not None:
            (keep / config.name).mkdir(parents=True, exist_ok=False)
            out.append(run_config(config, keep / config.name, work=work))
            continue
        with tempfile.TemporaryDirectory(prefix=f"round-trip-{config.name}-") as name:
            out.append(run_config(config, Path(name), work=work))
    return out


def summary(outcomes: list[Outcome], *, work: float, wall_s: float) -> dict:
    """Counts per kind and per check, and every failing configuration with its commands."""
    from collections import Counter

    checks = Counter(c for o in outcomes for c in o.checks)
    return {"configurations": len(outcomes), **{k: sum(o.kind == k for o in outcomes) for k in KINDS},
            "checks": dict(sorted(checks.items())), "work": work, "wall_s": round(wall_s, 1),
            "refused_by": dict(Counter(_refused_field(o.detail) for o in outcomes if o.kind != "planned").most_common()),
            "planned_per_target": {t: sum(o.kind == "planned" and _target(o.commands[-1]) == t for o in outcomes)
                                   for t in TARGETS},
            "failures": [{"name": o.name, "detail": o.detail, "commands": list(o.commands)}
                         for o in outcomes if o.kind == "failing"]}


def _refused_field(line: str) -> str:
    """The field an ``error: FIELD: ...`` line names (what a refusal was about)."""
    text = line.removeprefix("error: ")
    return text.split(": ", 1)[0][:60] if ": " in text else text[:60]


def _target(command: str) -> str:
    words = command.split()
    return words[words.index("--target") + 1] if "--target" in words else DEFAULT_TARGET


def main(argv: list[str] | None = None) -> int:
    import argparse
    import time

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--work", type=float, default=WORK, help="ppplan plan --work of every configuration")
    ap.add_argument("--only", help="comma-separated configuration names (default: the whole grid)")
    ap.add_argument("--keep", type=Path, help="run in DIR/NAME folders and keep them (to rerun a command)")
    args = ap.parse_args(argv)
    wanted = set(args.only.split(",")) if args.only else None
    configs = [c for c in GRID if wanted is None or c.name in wanted]
    t0 = time.perf_counter()
    outcomes = run_grid(configs, work=args.work, keep=args.keep)
    result = summary(outcomes, work=args.work, wall_s=time.perf_counter() - t0)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(" ".join(f"{k} {result[k]}" for k in ("configurations", *KINDS)) + f" in {result['wall_s']} s")
        for o in outcomes:
            if o.kind == "failing":
                print(o.report())
    return 1 if result["failing"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
