"""Read a folder of PyTorch profiler (Kineto) traces, one per rank: Chrome trace JSON,
``.json`` or ``.json.gz`` (what ``torch.profiler.profile.export_chrome_trace`` and
``tensorboard_trace_handler`` write). Every file is checked on load; a bad one is one
``InputError`` naming the file and the fix.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.core.errors import InputError
from planner.core.reader import MAX_TRACE_BYTES, decode_text, read_input_bytes
from profiler.trace.names import RUN_METADATA

__all__ = ["Event", "RankTrace", "read_trace", "read_traces", "trace_files"]

_FIELD = "--from-trace"
_SUFFIXES = (".json", ".json.gz")


@dataclass(frozen=True, kw_only=True)
class Event:
    """One complete event (``ph: X``) of a trace, times in microseconds as Kineto writes them."""

    name: str
    cat: str
    ts: float
    dur: float
    pid: int | str
    tid: int | str
    correlation: int | None = None
    """``args.correlation``: links a CUDA runtime launch to the kernel it launched."""
    stream: int | None = None
    """``args.stream``: the GPU stream of a device event (None on the host), as HTA reads it."""

    @property
    def end(self) -> float:
        """End time, microseconds."""
        return self.ts + self.dur


@dataclass(frozen=True, kw_only=True)
class RankTrace:
    """One rank's trace."""

    path: str
    rank: int
    events: tuple[Event, ...]
    run: dict[str, Any] = field(default_factory=dict)
    """The run's shape recorded under the ``ppplan`` metadata key (empty when absent)."""


def trace_files(folder: str) -> list[Path]:
    """The trace files of ``folder`` (sorted); ``InputError`` when there are none."""
    p = Path(folder)
    if not p.is_dir():
        raise InputError(_FIELD, f"{folder} is not a folder", "give the folder holding one trace per rank")
    files = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(_SUFFIXES))
    if not files:
        raise InputError(_FIELD, f"{folder} holds no .json or .json.gz trace",
                         "record one with torch.profiler (see docs/trace-import.md)")
    return files


def _text(path: Path) -> str:
    data = read_input_bytes(path, what=_FIELD, limit=MAX_TRACE_BYTES)
    if path.name.endswith(".gz"):
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
                data = fh.read(MAX_TRACE_BYTES + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(_FIELD, f"{path} is not gzip ({exc})", "give the .json.gz file the profiler wrote") from None
        if len(data) > MAX_TRACE_BYTES:
            raise InputError(_FIELD, f"{path} unpacks to more than {MAX_TRACE_BYTES // 2**20} MiB",
                             "record fewer steps")
    return decode_text(data, what=_FIELD, source=str(path))


def _parse(text: str, path: Path) -> Any:
    """[Note: trace parsing] A profiler trace is machine-written and large (tens of MB for a few
    steps: every aten op is an event), so it is parsed by ``json.loads`` alone, not by
    ``planner.core.reader.parse_json``'s guarded parser (duplicate keys, int64 checks), which
    takes minutes on it; its size is capped on the way in (``MAX_TRACE_BYTES``) and each event
    is checked as it is read (``_event``)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(_FIELD, f"{path} is not JSON ({exc})", "give the Chrome trace JSON torch.profiler writes") from None


def _event(raw: Any) -> Event | None:
    if not isinstance(raw, dict) or raw.get("ph") != "X":
        return None
    ts, dur = raw.get("ts"), raw.get("dur")
    if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or not 0 <= dur < math.inf \
            or not math.isfinite(ts):
        return None
    args = raw.get("args") if isinstance(raw.get("args"), dict) else {}
    corr, stream = args.get("correlation"), args.get("stream")
    return Event(name=str(raw.get("name", "")), cat=str(raw.get("cat", "")), ts=float(ts), dur=float(dur),
                 pid=raw.get("pid", 0), tid=raw.get("tid", 0), correlation=corr if isinstance(corr, int) else None,
                 stream=stream if isinstance(stream, int) and stream >= 0 else None)


def _run_metadata(data: dict[str, Any], path: Path) -> dict[str, Any]:
    raw = data.get(RUN_METADATA)
    if raw is None:
        return {}
    value = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(value, dict):
        raise InputError(f"{_FIELD} {path.name}.{RUN_METADATA}", "is not a JSON object",
                         "record it with profiler.trace.record")
    return value


def read_trace(path: Path, default_rank: int) -> RankTrace:
    """One trace file; ``InputError`` when it is not a Chrome trace."""
    data = _parse(_text(path), path)
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise InputError(_FIELD, f"{path} is not a PyTorch profiler trace (no traceEvents list)",
                         "give the Chrome trace JSON torch.profiler writes")
    events = tuple(e for e in map(_event, data["traceEvents"]) if e is not None)
    if not events:
        raise InputError(_FIELD, f"{path} has no timed events", "profile at least one step")
    info = data.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) and isinstance(info.get("rank"), int) else default_rank
    return RankTrace(path=str(path), rank=rank, events=events, run=_run_metadata(data, path))


def read_traces(folder: str) -> list[RankTrace]:
    """Every trace of ``folder``, by rank."""
    traces = [read_trace(f, k) for k, f in enumerate(trace_files(folder))]
    return sorted(traces, key=lambda t: t.rank)
