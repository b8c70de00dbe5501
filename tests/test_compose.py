"""compose.yaml without a docker engine: the schema, ports, mounts, the Dockerfile, and its commands.

Commands are read out of compose.yaml (with `${VAR:-default}` resolved to the defaults), so these
tests follow the file as it changes.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML  # ships with check-jsonschema (test extra); PyYAML is not a dependency

from tests.conftest import REPO_ROOT, free_port, stop_process, subprocess_env
from trainserve.core.runs import run_dir

COMPOSE = REPO_ROOT / "compose.yaml"
SERVERS = ("triton", "triton-cpu", "embedded")
# Ports from the shared conventions (DESIGN.md, BRIEF): Triton's HTTP, gRPC, metrics; Locust's web UI.
HTTP, GRPC, METRICS, LOCUST_UI = 8000, 8001, 8002, 8089
_VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def _defaults(value: Any) -> Any:
    """Resolve ${VAR:-default} / ${VAR} as compose would with an empty environment."""
    if isinstance(value, str):
        return _VAR.sub(lambda m: m.group(2) or "", value)
    if isinstance(value, list):
        return [_defaults(v) for v in value]
    if isinstance(value, dict):
        return {k: _defaults(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _defaults(YAML(typ="safe").load(COMPOSE.read_text()))


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def test_validates_against_the_compose_spec():
    exe = Path(sys.executable).with_name("check-jsonschema")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "check_jsonschema"]
    out = subprocess.run([*cmd, "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_services_profiles_and_gpu(services):
    assert {"triton", "triton-cpu", "embedded", "locust", "locust-worker", "train", "prometheus"} <= set(services)
    assert services["triton"]["profiles"] == ["gpu"]
    assert services["triton-cpu"]["profiles"] == ["cpu"]
    # train runs alone, and as the servers' one-shot dependency in either serving profile
    assert services["train"]["profiles"] == ["train", "gpu", "cpu"]
    assert services["prometheus"]["profiles"] == ["monitoring"]
    device = services["triton"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"] and int(device["count"]) >= 1
    assert "deploy" not in services["triton-cpu"]
    # the tag is a variable whose default is a YY.MM release
    raw = YAML(typ="safe").load(COMPOSE.read_text())
    image = raw["services"]["triton"]["image"]
    assert re.fullmatch(r"nvcr\.io/nvidia/tritonserver:\$\{TRITON_TAG:-\d{2}\.\d{2}\}-py3", image), image
    # without a GPU, Triton loads only the KIND_CPU model, under the name Locust uses for both
    assert any(a.startswith("--load-model=") and a.endswith("_cpu") for a in services["triton-cpu"]["command"])
    assert "triton" in services["triton-cpu"]["networks"]["default"]["aliases"]


def test_healthchecks_and_dependencies(services):
    for name in SERVERS:
        test = " ".join(services[name]["healthcheck"]["test"])
        assert "/v2/health/ready" in test and f":{HTTP}" in test, name
    # Locust waits for the server both profiles start (compose 1.29 has no optional dependency)
    assert services["locust"]["depends_on"] == {"embedded": {"condition": "service_healthy"}}
    # every server waits for the trained, exported run
    for name in SERVERS:
        assert services[name]["depends_on"] == {"train": {"condition": "service_completed_successfully"}}, name
    assert "worker" in services["locust-worker"]["command"][3] or "--worker" in services["locust-worker"]["command"]


def test_no_host_networking_and_only_needed_ports(services):
    published = {}
    for name, svc in services.items():
        assert svc.get("network_mode") != "host", name
        for spec in svc.get("ports", []):
            host_ip, host_port, container = str(spec).split(":")
            assert host_ip == "127.0.0.1", f"{name} publishes {spec} beyond loopback"
            published.setdefault(name, set()).add(int(container))
    assert published == {
        "triton": {HTTP, GRPC, METRICS},
        "triton-cpu": {HTTP, GRPC, METRICS},
        "embedded": {HTTP, GRPC, METRICS},
        "locust": {LOCUST_UI},
        "prometheus": {9090},
    }


def _flag(cmd: list[str], name: str) -> str:
    for i, arg in enumerate(cmd):
        if arg == name:
            return cmd[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{name} missing from {cmd}")


def test_ports_agree_with_the_code(services):
    for name in ("triton", "triton-cpu", "embedded"):
        cmd = services[name]["command"]
        assert (_flag(cmd, "--http-port"), _flag(cmd, "--grpc-port"), _flag(cmd, "--metrics-port")) == (
            str(HTTP), str(GRPC), str(METRICS)), name
    assert _flag(services["locust"]["command"], "--web-port") == str(LOCUST_UI)
    assert _flag(services["locust"]["command"], "--server-url") == f"triton:{HTTP}"
    # the embedded server's own defaults, once `trainserve serve` has its options
    help_text = _help(["trainserve", "serve"])
    if "--http-port" in help_text:
        for option, port in (("--http-port", HTTP), ("--grpc-port", GRPC), ("--metrics-port", METRICS)):
            after = help_text.split(option, 1)[1][:400]
            assert re.search(rf"default:\s*{port}\b", after), f"trainserve serve {option} default is not {port}"
    prometheus = YAML(typ="safe").load((REPO_ROOT / "monitoring/prometheus.yml").read_text())
    targets = {t for job in prometheus["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    assert targets == {f"triton:{METRICS}", f"embedded:{METRICS}"}
    mount = services["prometheus"]["volumes"][0].split(":")
    assert (REPO_ROOT / mount[0]).resolve() == REPO_ROOT / "monitoring/prometheus.yml"


def test_servers_mount_the_repository_that_export_writes(compose, services):
    train_cmd = _commands(services["train"])
    run = _flag(train_cmd[0], "--run")
    assert _flag(train_cmd[1], "--run") == run
    runs_in_container = _flag(train_cmd[1], "--runs-dir")
    # train writes <runs-dir>/<run>/model_repository into the named volume the servers mount read-only
    volume, dst = services["train"]["volumes"][0].split(":")[:2]
    assert dst == runs_in_container and volume in compose["volumes"]
    expected = str(run_dir(run, Path(dst)) / "model_repository")
    for name in SERVERS:
        assert services[name]["volumes"][0] == f"{volume}:{dst}:ro", name
        cmd = services[name]["command"]
        repo = _flag(cmd, "--model-repository") if "--model-repository" in cmd else \
            next(a.split("=", 1)[1] for a in cmd if a.startswith("--model-repository="))
        assert repo == expected, name
    # the skip that lets a second `up` reuse the run tests for what export writes
    reuse = services["train"]["command"][2].split(";")[0]
    assert f"{expected}/" in reuse and "model.onnx" in reuse, reuse


def _readme_setup() -> list[str]:
    """The install commands of the README's quickstart: the scripts/setup invocations."""
    text = (REPO_ROOT / "README.md").read_text()
    quickstart = text.split("## Quickstart", 1)[1]
    block = re.search(r"```bash\n(.*?)```", quickstart, re.S).group(1)
    return [part.strip() for line in block.splitlines() for part in line.split("&&") if "setup" in part]


