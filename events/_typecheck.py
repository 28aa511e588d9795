"""Annotation-driven type checks: does a decoded msgpack map fit a frozen dataclass?

msgpack gives back plain values (dicts, lists, str, int, float, bytes, None); a payload class
says with its annotations what each field may hold. :meth:`Shape.of` turns a dataclass's
annotations into one predicate per field, once, so checking a record is a dict lookup and a
call per field — the ingester runs it on every record it reads. The checks are strict where
Python is loose: ``True`` is not an ``int``, a float must be finite, a ``Literal`` is one of its
strings, a map may carry no field the class lacks. The annotations understood are the ones the
payloads use (str, int, float, bool, bytes, None, ``Any``, ``Literal``, unions, tuples, dicts);
any other raises ``TypeError`` when the shape is built (at import), not when a record is read.

The codec (:mod:`mirror.events.codec`) owns the record layout and its errors; this module knows
only dataclasses and values.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from typing import Any, Literal

Check = Callable[[Any], bool]

_EXACT_TYPES = (str, int, bool, type(None))
"""Annotations whose values are checked by exact type (``True`` is not an ``int`` here)."""


def _is_finite_float(value: Any) -> bool:
    return type(value) is float and math.isfinite(value)


def _union_checker(options: tuple[Any, ...]) -> Check:
    """``A | B | …``: one set lookup when every option is a plain type, else any option."""
    if all(option in _EXACT_TYPES or option is float for option in options):
        exact = frozenset(option for option in options if option is not float) | (
            {int} if float in options else set()  # a float field also takes whole numbers
        )
        if float in options:
            return lambda value: type(value) in exact or _is_finite_float(value)
        return lambda value: type(value) in exact
    checks = tuple(checker(option) for option in options)

    def any_option(value: Any) -> bool:
        for check in checks:
            if check(value):
                return True
        return False

    return any_option


def checker(annotation: Any) -> Check:
    """A predicate for values of a (simple) annotated field type.

    These run for every field of every record the ingester reads, so each is one expression
    without generators where it can be.
    """
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return lambda value: True
    if annotation is float:
        return lambda value: type(value) is int or _is_finite_float(value)
    if annotation in (str, int, bool, bytes):
        return lambda value: type(value) is annotation
    if origin is Literal:
        allowed = frozenset(typing.get_args(annotation))
        return lambda value: isinstance(value, str) and value in allowed
    if origin in (typing.Union, types.UnionType):
        return _union_checker(typing.get_args(annotation))
    if annotation is type(None):
        return lambda value: value is None
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            item = checker(args[0])
            return lambda value: isinstance(value, (list, tuple)) and all(map(item, value))
        items = [checker(arg) for arg in args]
        return lambda value: (
            isinstance(value, (list, tuple))
            and len(value) == len(items)
            and all(check(v) for check, v in zip(items, value, strict=True))
        )
    if origin is dict:
        key_type, value_type = typing.get_args(annotation)
        check_key, check_value = checker(key_type), checker(value_type)
        return lambda value: (
            isinstance(value, dict) and all(map(check_key, value.keys())) and all(map(check_value, value.values()))
        )
    raise TypeError(f"no checker for {annotation!r}")


@dataclasses.dataclass(frozen=True)
class Shape:
    """How to check and build one dataclass from a plain dict."""

    cls: type
    checks: dict[str, Check]
    required: frozenset[str]
    tuple_fields: frozenset[str]

    @classmethod
    def of(cls, target: type) -> Shape:
        hints = typing.get_type_hints(target)
        fields = [f for f in dataclasses.fields(target)]
        required = frozenset(
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        tuple_fields = frozenset(
            f.name
            for f in fields
            if any(typing.get_origin(arg) is tuple for arg in (hints[f.name], *typing.get_args(hints[f.name])))
        )
        return cls(target, {f.name: checker(hints[f.name]) for f in fields}, required, tuple_fields)

    def fits(self, values: Any) -> bool:
        """Whether ``values`` (a decoded map) can build ``cls``: the fast path, run on every record."""
        if type(values) is dict and values.keys() <= self.checks.keys() and self.required <= values.keys():
            checks = self.checks
            for name, value in values.items():
                if not checks[name](value):
                    return False
            return True
        return False

    def reason(self, values: Any) -> str:
        """Why ``values`` does not fit (the slow path, only for bad records)."""
        if type(values) is not dict:
            return f"{self.cls.__name__} is not a map"
        keys = values.keys()
        if not keys <= self.checks.keys():
            return f"{self.cls.__name__} has unknown fields {sorted(map(str, keys - self.checks.keys()))}"
        if not self.required <= keys:
            return f"{self.cls.__name__} lacks fields {sorted(self.required - keys)}"
        name, value = next((name, value) for name, value in values.items() if not self.checks[name](value))
        return f"{self.cls.__name__}.{name} has a bad value {value!r:.80}"

    def build(self, values: dict[str, Any]) -> Any:
        """Build ``cls`` from a map that :meth:`fits`."""
        if self.tuple_fields:
            values = {
                name: (_tupled(value) if name in self.tuple_fields and isinstance(value, list) else value)
                for name, value in values.items()
            }
        return self.cls(**values)


def _tupled(value: list[Any]) -> tuple[Any, ...]:
    """A list from the wire as the tuple it was, nested lists (e.g. ``Recall.edges``) included."""
    items = tuple(value)
    for item in items:
        if type(item) is list:
            return tuple(_tupled(item) if type(item) is list else item for item in items)
    return items


__all__ = ["Check", "Shape", "checker"]
