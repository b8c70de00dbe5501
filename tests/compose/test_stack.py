"""The compose stack started for real: build, train, the cpu profile's embedded server, Locust master
and two workers, a headless load through the master's web API over HTTP and gRPC, /metrics through
the published port, a second `up` that reuses the trained run, and `down -v` leaving nothing.

Runs the commands of the README's compose section (COMMANDS below; test_readme_section checks
they are the same), with the ports and the project name taken from the environment. Triton's
services are validated by `compose config` only: their image cannot be pulled on CI's machines.

Needs a Docker engine and a compose CLI. With TRAINSERVE_REQUIRE_ENGINE=1 (CI) `scripts/engine up`
brings up what is missing and the test fails, in one sentence, where it cannot; without it the test
is skipped where no engine answers. Everything the test starts is stopped by it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, free_port

pytestmark = [pytest.mark.compose, pytest.mark.slow, pytest.mark.timeout(1500)]

MODEL = "cnn_cpu"
# The README's compose section, as a user types it (less the engine set-up).
COMMANDS = [
    "docker compose --profile train build",
    "PRESET=tiny EPOCHS=1 docker compose --profile train run --rm train",
    "docker compose --profile cpu up -d --scale locust-worker=2 embedded locust locust-worker",
    "docker compose --profile cpu down -v",
]
BUILD, TRAIN, UP, DOWN = COMMANDS
STATE = Path(os.environ.get("TRAINSERVE_ENGINE_STATE", "/tmp/trainserve-engine"))


@dataclass
class Stack:
    compose: list[str]  # the compose command: ["docker", "compose"] or ["docker-compose"]
    env: dict[str, str]
    ports: dict[str, int]
    project: str

    def run(self, command: str, timeout_s: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        """A README command (`VAR=value ... docker compose ...`) with this machine's compose CLI."""
        argv = shlex.split(command)
        env = dict(a.split("=", 1) for a in argv[:argv.index("docker")])
        argv = argv[len(env):]
        assert argv[:2] == ["docker", "compose"], command
        return self.compose_cmd(*argv[2:], timeout_s=timeout_s, check=check, **env)

    def compose_cmd(self, *args: str, timeout_s: float = 120, check: bool = True,
                    **env: str) -> subprocess.CompletedProcess:
        out = subprocess.run([*self.compose, *args], cwd=REPO_ROOT, env={**self.env, **env}, capture_output=True,
                             text=True, timeout=timeout_s)
        if check:
            assert out.returncode == 0, \
                f"`compose {' '.join(args)}` failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        return out

    def container(self, service: str) -> dict:
        ids = self.compose_cmd("ps", "-q", service).stdout.split()
        assert ids, f"no {service} container"
        return json.loads(_docker("inspect", ids[0]))[0]

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"


def _docker(*args: str, timeout_s: float = 60) -> str:
    out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s)
    assert out.returncode == 0, f"docker {' '.join(args)} failed: {out.stderr.strip()}"
    return out.stdout