def test_dockerfile_installs_like_the_readme():
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    lines = re.sub(r"\\\n", " ", dockerfile).splitlines()
    runs = [line[4:] for line in lines if line.startswith("RUN ")]
    steps = [part.strip() for r in runs for part in r.split("&&")]
    readme = _readme_setup()
    assert readme and readme[0] == "scripts/setup"
    assert readme[0] in steps
    # no other way of installing packages
    assert not any("pip install" in s or "pip3 install" in s for s in steps), steps
    assert re.search(r"^USER (?!root)\w+", dockerfile, re.M), "the image must run as a non-root user"
    # users get python:3.12-slim; scripts/engine passes its debootstrapped base where that cannot be pulled
    assert re.search(r"^ARG BASE_IMAGE=python:3\.1[1-9]-slim$", dockerfile, re.M)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", dockerfile, re.M)
    copied = {src.rstrip("/") for line in lines if line.startswith("COPY ")
              for src in [a for a in line.split()[1:-1] if not a.startswith("--")]}
    for needed in ("pyproject.toml", "scripts", "trainserve", "train", "serve", "loadtest"):
        assert needed in copied or f"./{needed}" in copied, needed
    assert "ENV PATH=/app/.venv/bin" in dockerfile  # scripts/setup's venv, as the README uses it


