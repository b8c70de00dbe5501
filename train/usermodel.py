"""A model of the user's own, by reference: `path/to/file.py:build` or `package.module:build`.

The function (called with no arguments, or with `num_classes=K` when it takes that parameter)
returns a `torch.nn.Module` mapping a batch of inputs (B, *input_shape) to logits (B, K). The
reference, the input's shape and dtype, the classes and a SHA-256 of the defining file form a
`UserModelConfig`, the "user" family's config: the model card carries it like a zoo config, so
every later stage rebuilds the same model, and refuses one whose file has changed since.

`check` runs before any work: it imports the function, builds the module, runs one batch of two
samples and (for `trainserve run`) tries the ONNX export, so each thing that cannot work is one
sentence up front instead of a traceback halfway through a run. Nothing here imports torch at
module level.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.options.train import INPUT_DTYPES  # int64: token ids, drawn below --vocab-size

FAMILY = "user"
MIN_VOCAB = 10  # loadtest/model_info.py and serve/model/tuning.py send random token ids 0..9


def is_reference(model: str) -> bool:
    """Whether --model names a function ("file.py:build", "pkg.mod:build") rather than a zoo family."""
    return ":" in model


@dataclass
class UserModelConfig:
    """The "user" family's config: which function builds the model, and one sample's input."""

    reference: str  # absolute/path/file.py:function or package.module:function
    input_shape: tuple[int, ...]  # one sample, batch dimension excluded
    input_dtype: str = "float32"  # float32 | int64 (token ids)
    vocab_size: int | None = None  # int64 inputs: ids are 0..vocab_size-1
    num_classes: int = 10  # K: the model's output is (batch, K) logits
    sha256: str = ""  # of the file that defines the function, when the config was made
    name: str = ""  # the model's name in reports and the repository ("resnet_small" -> resnet_small_cpu)

    def __post_init__(self) -> None:
        self.input_shape = tuple(int(d) for d in self.input_shape)
        if not self.input_shape or any(d < 1 for d in self.input_shape):
            raise UserError(f"--input-shape {_shape_text(self.input_shape)} is invalid; give one sample's sizes "
                            "without the batch, each >= 1, e.g. 3,64,64")
        if self.input_dtype not in INPUT_DTYPES:
            raise UserError(f"--input-dtype {self.input_dtype!r} is invalid; choose one of {', '.join(INPUT_DTYPES)}")
        if self.input_dtype == "int64" and (self.vocab_size is None or self.vocab_size < MIN_VOCAB):
            raise UserError(f"--vocab-size {self.vocab_size} is invalid for int64 inputs; give the number of token "
                            f"ids the model's embedding takes (>= {MIN_VOCAB}: the load tests send ids 0..9)")
        if self.num_classes < 2:
            raise UserError(f"--num-classes {self.num_classes} is invalid; a classifier needs at least 2")
        if not self.name:
            self.name = model_name(self.reference)


def parse_shape(text: str) -> tuple[int, ...]:
    """"3,64,64" -> (3, 64, 64)."""
    try:
        shape = tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
    except ValueError:
        raise UserError(f"--input-shape {text!r} is invalid; give one sample's sizes as integers, "
                        "e.g. 3,64,64") from None
    if not shape or any(d < 1 for d in shape):
        raise UserError(f"--input-shape {text!r} is invalid; give one sample's sizes, each >= 1, e.g. 3,64,64")
    return shape


def cli_args(fields: dict[str, Any]) -> list[str]:
    """TrainConfig's model fields (input_shape, input_dtype, vocab_size, num_classes) as the stages' options."""
    out: list[str] = []
    if fields.get("input_shape"):
        out += ["--input-shape", _shape_text(tuple(fields["input_shape"]))]
    if fields.get("input_dtype", "float32") != "float32":
        out += ["--input-dtype", str(fields["input_dtype"])]
    for key in ("vocab_size", "num_classes"):
        if fields.get(key) is not None:
            out += [f"--{key.replace('_', '-')}", str(fields[key])]
    return out


def _shape_text(shape: tuple[int, ...]) -> str:
    return ",".join(str(d) for d in shape)


# --- the reference: where the function lives (no torch) ---------------------------------------------

def split_reference(reference: str) -> tuple[str, str]:
    """("path/to/file.py" or "pkg.mod", "function"), with a sentence for what does not parse."""
    where, _, func = reference.rpartition(":")
    if not where or not func.isidentifier():
        raise UserError(f"--model {reference!r} is not a reference; write path/to/file.py:build or "
                        "package.module:build (the function after the colon)")
    return where, func


def _is_file_ref(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where


def resolve_reference(reference: str) -> tuple[str, Path]:
    """The reference with an absolute file path (so child processes in other folders find it), and the file."""
    where, func = split_reference(reference)
    if _is_file_ref(where):
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise UserError(f"--model {reference!r}: the file {path} does not exist; give the path of the .py file "
                            "that defines the function")
        return f"{path}:{func}", path
    _cwd_on_path()
    try:
        spec = importlib.util.find_spec(where)
    except (ImportError, ValueError) as e:
        raise UserError(f"--model {reference!r}: module {where!r} cannot be found ({e}); check the name, or give "
                        "path/to/file.py:build") from None
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        raise UserError(f"--model {reference!r}: module {where!r} cannot be found on the Python path; check the "
                        "name, or give path/to/file.py:build")
    return reference, Path(spec.origin)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def model_name(reference: str) -> str:
    """A repository-safe name: the file's (or module's) last part, plus the function when it is not `build`."""
    where, func = split_reference(reference)
    stem = Path(where).stem if _is_file_ref(where) else where.rsplit(".", 1)[-1]
    name = stem if func == "build" else f"{stem}_{func}"
    name = re.sub(r"[^A-Za-z0-9_]", "_", name).strip("_") or "model"
    return name if name[0].isalpha() else f"m_{name}"


def _cwd_on_path() -> None:
    """`package.module:build` is looked up from the current folder too, as uvicorn does."""
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


# --- the function and its module (torch) ----------------------------------------------------------

def load_function(reference: str) -> Any:
    """The function a reference names, imported; one sentence when the file or the function is missing."""
    where, func = split_reference(reference)
    _, path = resolve_reference(reference)
    if _is_file_ref(where):
        module_name = f"trainserve_user_{hashlib.sha1(str(path).encode()).hexdigest()[:12]}"
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, path)
            if spec is None or spec.loader is None:
                raise UserError(f"--model {reference!r}: {path} cannot be imported as Python; give a .py file")
            module = importlib.util.module_from_spec(spec)
            parent = str(path.parent)
            if parent not in sys.path:  # the file may import its neighbours
                sys.path.insert(0, parent)
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as e:
                del sys.modules[module_name]
                raise UserError(f"--model {reference!r}: importing {path} failed ({type(e).__name__}: "
                                f"{_first_line(e)}); fix the file") from None
    else:
        try:
            module = importlib.import_module(where)
        except Exception as e:
            raise UserError(f"--model {reference!r}: importing {where} failed ({type(e).__name__}: "
                            f"{_first_line(e)}); fix the module") from None
    fn = getattr(module, func, None)
    if fn is None or not callable(fn):
        raise UserError(f"--model {reference!r}: {path} defines no function {func!r}; define "
                        f"`def {func}(): return MyModel()` there, or name the right function after the colon")
    return fn


def build(config: UserModelConfig, pass_classes: bool = True) -> Any:
    """The user's module, freshly built; refuses one whose file changed since `config` was made.

    `pass_classes`: call the function with num_classes=K when it takes that parameter (off while K
    is still to be read from the output, so the function's own default decides it)."""
    from torch import nn

    _, path = resolve_reference(config.reference)
    if config.sha256 and file_sha256(path) != config.sha256:
        raise UserError(f"{path} changed since this model was trained (sha256 {config.sha256[:12]}…, now "
                        f"{file_sha256(path)[:12]}…); restore that file or train again")
    fn = load_function(config.reference)
    kwargs = {"num_classes": config.num_classes} if pass_classes and _takes(fn, "num_classes") else {}
    try:
        module = fn(**kwargs)
    except Exception as e:
        raise UserError(f"--model {config.reference!r}: calling {fn.__name__}() failed ({type(e).__name__}: "
                        f"{_first_line(e)}); it must build the model without other arguments") from None
    if not isinstance(module, nn.Module):
        raise UserError(f"--model {config.reference!r}: {fn.__name__}() returned {type(module).__name__}, not a "
                        "torch.nn.Module; return the model itself")
    return module


def _takes(fn: Any, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def example_batch(config: UserModelConfig, batch: int = 2) -> Any:
    """A batch of plausible inputs: normal floats, or token ids below the vocabulary size."""
    import torch

    gen = torch.Generator().manual_seed(0)
    shape = (batch, *config.input_shape)
    if config.input_dtype == "int64":
        return torch.randint(0, int(config.vocab_size or 2), shape, generator=gen)
    return torch.randn(shape, generator=gen)


def make_config(reference: str, input_shape: tuple[int, ...] | None, input_dtype: str = "float32",
                vocab_size: int | None = None, num_classes: int | None = None) -> UserModelConfig:
    """Resolve, hash and check a reference: build it and run one batch of two samples (CPU, eval mode).

    `num_classes` None takes K from the model's output; given, the output must have K columns.
    """
    import torch

    resolved, path = resolve_reference(reference)
    if input_shape is None:
        raise UserError(f"--model {reference!r} needs --input-shape, one sample's sizes without the batch "
                        "(e.g. 3,64,64, or 128 for 128 token ids with --input-dtype int64)")
    config = UserModelConfig(resolved, tuple(input_shape), input_dtype, vocab_size, num_classes or 10,
                             sha256=file_sha256(path))
    model = build(config, pass_classes=num_classes is not None).eval()
    x = example_batch(config)
    try:
        with torch.no_grad():
            out = model(x)
    except Exception as e:
        raise UserError(f"--input-shape {_shape_text(config.input_shape)} ({config.input_dtype}) does not fit "
                        f"{model_name(reference)}: one batch of shape {list(x.shape)} failed with "
                        f"{type(e).__name__}: {_first_line(e)}; give the shape of one sample the model takes") from None
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != x.shape[0] or not out.is_floating_point():
        got = (f"a {type(out).__name__}" if not isinstance(out, torch.Tensor)
               else f"a {out.dtype} tensor of shape {list(out.shape)}")
        raise UserError(f"--model {reference!r} returned {got} for a batch of {x.shape[0]}; it must return "
                        f"(batch, K) float logits, one row of K class scores per sample")
    k = int(out.shape[1])
    if num_classes is not None and k != num_classes:
        raise UserError(f"--model {reference!r} outputs {k} classes per sample but --num-classes is {num_classes}; "
                        f"pass --num-classes {k} or change the model's last layer")
    if k < 2:
        raise UserError(f"--model {reference!r} outputs {k} class score per sample; a classifier needs K >= 2 logits")
    config.num_classes = k
    return config


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:240]
