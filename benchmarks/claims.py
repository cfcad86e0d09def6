"""Claims as code: re-derive the figures README.md and docs/*.md state, from the commands
the pages document, and say which still hold.

Every claim (``claim_kit.Claim``) names its page, the command the page documents, how to
read the documented value from the page text and the measured value from the command's
output, and how to compare them: exactly for deterministic figures, as a ratio with a
stated tolerance for wall-clock ones. Figures that need a GPU or far more than about two
minutes are listed ``stale`` with the date their page gives. Each distinct command runs
once on the checkout's own files, from a temporary folder that links each of them (so
what it writes beside itself stays there), with this interpreter's folder first on ``PATH``.

    python benchmarks/claims.py --json               # every claim; exit 1 if any differs
    python benchmarks/claims.py --list               # the registry, nothing run
    python benchmarks/claims.py --only ID[,ID] --page docs/partition.md --json
    python benchmarks/claims.py --run-stale --page docs/joint.md   # a stale page that has readers
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REGISTRY = ("claims_readme", "claims_docs_search", "claims_docs_models", "claims_docs_inputs", "claims_docs_layout",
            "claims_docs_fleet", "claims_docs_trace", "claims_docs_sites", "claims_docs_published",
            "claims_docs_offload", "claims_docs_graphfp8", "claims_docs_cpalloc", "claims_docs_fsdpexp",
            "claims_docs_whatif", "claims_docs_op")
"""Modules of this folder that hold the claims (each defines ``CLAIMS``)."""
TIMEOUT_S = 1800.0
"""Longest one command may run before its claims count as differing."""
_SKIP = {".git", ".pytest_cache", "__pycache__"}


def _sibling(name: str) -> Any:
    """A module of this folder by file path: the folder is not a package, and on ``sys.path``
    only when this file runs as a script (the tests load it by path)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


kit = _sibling("claim_kit")
_sibling("claim_outputs")  # before the registries, which import it by name


def registry() -> list:
    """Every registered claim, in page order; ids are unique."""
    claims = [c for name in REGISTRY for c in _sibling(name).CLAIMS]
    seen: set[str] = set()
    for c in claims:
        if c.id in seen:
            raise ValueError(f"claim id {c.id!r} registered twice")
        seen.add(c.id)
    return claims


@contextmanager
def scratch_folder(root: Path = ROOT) -> Iterator[Path]:
    """A temporary folder holding a link to every top-level entry of the repository: a page's
    command (``python benchmarks/<name>.py``, ``ppplan plan``) runs the checkout's files in place,
    and a file it writes in its working folder (``plan.json``) lands here, not in the checkout."""
    with tempfile.TemporaryDirectory(prefix="ppplan-claim-") as tmp:
        for entry in root.iterdir():
            if entry.name not in _SKIP:
                (Path(tmp) / entry.name).symlink_to(entry)
        yield Path(tmp)


def child_env() -> dict[str, str]:
    """The environment for a page's command: ``python`` and ``ppplan`` are this interpreter's."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_command(command: str, timeout: float = TIMEOUT_S) -> Any:
    """Run ``command`` with bash in a scratch folder, ended with its process group past
    ``timeout``: a ``Run`` with the files it wrote there."""
    with scratch_folder() as folder:
        t0, cpu0 = time.perf_counter(), _children_cpu()
        proc = subprocess.Popen(["bash", "-c", command], cwd=folder, env=child_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the command's own process group: bash and what it started
            out, err = proc.communicate()
            rc, err = -1, err + f"\ntimed out after {timeout:.0f} s"
        wall = time.perf_counter() - t0
        files = {p.name: p.read_text(encoding="utf-8", errors="replace") for p in folder.iterdir()
                 if p.is_file() and not p.is_symlink()}
    return kit.Run(rc, out, err, wall, files, _children_cpu() - cpu0)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def read_page(claim: Any) -> tuple[tuple[str, ...] | None, str | None]:
    """(documented cells, problem): a page that lost the figure gives (None, why)."""
    try:
        return claim.figure.read(), None
    except (kit.FigureLost, OSError) as exc:
        return None, f"page lost the figure: {exc}"


def judge(claim: Any, run: Any | None) -> dict:
    """One claim's record against its command's run (None: the claim is stale and not run)."""
    doc, problem = read_page(claim)
    record = {"id": claim.id, "page": f"{claim.page}: {claim.where}", "command": claim.command,
              "documented": list(doc) if doc else None, "measured": None}
    if run is None:
        date, date_problem = _date(claim.stale.date)
        status = "differs" if problem or date_problem else "stale"
        return {**record, "status": status, "date": date, "why": claim.stale.why,
                **({"problem": problem or date_problem} if status == "differs" else {})}
    record["compare"] = claim.describe()
    record["wall_s"], record["cpu_s"] = round(run.wall_s, 2), round(run.cpu_s, 2)
    if run.rc != claim.exit_code:
        tail = (run.stderr.strip().splitlines() or [""])[-1]
        return {**record, "status": "differs", "problem": f"exit code {run.rc} (expected {claim.exit_code}): {tail}"}
    try:
        measured = claim.measured(run)
    except (KeyError, IndexError, TypeError, ValueError, LookupError) as exc:
        return {**record, "status": "differs", "problem": f"output lacks the figure: {type(exc).__name__}: {exc}"}
    record["measured"] = _jsonable(measured)
    if problem:
        return {**record, "status": "differs", "problem": problem}
    return {**record, "status": "ok" if claim.judge(doc, measured) else "differs"}


def _date(figure: Any) -> tuple[str | None, str | None]:
    """A stale claim's date as its page gives it, or the problem reading it."""
    try:
        return figure.read()[0], None
    except (kit.FigureLost, OSError) as exc:
        return None, f"page lost the date: {exc}"


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def runs(claim: Any, run_stale: bool) -> bool:
    """Whether ``claim`` is re-derived: every claim that is not stale, and with ``run_stale``
    the stale ones that have a reader (too long for CI, not impossible)."""
    return claim.stale is None or (run_stale and claim.measured is not None)


