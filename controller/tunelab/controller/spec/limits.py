"""Bounds a spec file meets before anything is expanded or stored.

A submission is hostile input: ``repeat: 1000000000``, a matrix of twenty axes, or 756 bytes of
nested YAML anchors (a "billion laughs") must be refused in milliseconds with bounded memory.
So the YAML is composed by a loader that counts every node as the constructed data would hold
it (aliases counted at their full size, without building them), and the number of variants is
computed arithmetically from the documents (matrix axes multiplied, ablation entries added,
times ``repeat``) before a single variant is made.

Counts alone miss the *label bomb* (issue 23): a 400 KB file whose matrix values are anchored
strings repeated by aliases builds labels and variant copies of gigabytes. So bytes are counted
too — every string at its length, an alias at its full expanded length: while composing (a
document may expand to at most ``max_expanded_bytes``) and arithmetically before expansion
(what all the variants and their labels would hold together must fit the same budget).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from tunelab.controller.spec.errors import SpecError, SpecIssue

DEFAULT_MAX_VARIANTS = 10_000


@dataclass(frozen=True)
class SpecLimits:
    """``max_variants`` is configurable (controller config ``max_variants``); the others bound
    the YAML text itself."""

    max_variants: int = DEFAULT_MAX_VARIANTS
    max_bytes: int = 1024 * 1024
    max_nodes: int = 200_000  # YAML nodes of a file with every alias expanded
    max_depth: int = 64
    max_values: int = 5_000_000  # nodes of a document x its variants: what expansion builds
    max_expanded_bytes: int = 16 * 1024 * 1024  # text of all variants and labels together


DEFAULT_LIMITS = SpecLimits()


class _TooLarge(yaml.YAMLError):
    pass


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses deep nesting, recursive aliases and an expanded size above
    ``max_nodes``, while composing (before any Python object is built)."""

    limits = DEFAULT_LIMITS

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}
        self._bytes: dict[int, int] = {}

    def compose_document(self) -> yaml.Node | None:
        self._sizes.clear()  # node ids are only unique among the live nodes of one document
        self._bytes.clear()
        return super().compose_document()

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        alias = self.check_event(yaml.AliasEvent)
        self._depth += 1
        if self._depth > self.limits.max_depth:
            raise _TooLarge(f"nested deeper than {self.limits.max_depth} levels")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is None:
            return None
        if alias:
            if id(node) not in self._sizes:  # its anchor is still being composed
                raise _TooLarge("a YAML alias refers to a node that contains it")
        else:
            self._sizes[id(node)] = self._size(node)
        return node

    def _size(self, node: yaml.Node) -> int:
        children: list[Any] = []
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        total = 1
        text = len(node.value) if isinstance(node, yaml.ScalarNode) else 2
        for child in children:
            total += self._sizes[id(child)]
            text += self._bytes[id(child)] + 2
            if total > self.limits.max_nodes:
                raise _TooLarge(
                    f"more than {self.limits.max_nodes} values once aliases are expanded"
                )
        if text > self.limits.max_expanded_bytes:
            raise _TooLarge(
                f"more than {self.limits.max_expanded_bytes} bytes of text once aliases are "
                "expanded"
            )
        self._bytes[id(node)] = text
        return total


def load_documents(text: str, limits: SpecLimits, source: str = "") -> list[Any]:
    """The YAML documents of ``text``, or SpecError when it is malformed or too large."""
    size = len(text.encode())
    if size > limits.max_bytes:
        raise SpecError(
            [SpecIssue("", f"spec is {size} bytes; the limit is {limits.max_bytes}")], source
        )
    loader_class = type("Loader", (_BoundedLoader,), {"limits": limits})
    loader = loader_class(text)
    try:
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
        return docs
    except _TooLarge as exc:
        raise SpecError([SpecIssue("", f"spec refused: {exc}")], source) from None
    except yaml.YAMLError as exc:
        raise SpecError([SpecIssue("", f"not valid YAML: {exc}")], source) from None
    finally:
        loader.dispose()


def variant_count(raw: Mapping[str, Any]) -> int:
    """How many experiments one validated document expands to, without expanding it."""
    matrix, ablation = raw.get("matrix"), raw.get("ablation")
    variants = 1
    if isinstance(matrix, Mapping):
        variants = math.prod(len(v) if isinstance(v, list) else 1 for v in matrix.values())
    elif isinstance(ablation, list):
        variants = 1 + len(ablation)
    repeat = raw.get("repeat", 1)
    return variants * (repeat if isinstance(repeat, int) and repeat > 0 else 1)


def value_count(value: Any, limit: int) -> int:
    """Nodes in a constructed document (stops counting past ``limit``)."""
    count, todo = 0, [value]
    while todo and count <= limit:
        item = todo.pop()
        count += 1
        if isinstance(item, Mapping):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return count


def text_bytes(value: Any, limit: int) -> int:
    """About how many bytes of text a constructed value holds (stops counting past ``limit``);
    a value reached twice (an alias) counts twice, as a copy or a label of it would."""
    count, todo = 0, [value]
    while todo and count <= limit:
        item = todo.pop()
        if isinstance(item, Mapping):
            count += 2
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            count += 2
            todo.extend(item)
        elif isinstance(item, str):
            count += len(item) + 2
        else:
            count += 8
    return count


def expanded_bytes(doc: Mapping[str, Any], variants: int, limit: int) -> int:
    """What a document's variants and their labels hold together, computed before any is made:
    each variant copies the base; each matrix value appears in its variants and their labels."""
    base = {k: v for k, v in doc.items() if k not in ("matrix", "ablation")}
    total = variants * text_bytes(base, limit)
    matrix, ablation = doc.get("matrix"), doc.get("ablation")
    if isinstance(matrix, Mapping):
        for path, values in matrix.items():
            axis = values if isinstance(values, list) and values else [values]
            per_value = variants // len(axis)  # variants that hold each value of this axis
            for value in axis:
                total += 2 * per_value * (text_bytes(value, limit) + len(str(path)))
                if total > limit:
                    return total
    elif isinstance(ablation, list):
        total += 2 * text_bytes(ablation, limit)
    return total


def check_expansion(docs: list[Any], limits: SpecLimits, source: str = "") -> None:
    """Refuse a file whose documents would expand past the limits (arithmetic only)."""
    total = values = text = 0
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        n = variant_count(doc)
        total += n
        if total > limits.max_variants:
            raise SpecError(
                [
                    SpecIssue(
                        "",
                        f"expands to more than {limits.max_variants} experiments "
                        f"(at least {total}); split the file or raise the controller's "
                        "max_variants",
                    )
                ],
                source,
            )
        base = {k: v for k, v in doc.items() if k not in ("matrix", "ablation")}
        values += n * value_count(base, limits.max_values)
        if values > limits.max_values:
            raise SpecError(
                [
                    SpecIssue(
                        "",
                        f"expands to more than {limits.max_values} values in all "
                        f"({n} variants of a large document); make the document smaller",
                    )
                ],
                source,
            )
        text += expanded_bytes(doc, n, limits.max_expanded_bytes)
        if text > limits.max_expanded_bytes:
            raise SpecError(
                [
                    SpecIssue(
                        "",
                        f"expands to more than {limits.max_expanded_bytes} bytes of text in all "
                        f"(variants and their labels); use shorter values or fewer variants",
                    )
                ],
                source,
            )
