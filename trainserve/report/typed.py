"""The report's sections as JSON and back (summary.json): the one encoding of typed records, trainserve/core/typed.py."""

from trainserve.core.typed import OPTIONAL, from_json, to_json

__all__ = ["OPTIONAL", "from_json", "to_json"]
