"""PyYAML's safe loader without aliases, duplicate keys, deep nesting or huge integers
(see [Note: guarded reading] in ``planner.core.reader``)."""

from __future__ import annotations

from typing import Any

import yaml

from planner.core.reader import INT64_MAX, MAX_DEPTH

__all__ = ["GuardedLoader", "YamlRefused"]


class YamlRefused(Exception):
    """A YAML construct the guarded loader refuses, with the line it starts on."""

    def __init__(self, node_or_event: Any, problem: str, fix: str) -> None:
        super().__init__(problem)
        mark = getattr(node_or_event, "start_mark", None)
        self.line = mark.line + 1 if mark is not None else 1
        self.problem, self.fix = problem, fix


class GuardedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases, keys given twice, nesting beyond ``MAX_DEPTH`` and
    integers beyond int64 (their text is measured before it is converted)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D102 - PyYAML's hook
        if self.check_event(yaml.AliasEvent):
            raise YamlRefused(self.peek_event(), "uses a YAML alias (*name)",
                              "write the values out; no ppplan input needs anchors or aliases")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlRefused(self.peek_event(), f"nests lists or mappings more than {MAX_DEPTH} deep",
                                  "fix the file")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict:  # noqa: D102 - PyYAML's hook
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True) if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key in seen:
                raise YamlRefused(key_node, f"key {key!r:.40} is given twice", "keep one of them")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_guarded_int(self, node: Any) -> int:
        """An integer whose text (underscores aside) is short enough to convert, within int64."""
        text = str(self.construct_scalar(node)).replace("_", "")
        value = super().construct_yaml_int(node) if len(text) <= 24 else None
        if value is None or abs(value) > INT64_MAX:
            raise YamlRefused(node, f"integer {text[:24]}{'...' if len(text) > 24 else ''} does not fit 64 bits",
                              "give a number below 9.2e18")
        return value


GuardedLoader.add_constructor("tag:yaml.org,2002:int", GuardedLoader.construct_guarded_int)
