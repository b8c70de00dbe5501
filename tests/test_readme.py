"""The README's quickstart stays true: CI runs its test command, and its commands exist."""

from __future__ import annotations

import re

from tests.conftest import REPO_ROOT


def _quickstart_commands() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def test_ci_runs_the_readmes_test_command():
    main_job, tests = _quickstart_commands()[:2]
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert tests in ci.splitlines(), f"{tests!r} not in .ci/run"
    assert "pytest" in tests


def test_main_job_uses_the_setup_script_and_an_existing_command():
    from typer.main import get_command

    from trainserve.cli import app

    main_job = _quickstart_commands()[0]
    assert main_job.startswith("scripts/setup && .venv/bin/trainserve ")
    sub = main_job.split(".venv/bin/trainserve ", 1)[1].split()[0]
    assert sub in get_command(app).commands


def test_setup_pins_the_cpu_torch_build_without_a_gpu():
    setup = (REPO_ROOT / "scripts" / "setup").read_text()
    assert "nvidia-smi" in setup and "torch==2.13.0" in setup


def test_the_readmes_questions_are_the_reports_answers():
    """README.md's list and the report's Answers section come from one list (report/answers/answers.py)."""
    from trainserve import answersdoc

    text = (REPO_ROOT / "README.md").read_text()
    assert answersdoc.readme_text(text) == text, "README.md's questions are out of date: python -m trainserve.answersdoc --write"
