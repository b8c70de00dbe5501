"""The report's sections as JSON and back (summary.json), by the one encoding of typed records:
trainserve/core/typedjson.py."""

from trainserve.core.typedjson import OPTIONAL, from_json, to_json

__all__ = ["OPTIONAL", "from_json", "to_json"]
