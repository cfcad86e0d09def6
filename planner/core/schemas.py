"""JSON Schema checks for files users hand us (cost tables, plans).

The schemas live in the repository's ``plans/`` folder. A violation becomes an
``InputError`` naming the JSON path of the first offending field.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from planner.core.errors import InputError

__all__ = ["SCHEMAS_DIR", "check_schema", "load_schema"]

SCHEMAS_DIR = Path(__file__).resolve().parents[2] / "plans"
"""Folder holding ``plan.schema.json`` and ``costs.schema.json``."""


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    """Parsed schema ``plans/<name>.schema.json``."""
    return json.loads((SCHEMAS_DIR / f"{name}.schema.json").read_text())


def check_schema(data: Any, name: str, *, what: str) -> None:
    """Raise ``InputError`` at the first schema violation, naming its JSON path."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(load_schema(name))
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is None:
        return
    path = what + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    message = error.message
    if len(message) > 160:
        message = message[:157] + "..."
    raise InputError(path, message, f"see plans/{name}.schema.json")