def run_claims(claims: list, timeout: float = TIMEOUT_S, log: Any = None, run_stale: bool = False) -> list[dict]:
    """Judge every claim, running each distinct command once (in registry order); ``log``
    gets one line per command run."""
    done: dict[str, Any] = {}
    records = []
    for claim in claims:
        if runs(claim, run_stale) and claim.command not in done:
            run = done[claim.command] = run_command(claim.command, timeout)
            if log:
                log(f"ran in {run.wall_s:.1f} s wall, {run.cpu_s:.1f} s CPU, exit {run.rc}, load "
                    f"{os.getloadavg()[0]:.1f}: {claim.command}")
        records.append(judge(claim, done[claim.command] if runs(claim, run_stale) else None))
    return records


def summary(records: list[dict]) -> dict:
    """Re-derived / total, what differs, and the stale ones with their dates."""
    derived = [r for r in records if r["status"] != "stale" and "date" not in r]
    return {"total": len(records), "re_derived": len(derived),
            "ok": sum(r["status"] == "ok" for r in records),
            "differs": [r["id"] for r in records if r["status"] == "differs"],
            "stale": [{"id": r["id"], "date": r["date"]} for r in records if r["status"] == "stale"]}


def select(claims: list, only: str | None, page: str | None) -> list:
    """The claims named by ``--only`` (ids, comma-separated) and on ``--page``."""
    wanted = set(only.split(",")) if only else None
    unknown = (wanted or set()) - {c.id for c in claims}
    if unknown:
        raise SystemExit(f"error: --only: unknown claim ids {sorted(unknown)} (see --list)")
    return [c for c in claims if (wanted is None or c.id in wanted) and (page is None or c.page == page)]


def listing(claims: list) -> list[dict]:
    """The registry as records, nothing run (pages are read)."""
    out = []
    for c in claims:
        doc, problem = read_page(c)
        out.append({"id": c.id, "page": f"{c.page}: {c.where}", "command": c.command,
                    "documented": list(doc) if doc else problem,
                    "kind": ("stale, re-derivable with --run-stale" if c.measured else "stale") if c.stale
                    else c.describe()})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one record per claim and a summary as JSON")
    ap.add_argument("--list", action="store_true", help="list the claims without running anything")
    ap.add_argument("--only", help="comma-separated claim ids")
    ap.add_argument("--page", help="only the claims of this page (e.g. docs/partition.md)")
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds one command may run")
    ap.add_argument("--run-stale", action="store_true",
                    help="also re-derive the stale claims that have a reader (the ones too long for CI)")
    args = ap.parse_args(argv)
    claims = select(registry(), args.only, args.page)
    if args.list:
        json.dump(listing(claims), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    records = run_claims(claims, args.timeout, lambda line: print(line, file=sys.stderr, flush=True), args.run_stale)
    result = {"claims": records, "summary": summary(records)}
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for r in records:
            print(f"{r['status']:<8} {r['id']:<44} documented {r['documented']}  measured {r['measured']}"
                  + (f"  ({r['date']})" if r.get("date") else "") + (f"  {r['problem']}" if r.get("problem") else ""))
        print(json.dumps(result["summary"]))
    return 1 if result["summary"]["differs"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
