"""The option trees (trainserve/core/options/) are the one place an option is written: the generated
docs/options.md and compose.yaml defaults, every command's --help and Locust's parser agree with them,
and no package writes a help text of its own or twice."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
from collections import Counter
from pathlib import Path

import pytest
import typer.rich_utils
from typer.testing import CliRunner

from tests.conftest import REPO_ROOT
from trainserve import optiondocs
from trainserve.cli import app
from trainserve.core.options import spec
from trainserve.core.options.commands import COMMANDS, LOCUST
from trainserve.core.options.load import FORM_GROUPS, LocustOptions
from trainserve.core.options.spec import option_of
from trainserve.loadtest import options as locust_options

PACKAGES = ("trainserve", "train", "serve", "loadtest")
TREE = REPO_ROOT / "trainserve" / "core" / "options"


def test_docs_options_md_is_generated_from_the_trees():
    assert (REPO_ROOT / "docs" / "options.md").read_text() == optiondocs.options_md(), \
        "docs/options.md is out of date: python -m trainserve.optiondocs --write"


def test_compose_defaults_are_the_options_defaults():
    text = (REPO_ROOT / "compose.yaml").read_text()
    assert optiondocs.compose_text(text) == text, "compose.yaml is out of date: python -m trainserve.optiondocs --write"
    found = {m.group(1) for m in re.finditer(r"\$\{(\w+):-", text)}
    assert set(optiondocs.COMPOSE_DEFAULTS) <= found  # each mapped variable is still in compose.yaml


def _words(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_option_help_is_in_the_commands_help(name, monkeypatch):
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 2000)  # one line per option: nothing wraps
    args = ["--help"] if name == "trainserve" else [name, "--help"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    shown = _words(out.output)
    for o in COMMANDS[name].options():
        assert _words(o.meta.help) in shown, (name, o.name)
        for flag in (f for names in o.names for f in names.split("/")):
            assert flag in shown, (name, flag)


def test_the_command_line_parses_to_the_trees_defaults():
    """Each command's parameters, as click holds them, carry the tree's default and help."""
    group = typer.main.get_command(app)
    for name, command in COMMANDS.items():
        cmd = group if name == "trainserve" else group.commands[name]
        params = {p.name: p for p in cmd.params if p.param_type_name in ("option", "argument") and p.name != "help"}
        assert set(params) == {o.name for o in command.options()}, name
        for o in command.options():
            p = params[o.name]
            assert p.help == o.meta.help, (name, o.name)
            assert p.required == (o.default is spec.REQUIRED), (name, o.name)
            if o.default not in (spec.REQUIRED, None) and not o.meta.cli_type:
                assert p.default == o.default, (name, o.name, p.default)


class _LocustParser(argparse.ArgumentParser):
    """Locust's parser takes two more keywords; record them."""

    def __init__(self) -> None:
        self.web: dict[str, bool] = {}
        super().__init__()

    def add_argument(self, *names, include_in_web_ui=False, is_required=False, **kw):
        action = super().add_argument(*names, **kw)
        self.web[action.dest] = include_in_web_ui
        return action


def test_locusts_parser_has_each_load_option():
    parser = _LocustParser()
    locust_options.register(parser)
    actions = {a.dest: a for a in parser._actions if a.dest != "help"}
    fields = list(spec.options(LocustOptions))
    assert set(actions) == {o.name for o in fields}
    for o in fields:
        a = actions[o.name]
        assert a.help == o.meta.help.rstrip(".") and tuple(a.option_strings) == o.names, o.name
        assert parser.web[o.name] == o.meta.web, o.name
        if o.default is not spec.REQUIRED:
            assert a.default == o.default, o.name
    parsed = parser.parse_args(["--model-name", "m_cpu"])
    assert locust_options.LoadOptions.from_parsed(parsed) == locust_options.LoadOptions(model_name="m_cpu")
    # what the parser makes of text: numbers as the field's type, a choice outside the list refused
    for o in fields:
        if isinstance(o.default, (int, float)) and not isinstance(o.default, bool):
            value = getattr(parser.parse_args([o.flag, "7"]), o.name)
            assert value == 7 and type(value) is type(o.default), o.name
        if o.meta.choices:
            with pytest.raises(SystemExit):
                parser.parse_args([o.flag, "not-a-choice"])
    shapes = next(n.value for n in ast.walk(ast.parse((REPO_ROOT / "loadtest" / "locustfile.py").read_text()))
                  if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "_SHAPES")
    assert sorted(k.value for k in shapes.keys) == sorted(option_of(LocustOptions, "load_shape").meta.choices)
    grouped = [n for _, names in FORM_GROUPS for n in names]
    assert set(grouped) <= set(locust_options.FORM_LABELS) and len(grouped) == len(set(grouped))


def _help_literals(path: Path) -> list[str]:
    """String literals passed as help= in one module (a help text written outside the trees)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "help" and isinstance(kw.value, (ast.Constant, ast.JoinedStr, ast.BinOp)):
                    found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    return found


def test_no_help_text_is_written_outside_the_trees():
    files = [p for pkg in PACKAGES for p in (REPO_ROOT / pkg).rglob("*.py")
             if not p.is_relative_to(TREE) and "__pycache__" not in p.parts]
    assert files
    assert [hit for f in files for hit in _help_literals(f)] == []


def test_no_help_text_is_written_twice_in_the_trees():
    metas = {}
    for command in [*COMMANDS.values(), LOCUST]:
        for tree in command.trees:
            for cls in tree.__mro__:
                if dataclasses.is_dataclass(cls):
                    for f in dataclasses.fields(cls):
                        if "option" in f.metadata and "like" not in f.metadata:
                            # a field `like` another keeps its Opt: the same object, not a second text
                            metas[id(f.metadata["option"])] = (f"{cls.__name__}.{f.name}", f.metadata["option"])
    texts = Counter(m.help for _, m in metas.values())
    twice = sorted(name for name, m in metas.values() if texts[m.help] > 1)
    assert twice == [], twice
    assert all(m.help.endswith(".") for _, m in metas.values())
