"""The option machinery itself: opt/like/Command (trainserve/core/options/spec.py) and the typer
parameters generated from them (trainserve/commands/_typer.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import typer
from typer.testing import CliRunner

from trainserve.cli import app
from trainserve.commands._typer import Args, options_of
from trainserve.core.options.spec import REQUIRED, command, like, opt, option_of, options


@dataclass(kw_only=True)
class _Tree:
    size: int = opt(4, "How many.", unit="rows", aliases=("--n",))
    kind: str = opt("a", "Which kind.", choices=("a", "b"))
    name: str = opt(REQUIRED, "Its name.")
    quiet: bool = opt(False, "Say less.", flags=("--quiet",))
    hidden: float = opt(1.0, "Not on a command line.", cli=False)


@dataclass(kw_only=True)
class _Other:
    size: int = like(_Tree, "size", 8)


def test_opt_keeps_default_unit_and_help_on_the_field():
    size = option_of(_Tree, "size")
    assert (size.default, size.meta.unit, size.meta.help, size.names) == (4, "rows", "How many.", ("--size", "--n"))
    assert [o.name for o in options(_Tree)] == ["size", "kind", "name", "quiet"]  # hidden: cli=False
    assert option_of(_Tree, "name").default is REQUIRED and _Tree(name="x").hidden == 1.0


def test_like_is_the_same_option_with_another_default():
    a, b = option_of(_Tree, "size"), option_of(_Other, "size")
    assert b.meta == a.meta and b.default == 8 and _Other().size == 8


def test_a_command_omits_overrides_and_requires():
    spec = command("x", _Tree, _Other, omit=("quiet",), required=("kind",), size=16)
    got = {o.name: o.default for o in spec.options()}
    assert got == {"size": 16, "kind": REQUIRED, "name": REQUIRED}  # _Other's size: already there, first wins


def _app():
    """A typer app with one command over _Tree; the Args each call got."""
    seen: list[Args] = []
    test_app = typer.Typer()

    @test_app.command("go")
    @options_of(command("go", _Tree))
    def go(o: Args) -> None:
        seen.append(o)

    test_app.command("other")(lambda: None)  # two commands: typer keeps the command's name
    return test_app, seen


def test_generated_parameters_parse_aliases_choices_and_know_what_was_given():
    test_app, seen = _app()
    out = CliRunner().invoke(test_app, ["go", "--name", "n", "--n", "7", "--kind", "b"])
    assert out.exit_code == 0, out.output
    o = seen[-1]
    assert (o.size, o.kind, o.name, o.quiet) == (7, "b", "n", False) and type(o.kind) is str
    assert o.given == {"size", "kind", "name"}
    assert o.of(_Tree, quiet=True) == {"size": 7, "kind": "b", "name": "n", "quiet": True}
    bad = CliRunner().invoke(test_app, ["go", "--name", "n", "--kind", "c"])
    assert bad.exit_code == 2 and "'c' is not one of" in bad.output
    missing = CliRunner().invoke(test_app, ["go"])
    assert missing.exit_code == 2 and "--name" in missing.output


def test_help_shows_each_options_help_and_unit():
    test_app, _ = _app()
    out = CliRunner().invoke(test_app, ["go", "--help"])
    text = " ".join(out.output.replace("│", " ").split())
    for words in ("How many.", "Which kind.", "Its name.", "Say less.", "ROWS", "--n"):
        assert words in text, words
    assert "Not on a command line." not in text


@pytest.mark.parametrize("args, field", [
    (["export", "--run", "r", "--max-queue-delay-us", "99999999"], "max_queue_delay_microseconds=99999999"),
    (["train", "--workers", "99"], "num_workers=99"),
])
def test_old_flags_still_work_as_aliases(args, field, tmp_path):
    """The value given under the old flag reaches the field named as Triton and torch name it (a bad value,
    so the command stops at the check that names the field)."""
    out = CliRunner().invoke(app, [*args, "--runs-dir", str(tmp_path)])
    assert out.exit_code == 1 and field in out.output, out.output


@pytest.mark.parametrize("args", [["--ramp", "--slo-p99-ms", "50"], ["--ramp", "--slo-p99-ms", "100"]])
def test_the_ramp_refuses_the_slo_budget_and_names_its_own_option(args):
    out = CliRunner().invoke(app, ["load", "--url", "127.0.0.1:1", "--model", "m", *args])
    assert out.exit_code == 1 and "Traceback" not in out.output
    assert "--ramp-stop-p99-ms" in out.output and out.output.count("\n") == 1, out.output


def test_options_of_gives_the_function_its_commands_signature():
    @options_of("limits")
    def limits(o: Args) -> None:
        """Doc."""

    names = signature_of(limits)
    assert names[0] == "typer_context" and "budget_s" in names and "runs_dir" in names and limits.__doc__ == "Doc."


def signature_of(fn) -> list[str]:
    import inspect

    return list(inspect.signature(fn).parameters)


def test_the_trees_choices_are_what_the_library_builds():
    """--model's families and --preset's sizes are written in the option tree (no torch at start-up); the zoo
    that builds them must offer exactly those."""
    from trainserve.core.options import train as tree
    from trainserve.train import models

    assert models.FAMILIES == tree.FAMILIES
    assert all(tuple(models.PRESETS[f]) == tree.PRESETS for f in models.FAMILIES)
