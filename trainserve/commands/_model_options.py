"""The --model option of train, compare and run (a zoo family or a reference to the user's own
function) and the options that describe a model of the user's own (docs/run.md, "Your own model")."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from trainserve.core.errors import UserError
from trainserve.train.models import FAMILIES
from trainserve.train.usermodel import INPUT_DTYPES, is_reference, parse_shape

ModelOpt = Annotated[str, typer.Option("--model", "-m", help=(
    f"A zoo family ({', '.join(FAMILIES)}), or your own: path/to/file.py:build or package.module:build, a function "
    "returning a torch.nn.Module that maps a batch to (batch, K) logits (with --input-shape)."))]
InputShapeOpt = Annotated[str | None, typer.Option("--input-shape", help=(
    "Your own model: one sample's input without the batch, e.g. 3,64,64 (or 128 token ids with "
    "--input-dtype int64)."))]
InputDtypeOpt = Annotated[str, typer.Option("--input-dtype", help=(
    f"Your own model: {' or '.join(INPUT_DTYPES)} (token ids, with --vocab-size)."))]
VocabOpt = Annotated[int | None, typer.Option("--vocab-size", help="Your own model with int64 inputs: token ids 0..V-1.")]
NumClassesOpt = Annotated[int | None, typer.Option("--num-classes", help=(
    "Your own model: K, the classes of its (batch, K) logits (default: read from its output)."))]


def model_fields(model: str, input_shape: str | None, input_dtype: str, vocab_size: int | None,
                 num_classes: int | None) -> dict[str, Any]:
    """TrainConfig's model fields from the options; one sentence for a name that is neither zoo nor reference."""
    if model not in FAMILIES and not is_reference(model):
        raise UserError(f"--model {model!r} is neither a zoo family ({', '.join(FAMILIES)}) nor a reference to your "
                        "own function; write path/to/file.py:build or package.module:build")
    if not is_reference(model) and (input_shape or vocab_size is not None or num_classes is not None
                                    or input_dtype != "float32"):
        raise UserError(f"--input-shape, --input-dtype, --vocab-size and --num-classes describe a model of your own "
                        f"(--model file.py:build); the zoo's {model!r} takes its shape from --preset and the data")
    return {"model": model, "input_shape": parse_shape(input_shape) if input_shape else None,
            "input_dtype": input_dtype, "vocab_size": vocab_size, "num_classes": num_classes}
