"""How an option is declared: one dataclass field carries its default, unit, help, flags and aliases.

    batch_size: int = opt(64, "Samples per optimizer step.", unit="samples", flags=("--batch-size", "-b"))

The CLI (trainserve/commands/_typer.py), Locust's parser and web form (loadtest/options.py) and the docs'
tables (trainserve/optiondocs.py) read these fields; none of them writes a default or a help text itself.
Light by design: no typer, torch or numpy here, so every command and Locust worker may import the tree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

REQUIRED: Any = dataclasses.MISSING


@dataclass(frozen=True)
class Opt:
    """An option's metadata beside its dataclass field (the default lives on the field itself)."""

    help: str  # the one help text: --help, the web form (unless web_help), the docs' tables
    unit: str = ""  # what the number counts: "ms", "s", "samples", "requests/s", ... ("" for none)
    flags: tuple[str, ...] = ()  # the CLI's names, first the canonical one; () -> --field-name
    aliases: tuple[str, ...] = ()  # older flags that keep working (listed in --help and the docs)
    choices: tuple[str, ...] = ()  # allowed values of a text option
    cli: bool = True  # False: a setting of the library only, not on any command line
    cli_type: Any = None  # the type typer parses when it differs from the field's (e.g. "3,64,64" -> tuple)
    required: bool = False  # the command line must give it (the field may still have a default)
    argument: bool = False  # a positional argument (`trainserve diff RUN_A RUN_B`), named by its metavar
    # Locust: in the web UI's start form, labelled `label`, with `web_help` for words where the command
    # line's help names other options by their flags
    web: bool = False
    label: str = ""
    web_help: str = ""


def opt(default: Any = REQUIRED, help: str = "", **meta: Any) -> Any:
    """A dataclass field that is also an option (see Opt for `meta`)."""
    return field(default=default, metadata={"option": Opt(help=help, **meta)})


def like(cls: type, name: str, default: Any = REQUIRED, **changes: Any) -> Any:
    """Field `name` of `cls` again, in another tree (another default, or more metadata), written once."""
    f = cls.__dataclass_fields__[name]
    meta = dataclasses.replace(f.metadata["option"], **changes)
    if default is REQUIRED:
        default = f.default
    return field(default=default, metadata={"option": meta, "like": f"{cls.__name__}.{name}"})


@dataclass(frozen=True)
class Option:
    """One option as a reader sees it: field name, type, default and metadata."""

    name: str
    type: Any  # the field's annotation, evaluated
    default: Any  # REQUIRED when the command line must give it
    meta: Opt

    @property
    def flag(self) -> str:
        if self.meta.argument:
            return self.name.upper()
        return self.meta.flags[0] if self.meta.flags else "--" + self.name.replace("_", "-")

    @property
    def names(self) -> tuple[str, ...]:
        return (self.meta.flags or (self.flag,)) + self.meta.aliases

    @property
    def cli_names(self) -> tuple[str, ...]:
        """The command line's declarations: a switch without flags of its own is typer's pair --x/--no-x."""
        if self.type is bool and not self.meta.flags and not self.meta.argument:
            return (f"{self.flag}/--no-{self.flag[2:]}",) + self.meta.aliases
        return self.names


def options(cls: type, *, cli_only: bool = True) -> Iterator[Option]:
    """The options of a dataclass tree, in field order (with `cli_only`, those on a command line)."""
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("option")
        if meta is None or (cli_only and not meta.cli):
            continue
        # every option has a default on its field (opt, like): REQUIRED when the command line must give it
        yield Option(f.name, hints[f.name], REQUIRED if meta.required else f.default, meta)


def option_of(cls: type, name: str) -> Option:
    for o in options(cls, cli_only=False):
        if o.name == name:
            return o
    raise KeyError(f"{cls.__name__} has no option {name!r}")


@dataclass(frozen=True)
class Command:
    """A command's options: the trees it reads, in --help order, less `omit`, with its own `defaults`."""

    name: str
    trees: tuple[type, ...]
    omit: frozenset[str] = frozenset()
    defaults: tuple[tuple[str, Any], ...] = ()  # (field, default) where this command's differs from the tree's
    required: frozenset[str] = frozenset()  # fields this command needs given

    def options(self) -> list[Option]:
        seen: dict[str, Option] = {}
        own = dict(self.defaults)
        for tree in self.trees:
            for o in options(tree):
                if o.name in self.omit or o.name in seen:
                    continue
                if o.name in self.required:
                    o = dataclasses.replace(o, default=REQUIRED)
                elif o.name in own:
                    o = dataclasses.replace(o, default=own[o.name])
                seen[o.name] = o
        return list(seen.values())


def command(name: str, *trees: type, omit: tuple[str, ...] = (), required: tuple[str, ...] = (),
            **defaults: Any) -> Command:
    return Command(name, trees, frozenset(omit), tuple(defaults.items()), frozenset(required))
