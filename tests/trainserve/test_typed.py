"""from_json reads back what to_json wrote: dataclasses, optional fields, unions told apart by their keys, and
a clear error for JSON of another shape."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from trainserve.report.common.typed import OPTIONAL, from_json, to_json


@dataclass
class Known:
    samples: int
    hours: float | None


@dataclass
class Unknown:
    samples: None
    note: str


@dataclass
class Row:
    name: str
    run: Known | Unknown
    tags: tuple[str, ...]
    by_device: dict[str, list[Known]]
    extra: str | None = field(default=None, metadata=OPTIONAL)


def test_a_section_round_trips_with_its_union_tuple_and_optional_field():
    rows = [Row("a", Known(10, None), ("x", "y"), {"cpu": [Known(1, 0.5)]}),
            Row("b", Unknown(None, "no rows per epoch"), (), {}, extra="note")]
    data = to_json(rows)
    assert "extra" not in data[0] and data[1]["extra"] == "note"
    assert from_json(list[Row], data) == rows


def test_json_of_another_shape_is_a_value_error_naming_the_section():
    with pytest.raises(ValueError, match=r"Known needs the keys \['hours', 'samples'\]"):
        from_json(Known, {"samples": 1})
    with pytest.raises(ValueError, match="Known needs the keys"):
        from_json(Known, {"samples": 1, "hours": 2.0, "typo": 3})
    with pytest.raises(ValueError, match="fits 0 of Known or Unknown"):
        from_json(Known | Unknown, {"samples": 1})
    with pytest.raises(ValueError, match="JSON array"):
        from_json(list[Known], {"samples": 1})
    assert from_json(Known | None, None) is None
