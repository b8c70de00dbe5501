"""The report's sections as JSON and back: `to_json` writes a section as summary.json has it, `from_json` reads
it back into the same dataclasses (a reader of summary.json; the tests hold that nothing is lost on the way).

A section is a dataclass; its fields are written in field order. A field that is None is written as null
("not measured"), except one whose metadata is `OPTIONAL`, which summary.json leaves out when it does not apply.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

OPTIONAL = {"optional": True}  # field metadata: left out of summary.json when None


def to_json(x: Any) -> Any:
    """A section (or a dict or list of them) as plain JSON values, in field order."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: to_json(getattr(x, f.name)) for f in dataclasses.fields(x)
                if not (f.metadata.get("optional") and getattr(x, f.name) is None)}
    if isinstance(x, dict):
        return {k: to_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    return x


def from_json(kind: Any, data: Any) -> Any:
    """`data` (what to_json wrote) as the type `kind`: a dataclass, `X | None`, a union of dataclasses (told
    apart by their keys), list[X], tuple[X, ...], dict[str, X], or a plain JSON value (returned as it is).

    Raises ValueError naming the section when `data` does not have its shape."""
    if data is None:
        return None
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        choices = [a for a in args if a is not type(None)]
        if len(choices) == 1:
            return from_json(choices[0], data)
        sections = [a for a in choices if dataclasses.is_dataclass(a)]
        if not sections or not isinstance(data, dict):
            return data  # e.g. int | float: a plain value
        fitting = [a for a in sections if _fits(a, data)]
        if len(fitting) != 1:
            names = " or ".join(a.__name__ for a in sections)
            raise ValueError(f"{sorted(data)} fits {len(fitting)} of {names}, not exactly one")
        return from_json(fitting[0], data)
    if origin is list:
        return [from_json(args[0], v) for v in _expect(list, data, kind)]
    if origin is tuple:
        return tuple(from_json(args[0], v) for v in _expect(list, data, kind))
    if origin is dict:
        return {k: from_json(args[1], v) for k, v in _expect(dict, data, kind).items()}
    if dataclasses.is_dataclass(kind):
        _expect(dict, data, kind)
        if not _fits(kind, data):
            raise ValueError(f"{kind.__name__} needs the keys {sorted(_required(kind))} (optional: "
                             f"{sorted(_names(kind) - _required(kind))}); got {sorted(data)}")
        hints = typing.get_type_hints(kind)
        return kind(**{k: from_json(hints[k], v) for k, v in data.items()})
    return data


def _names(kind: type) -> set[str]:
    return {f.name for f in dataclasses.fields(kind) if f.init}


def _required(kind: type) -> set[str]:
    return {f.name for f in dataclasses.fields(kind) if f.init and not f.metadata.get("optional")}


def _fits(kind: type, data: dict[str, Any]) -> bool:
    return _required(kind) <= data.keys() <= _names(kind)


def _expect(json_type: type, data: Any, kind: Any) -> Any:
    if not isinstance(data, json_type):
        raise ValueError(f"{kind} needs a JSON {'object' if json_type is dict else 'array'}, not {data!r:.80}")
    return data