def _engine_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.fixture(scope="module")
def engine() -> Iterator[dict[str, str]]:
    """COMPOSE and BASE_IMAGE from `scripts/engine up`; `scripts/engine down` after, if that started dockerd."""
    required = os.environ.get("TRAINSERVE_REQUIRE_ENGINE") == "1"
    if not required and not _engine_answers():
        pytest.skip("no Docker engine answers here; `scripts/engine up` brings one up, "
                    "or set TRAINSERVE_REQUIRE_ENGINE=1 to let the test do it")
    started = time.monotonic()
    up = subprocess.run(["scripts/engine", "up"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    print(up.stdout, up.stderr)
    try:
        if up.returncode != 0:
            last = (up.stderr.strip().splitlines() or ["(no message)"])[-1]
            pytest.fail(f"the Docker engine could not be brought up: {last}", pytrace=False)
        found = _read_env(STATE / "env")
        found["engine_s"] = f"{time.monotonic() - started:.0f}"
        yield found
    finally:
        if "engine: dockerd is up" in up.stdout:  # only the engine this test started is stopped
            down = subprocess.run(["scripts/engine", "down"], cwd=REPO_ROOT, capture_output=True, text=True,
                                  timeout=120)
            print(down.stdout, down.stderr)


@pytest.fixture(scope="module")
def stack(engine: dict[str, str]) -> Iterator[Stack]:
    ports = {name: free_port() for name in ("http", "grpc", "metrics", "locust")}
    project = f"trainserve-test-{os.getpid()}"
    env = {**os.environ, "COMPOSE_PROJECT_NAME": project, "BASE_IMAGE": engine["BASE_IMAGE"],
           "EMBEDDED_HTTP_PORT": str(ports["http"]), "EMBEDDED_GRPC_PORT": str(ports["grpc"]),
           "EMBEDDED_METRICS_PORT": str(ports["metrics"]), "LOCUST_WEB_PORT": str(ports["locust"]),
           # Triton's ports too, so a config check never collides with a user's stack
           "TRITON_HTTP_PORT": str(free_port()), "TRITON_GRPC_PORT": str(free_port()),
           "TRITON_METRICS_PORT": str(free_port())}
    s = Stack(compose=shlex.split(engine["COMPOSE"]), env=env, ports=ports, project=project)
    try:
        yield s
    finally:
        s.run(DOWN, check=False, timeout_s=300)
        for kind, rm in (("container", ["rm", "-f"]), ("volume", ["volume", "rm", "-f"]),
                         ("network", ["network", "rm"])):  # whatever a failed step left behind
            ids = _leftovers(kind, project)
            if ids:
                subprocess.run(["docker", *rm, *ids], capture_output=True, timeout=120)


def _leftovers(kind: str, project: str) -> list[str]:
    """The project's containers, volumes or networks that still exist."""
    ls = ["ps", "-a"] if kind == "container" else [kind, "ls"]
    return _docker(*ls, "-q", "--filter", f"label=com.docker.compose.project={project}").split()


def _get(url: str, timeout_s: float = 10) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.read()


def _wait(what: str, check, timeout_s: float, every_s: float = 1.0):
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except OSError as e:
            last = e
        time.sleep(every_s)
    raise AssertionError(f"{what} within {timeout_s:.0f} s (last: {last})")


def _inferences(stack: Stack) -> float:
    """The embedded server's count of successful requests for MODEL, read through the published port."""
    text = _get(stack.url("metrics") + "/metrics").decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("nv_inference_request_success{") and f'model="{MODEL}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _form(user_class: str, server_url: str) -> dict[str, object]:
    """The fields of a start from the master's web API (its web form's names)."""
    return {"user_count": 2, "spawn_rate": 2, "user_classes": user_class, "server_url": server_url,
            "model_name": MODEL}


def _row(stats: dict, request_type: str) -> dict:
    """The statistics row of MODEL's requests of one type (HTTP or gRPC); zeros before the first."""
    rows = [r for r in stats["stats"] if r.get("method") == request_type and r["name"].startswith(MODEL)]
    return rows[0] if rows else {"num_requests": 0, "num_failures": 0}


def _swarm(stack: Stack, user_class: str, server_url: str, request_type: str, min_requests: int = 50) -> int:
    """Start a swarm from the master's web API, wait for `min_requests` more of `request_type`, stop it.

    Returns how many requests Locust counted in this swarm, after checking that the containerised
    server's own counter (through the published metrics port) grew by at least as many.
    """
    locust = stack.url("locust")
    stats = lambda: json.loads(_get(locust + "/stats/requests"))  # noqa: E731
    before, served_before = _row(stats(), request_type)["num_requests"], _inferences(stack)
    form = urllib.parse.urlencode(_form(user_class, server_url)).encode()
    with urllib.request.urlopen(urllib.request.Request(locust + "/swarm", data=form), timeout=30) as r:
        answer = json.load(r)
    assert answer.get("success"), f"the master refused the swarm: {answer}"

    def enough() -> bool:
        now = stats()
        total = next(s for s in now["stats"] if s["name"] == "Aggregated")
        assert total["num_failures"] == 0, f"{user_class}: failures {now.get('errors')}"
        return _row(now, request_type)["num_requests"] - before >= min_requests

    _wait(f"{user_class} through the master reached {min_requests} requests", enough, 120, 0.5)
    urllib.request.urlopen(urllib.request.Request(locust + "/stop", data=b""), timeout=10).close()
    _wait("the swarm stopped", lambda: stats()["state"] == "stopped", 30, 0.5)
    final = stats()
    total = next(s for s in final["stats"] if s["name"] == "Aggregated")
    assert total["num_failures"] == 0, final.get("errors")
    assert final["worker_count"] == 2
    counted = _row(final, request_type)["num_requests"] - before
    served = _inferences(stack) - served_before
    assert served >= counted, f"{user_class}: Locust counted {counted} requests, the server answered {served}"
    return counted


def _time(stamp: str) -> datetime:
    """Docker's RFC 3339 time (nanoseconds, Z or an offset) as an aware datetime."""
    return datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", stamp).replace("Z", "+00:00"))


def _started(container: dict) -> datetime:
    return _time(container["State"]["StartedAt"])


def _first_healthy(container: dict) -> datetime:
    probes = [p for p in container["State"]["Health"]["Log"] if p["ExitCode"] == 0]
    assert probes, "the server never passed its health check"
    return min(_time(p["End"]) for p in probes)


def test_readme_section_is_what_this_test_runs():
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("## Serving with NVIDIA Triton (docker compose)", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    commands = [line for line in lines if "docker compose" in line]
    assert commands == COMMANDS
    # the swarm the README starts is the test's HTTP swarm
    swarm = next(line for line in lines if "/swarm" in line)
    fields = dict(re.findall(r"-d (\w+)=(\S+)", swarm))
    assert fields == {k: str(v) for k, v in _form("TritonHttpUser", "embedded:8000").items()}, fields


def test_triton_services_pass_compose_config(engine: dict[str, str], stack: Stack):
    """Triton's image cannot be pulled here, so its services are checked by `compose config` alone."""
    out = stack.compose_cmd("--profile", "gpu", "--profile", "cpu", "--profile", "monitoring", "config")
    assert "tritonserver" in out.stdout and "/runs/compose/model_repository" in out.stdout


def test_the_stack_for_real(engine: dict[str, str], stack: Stack):
    times: dict[str, float] = {"engine": float(engine["engine_s"])}

    t = time.monotonic()
    stack.run(BUILD, timeout_s=900)
    times["build"] = time.monotonic() - t

    t = time.monotonic()
    trained = stack.run(TRAIN, timeout_s=600)
    times["train"] = time.monotonic() - t
    assert "reusing" not in trained.stdout, "a fresh volume already held a run"

    t = time.monotonic()
    stack.run(UP, timeout_s=600)  # returns once locust has started, i.e. after the server's health check
    times["up"] = time.monotonic() - t
    embedded, locust = stack.container("embedded"), stack.container("locust")
    # health checks gate the order: Locust started after the server first answered ready
    assert _started(locust) >= _first_healthy(embedded), "Locust started before the server was ready"
    # the train step that `up` ran as the servers' dependency found the run and did not train again
    assert "reusing the trained run compose" in stack.compose_cmd("logs", "--no-color", "train").stdout
    # the runs volume is the servers' user's (uid 1000), and the server reads the model from it
    ls = stack.compose_cmd("exec", "-T", "embedded", "sh", "-c",
                           "id -u; stat -c %u /runs/compose/model_repository/cnn_cpu/1/model.onnx").stdout.split()
    assert ls == ["1000", "1000"], ls
    # ports come from the environment
    for service, inside, name in (("embedded", 8000, "http"), ("embedded", 8002, "metrics"),
                                  ("locust", 8089, "locust")):
        published = stack.compose_cmd("port", service, str(inside)).stdout.strip()
        assert published == f"127.0.0.1:{stack.ports[name]}", (service, published)
    _wait("both workers joined the master",
          lambda: json.loads(_get(stack.url("locust") + "/stats/requests"))["worker_count"] == 2, 90)

    # a headless load through the master, over HTTP and gRPC, answered by the containerised server
    t = time.monotonic()
    http = _swarm(stack, "TritonHttpUser", "embedded:8000", "HTTP")
    grpc = _swarm(stack, "TritonGrpcUser", "embedded:8001", "gRPC")
    times["load"] = time.monotonic() - t
    print(f"compose stack load: {http} HTTP and {grpc} gRPC requests through the master, 0 failures")

    # a second `up` (after a `down` that keeps the volume) reuses the trained run
    stack.compose_cmd("--profile", "cpu", "down", timeout_s=300)
    t = time.monotonic()
    stack.run(UP, timeout_s=600)
    times["second up"] = time.monotonic() - t
    assert "reusing the trained run compose" in stack.compose_cmd("logs", "--no-color", "train").stdout
    _wait("the server answered ready again", lambda: _get(stack.url("http") + "/v2/health/ready", 5) is not None, 60)

    t = time.monotonic()
    stack.run(DOWN, timeout_s=300)
    times["down"] = time.monotonic() - t
    for kind in ("container", "volume", "network"):
        left = _leftovers(kind, stack.project)
        assert not left, f"`down -v` left {kind}s: {left}"
    print("compose stack times (s): " + ", ".join(f"{k} {v:.0f}" for k, v in times.items()))