def _commands(svc: dict[str, Any]) -> list[list[str]]:
    """The trainserve/locust commands of a service (`sh -c "if ...; then ...; else a && b; fi"` gives a, b)."""
    cmd = svc["command"]
    if cmd[:2] == ["sh", "-c"]:
        parts = re.split(r"&&|;|\b(?:then|else|fi)\b", cmd[2])
        return [shlex.split(p) for p in parts if p.strip().startswith("trainserve ")]
    return [cmd]


def _help(argv: list[str]) -> str:
    """`<argv> --help`, run from this checkout."""
    if argv[0] == "trainserve":
        full = [sys.executable, "-m", "trainserve", *_subcommand(argv), "--help"]
    else:
        full = [sys.executable, "-m", "locust", *argv[1:], "--help"]
    out = subprocess.run(full, capture_output=True, text=True, cwd=REPO_ROOT, env=subprocess_env(COLUMNS="200"),
                         timeout=120)
    assert out.returncode == 0, f"{' '.join(full)} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def _subcommand(argv: list[str]) -> list[str]:
    return [a for a in argv[1:2] if not a.startswith("-")]


def _compose_commands() -> list[tuple[str, list[str]]]:
    svcs = _defaults(YAML(typ="safe").load(COMPOSE.read_text()))["services"]
    found = []
    for name, svc in svcs.items():
        for cmd in _commands(svc) if "command" in svc else []:
            if cmd[0] in ("trainserve", "locust"):
                found.append((name, cmd))
    return found


def _trainserve_commands() -> list[tuple[str, list[str]]]:
    return [(s, c) for s, c in _compose_commands() if c[0] == "trainserve"]


@pytest.mark.parametrize(("service", "cmd"), _trainserve_commands(), ids=lambda v: v if isinstance(v, str) else v[1])
def test_every_trainserve_command_knows_its_options(service, cmd):
    """Each trainserve command of compose.yaml runs with --help here and lists every option it is given."""
    text = _help(cmd)
    options = [a.split("=", 1)[0] for a in cmd[1:] if a.startswith("--")]
    missing = [o for o in options if o not in text]
    assert not missing, f"{service}: {' '.join(cmd[:2])} does not know {missing}"


def _stop(proc: subprocess.Popen) -> str:
    """Stop a Locust process and return what it printed."""
    stop_process(proc)
    return proc.stdout.read() if proc.stdout else ""


def test_locust_master_and_worker_start_for_real(services):
    """compose's locust master and worker commands, started on loopback: the worker joins the master.

    Later options override earlier ones, so the compose command runs unchanged apart from the
    appended loopback addresses and free ports (Locust's custom options do not show in --help).
    """
    master_cmd, worker_cmd = services["locust"]["command"], services["locust-worker"]["command"]
    locustfile = _flag(master_cmd, "-f")
    assert (REPO_ROOT / locustfile).exists(), f"compose's locust service runs {locustfile}, which does not exist"
    assert _flag(worker_cmd, "-f") == locustfile and _flag(worker_cmd, "--master-host") == "locust"
    web, bind = free_port(), free_port()
    env = subprocess_env()
    py = [sys.executable, "-m", "locust"]
    master = subprocess.Popen([*py, *master_cmd[1:], "--web-host", "127.0.0.1", "--web-port", str(web),
                               "--master-bind-host", "127.0.0.1", "--master-bind-port", str(bind)],
                              cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    worker = None
    try:
        worker = subprocess.Popen([*py, *worker_cmd[1:], "--master-host", "127.0.0.1", "--master-port", str(bind)],
                                  cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        workers = None
        while time.monotonic() < deadline:
            assert master.poll() is None, f"locust master exited: {_stop(master)}"
            assert worker.poll() is None, f"locust worker exited: {_stop(worker)}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{web}/stats/requests", timeout=2) as r:
                    workers = json.load(r).get("worker_count")
            except OSError:
                workers = None
            if workers == 1:
                break
            time.sleep(0.2)
        assert workers == 1, "the worker did not join the master within 60 s"
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)
