"""A model of the user's own (docs/run.md, "Your own model"): TrainConfig's model fields from the options
of train, compare and run (their help is ModelOptions' in trainserve/core/options/train.py)."""

from __future__ import annotations

from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.options.train import FAMILIES
from trainserve.train.usermodel import is_reference, parse_shape


def model_fields(o: Any) -> dict[str, Any]:
    """TrainConfig's model fields from the options; one sentence for a name that is neither zoo nor reference."""
    model, input_shape = o.model, o.input_shape
    if model not in FAMILIES and not is_reference(model):
        raise UserError(f"--model {model!r} is neither a zoo family ({', '.join(FAMILIES)}) nor a reference to your "
                        "own function; write path/to/file.py:build or package.module:build")
    if not is_reference(model) and (input_shape or o.vocab_size is not None or o.num_classes is not None
                                    or o.input_dtype != "float32"):
        raise UserError(f"--input-shape, --input-dtype, --vocab-size and --num-classes describe a model of your own "
                        f"(--model file.py:build); the zoo's {model!r} takes its shape from --preset and the data")
    return {"model": model, "input_shape": parse_shape(input_shape) if input_shape else None,
            "input_dtype": o.input_dtype, "vocab_size": o.vocab_size, "num_classes": o.num_classes}
