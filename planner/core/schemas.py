"""JSON Schema checks for files users hand us (cost tables, plans).

The schemas are package data (``planner/data/schemas/``). A violation becomes an
``InputError`` naming the JSON path of the first offending field.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from planner.core.errors import InputError
from planner.core.paths import SCHEMAS_DIR

__all__ = ["SCHEMAS_DIR", "check_schema", "load_schema"]


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    """Parsed schema ``planner/data/schemas/<name>.schema.json``."""
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
    raise InputError(path, message, f"see planner/data/schemas/{name}.schema.json")
