"""A command's typer options, generated from its option trees (trainserve/core/options/).

    @options_of("train")
    def train(o: Args) -> None: ...

builds the typer signature from COMMANDS["train"] (flags, aliases, help, choices, defaults) and calls the
function with the parsed values: `o.batch_size`, plain strings for choices, `o.given` the options the
command line set. No command writes an option's help or default itself.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any

import typer

from trainserve.core.options.commands import COMMANDS
from trainserve.core.options.spec import REQUIRED, Command, Option

_METAVARS = {"s": "SECONDS", "ms": "MS", "µs": "MICROSECONDS"}  # others: the unit upper-cased


class Args:
    """One command's parsed options, by field name; `of(Tree)` picks one tree's fields."""

    def __init__(self, values: dict[str, Any], given: frozenset[str] = frozenset()) -> None:
        self.__dict__.update(values)
        self.given = given  # the options the command line (or the environment) set, by field name

    def of(self, tree: type, **changes: Any) -> dict[str, Any]:
        """The values of `tree`'s fields this command has, as keyword arguments."""
        names = {f.name for f in dataclasses.fields(tree)}
        return {**{k: v for k, v in vars(self).items() if k in names}, **changes}


def choices_enum(o: Option) -> type[StrEnum]:
    return StrEnum("".join(p.title() for p in o.name.split("_")), {v: v for v in o.meta.choices})  # type: ignore


def parameter(o: Option) -> inspect.Parameter:
    """The typer parameter of one option."""
    kind: Any = o.meta.cli_type if o.meta.cli_type is not None else o.type
    default = o.default
    if o.meta.cli_type is not None and default not in (REQUIRED, None):
        default = ",".join(map(str, default)) if isinstance(default, tuple) else f"{default:g}" \
            if isinstance(default, float) else str(default)
    if o.meta.choices:
        enum = choices_enum(o)
        kind = enum | None if default is None else enum
        if default not in (REQUIRED, None):
            default = enum(default)
    # every option names itself (typer 0.27 derived `--USERS` for a field `users` whose metavar is USERS)
    info = typer.Argument(help=o.meta.help, metavar=o.flag, show_default=False) if o.meta.argument else \
        typer.Option(*o.cli_names, help=o.meta.help, metavar=_metavar(o))
    return inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[kind, info],
                             default=inspect.Parameter.empty if default is REQUIRED else default)


def _metavar(o: Option) -> str | None:
    if not o.meta.unit or o.type is bool or o.meta.cli_type is not None:  # "30s" is text, not SECONDS
        return None
    return _METAVARS.get(o.meta.unit, o.meta.unit.upper())


def signature(spec: Command) -> inspect.Signature:
    return inspect.Signature([parameter(o) for o in spec.options()])


def options_of(name: str | Command) -> Callable[[Callable[[Args], Any]], Callable[..., Any]]:
    """Give the decorated `fn(o: Args)` the typer signature of command `name` (or of a Command)."""
    spec = COMMANDS[name] if isinstance(name, str) else name

    def wrap(fn: Callable[[Args], Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def command(typer_context: typer.Context, **values: Any) -> Any:
            sources = {k: typer_context.get_parameter_source(k) for k in values}
            given = frozenset(k for k, src in sources.items() if src is not None and src.name != "DEFAULT")
            return fn(Args({k: v.value if isinstance(v, StrEnum) else v for k, v in values.items()}, given))

        context = inspect.Parameter("typer_context", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
        sig = signature(spec)
        command.__signature__ = sig.replace(parameters=[context, *sig.parameters.values()])  # type: ignore[attr-defined]
        command.__annotations__ = {}
        return command

    return wrap
