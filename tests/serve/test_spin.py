"""Busy-polling between requests (serve/engine/spin.py): when it is on, that it ends, and that it never hangs a request."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient

from trainserve.serve.engine import ipc, shm, spin
from trainserve.serve.request_errors import Unavailable
from trainserve.serve.engine.remote_core import RemoteCore
from tests.serve.test_frontends import Served, grpc_infer, http_infer, slow_repo, with_group_killed
from tests.serve.tiny_models import expected_logits


# ------------------------------------------------------------------ when
def test_auto_plan_is_off_on_a_2_core_host_and_on_with_spare_cores():
    assert not spin.plan(2, "cuda", cores=2, setting="auto").on  # the 2-core CI machine, even with front ends forced
    assert not spin.plan(4, "cuda", cores=8, setting="auto").on  # fewer than 2 cores per polling process
    assert not spin.plan(1, "cuda", cores=64, setting="auto").on  # one process: ServerCore's own busy_poll_us
    gpu = spin.plan(4, "cuda", cores=16, setting="auto")
    assert gpu.after_us == spin.AFTER_US and gpu.wait_us == spin.WAIT_US
    cpu = spin.plan(4, "cpu", cores=16, setting="auto")  # the session's threads take every core while it runs
    assert cpu.after_us == spin.AFTER_US and cpu.wait_us == 0
    assert spin.plan(4, "cuda", cores=16, setting="auto", busy_poll_us=250).after_us == 250  # --busy-poll-us
    assert not spin.plan(4, "cuda", cores=16, setting="auto", busy_poll_us=0).on  # --busy-poll-us 0: no polling at all


def test_auto_plan_reads_this_process_affinity():
    cores = len(os.sched_getaffinity(0))
    assert spin.plan(2, "cuda", setting="auto").on == (cores >= spin.SPARE_CORES_PER_POLLER * 3)


def test_the_environment_variable_forces_polling_off_or_on(monkeypatch):
    monkeypatch.delenv(spin.ENV, raising=False)
    assert not spin.plan(4, "cuda", cores=64).on  # the default: off until measured on a many-core GPU host
    monkeypatch.setenv(spin.ENV, "0")
    assert not spin.plan(4, "cuda", cores=64).on
    monkeypatch.setenv(spin.ENV, "auto")
    assert spin.plan(4, "cuda", cores=64).on
    monkeypatch.setenv(spin.ENV, "1")
    assert spin.plan(2, "cpu", cores=2) == spin.SpinPlan(spin.AFTER_US, spin.WAIT_US)
    monkeypatch.setenv(spin.ENV, "2")
    assert spin.plan(2, "cpu", cores=2) == spin.SpinPlan(spin.AFTER_US, spin.WAIT_US, any_in_flight=True)


def test_switch_interval_is_set_from_the_variable_and_checked():
    old = sys.getswitchinterval()
    try:
        assert spin.switch_interval("") == pytest.approx(spin.SWITCH_US / 1e6) == sys.getswitchinterval()
        assert spin.switch_interval("250") == pytest.approx(250e-6)
        for bad in ("0", "abc", "1000001"):
            with pytest.raises(ValueError, match=f"{spin.SWITCH_ENV}='{bad}' must be"):
                spin.switch_interval(bad)
    finally:
        sys.setswitchinterval(old)


# ------------------------------------------------------------------ the poller
def test_poller_polls_for_its_window_and_stops_when_busy():
    async def main() -> None:
        busy = False
        poller = spin.Poller(lambda: busy)
        poller.extend(30_000_000)  # 30 ms
        turns = 0
        while poller.polling and turns < 5:  # other work still runs on the loop meanwhile
            turns += 1
            await asyncio.sleep(0)
        assert poller.polling and turns == 5
        await asyncio.sleep(0.1)
        assert not poller.polling  # the window ended: the loop sleeps again
        poller.extend(10_000_000_000)  # 10 s, but busy stops it at once
        busy = True
        await asyncio.sleep(0.01)
        assert not poller.polling

    asyncio.run(main())


# ------------------------------------------------------------------ a front end's RemoteCore over a real channel
SNAPSHOT = {"server_metadata": {"name": "triton", "version": "0", "extensions": []}, "frontends": 2, "entries": [],
            "metadata": {}, "configs": {}, "outputs": {}}


def _frame(sock: socket.socket) -> tuple[int, int, bytes]:
    head = sock.recv(ipc.HEADER.size, socket.MSG_WAITALL)
    length, kind, rid = ipc.HEADER.unpack(head)
    return kind, rid, sock.recv(length, socket.MSG_WAITALL) if length else b""


def _result(rid: int, value: object) -> bytes:
    """A RESULT frame as the model process writes it."""
    kind, body = ipc.encode(ipc.Result(value))
    return ipc.HEADER.pack(len(body), kind, rid) + body


async def _remote(plan: spin.SpinPlan, loop_side: socket.socket) -> RemoteCore:
    arena = shm.Arena(shm.create_arena_fd("trainserve-test", 1 << 20), 1 << 20)
    core = RemoteCore({**SNAPSHOT, "spin": (plan.after_us, plan.wait_us, plan.any_in_flight)}, arena, on_engine_gone=lambda: None)
    loop_side.setblocking(False)
    _, core.link = await asyncio.get_running_loop().create_unix_connection(
        lambda: ipc.Link(core.on_message, core.on_lost), sock=loop_side)
    await core.start()
    return core


def test_a_lone_request_polls_while_it_waits_and_after_its_answer():
    ours, engine = socket.socketpair()

    async def main() -> None:
        core = await _remote(spin.SpinPlan(after_us=50_000, wait_us=200_000), ours)
        call = asyncio.ensure_future(core._send(ipc.CALL, b"x", None))
        await asyncio.sleep(0.02)
        assert core.poller.polling  # waiting for the answer: the loop does not sleep
        kind, rid, body = await asyncio.to_thread(_frame, engine)
        assert (kind, body) == (ipc.CALL, b"x")
        engine.sendall(_result(rid, 42))
        assert await call == 42
        assert core.poller.polling  # the client's next request may come: still polling
        await asyncio.sleep(0.2)
        assert not core.poller.polling  # both windows over
        core.link.close()

    try:
        asyncio.run(main())
    finally:
        engine.close()


def test_a_cpu_model_front_end_stops_polling_when_its_request_goes_to_the_model_process():
    ours, engine = socket.socketpair()

    async def main() -> None:
        core = await _remote(spin.SpinPlan(after_us=10_000_000, wait_us=0), ours)  # the plan on a CPU host
        first = asyncio.ensure_future(core._send(ipc.CALL, b"x", None))
        _, rid, _ = await asyncio.to_thread(_frame, engine)
        engine.sendall(_result(rid, 42))
        assert await first == 42
        assert core.poller.polling  # after the answer: waiting for the client's next request
        second = asyncio.ensure_future(core._send(ipc.CALL, b"y", None))
        await asyncio.sleep(0.01)
        assert not core.poller.polling  # it came: the session's threads need the cores now
        second.cancel()
        core.link.close()

    try:
        asyncio.run(main())
    finally:
        engine.close()


@pytest.mark.parametrize("any_in_flight", [False, True])
def test_with_two_requests_in_flight_a_front_end_polls_only_when_asked_to(any_in_flight):
    ours, engine = socket.socketpair()

    async def main() -> None:
        core = await _remote(spin.SpinPlan(after_us=30_000, wait_us=30_000, any_in_flight=any_in_flight), ours)
        first = asyncio.ensure_future(core._send(ipc.CALL, b"x", None))
        await asyncio.sleep(0.1)  # its 30 ms window is over
        assert not core.poller.polling
        second = asyncio.ensure_future(core._send(ipc.CALL, b"y", None))
        await asyncio.sleep(0.005)
        assert core.poller.polling == any_in_flight
        await asyncio.sleep(0.1)
        _, rid, _ = await asyncio.to_thread(_frame, engine)
        engine.sendall(_result(rid, 42))
        assert await first == 42
        assert core.poller.polling == any_in_flight  # an answer with another still in flight: load, no window
        second.cancel()
        core.link.close()

    try:
        asyncio.run(main())
    finally:
        engine.close()


def test_no_polling_without_a_plan():
    ours, engine = socket.socketpair()

    async def main() -> None:
        core = await _remote(spin.SpinPlan(), ours)
        call = asyncio.ensure_future(core._send(ipc.CALL, b"x", None))
        await asyncio.sleep(0.02)
        assert not core.poller.polling
        call.cancel()
        core.link.close()

    try:
        asyncio.run(main())
    finally:
        engine.close()


def test_the_model_process_gone_mid_poll_fails_the_request_at_once_and_ends_the_polling():
    ours, engine = socket.socketpair()

    async def main() -> None:
        core = await _remote(spin.SpinPlan(after_us=10_000_000, wait_us=10_000_000), ours)  # 10 s windows
        call = asyncio.ensure_future(core._send(ipc.CALL, b"x", None))
        await asyncio.sleep(0.02)
        assert core.poller.polling
        t0 = time.monotonic()
        engine.close()  # as the model process's death closes its end
        with pytest.raises(Unavailable, match="model process stopped"):
            await asyncio.wait_for(call, 5)
        assert time.monotonic() - t0 < 2
        await asyncio.sleep(0.01)
        assert not core.poller.polling and not core.live

    asyncio.run(main())


# ------------------------------------------------------------------ real processes, polling forced on
@pytest.fixture(scope="module")
def spinning(tmp_path_factory):
    srv = Served(slow_repo(tmp_path_factory.mktemp("spin"), spins=100), **{spin.ENV: "1"})
    try:
        yield srv
    finally:
        srv.stop()


def test_lone_requests_of_one_user_are_answered_right_while_everything_polls(spinning):
    g = grpcclient.InferenceServerClient(spinning.grpc)
    for i in range(30):  # one user: every request is alone, each side polls between them
        x = np.full((1, 4), float(i), np.float32)
        assert np.allclose(http_infer(spinning.http, x), expected_logits(x), atol=1e-5)
        assert np.allclose(grpc_infer(g, x), expected_logits(x), atol=1e-5)


def test_a_killed_model_process_leaves_no_polling_front_end_and_no_request_hanging(tmp_path):
    srv = Served(slow_repo(tmp_path, spins=100, slowest_spins=1_500_000), **{spin.ENV: "1"})
    try:
        frontends = srv.frontend_pids()
        x = np.ones((1, 4), np.float32)
        with ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(http_infer, srv.http, x, None, "slowest")  # a lone request, its front end polling
            time.sleep(0.5)
            t0 = time.monotonic()
            os.kill(srv.proc.pid, signal.SIGKILL)
            with pytest.raises(Exception):
                in_flight.result(timeout=30)
            assert time.monotonic() - t0 < 10
        deadline = time.monotonic() + 15
        while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in frontends):
            assert time.monotonic() < deadline, "a front end outlived the model process"
            time.sleep(0.1)
    finally:
        with_group_killed(srv.proc.pid)
        srv.proc.wait(10)


def test_cpu_sessions_spin_inside_runs_only_when_asked(tmp_path, monkeypatch):
    from tests.serve.tiny_models import classifier_config, classifier_onnx
    from trainserve.serve.engine.server_core import CoreOptions, ServerCore
    from trainserve.serve.model.sessions import ORT_SPIN_ENV, spin_in_run

    assert not spin_in_run("cpu", 4, "")  # the default: threads that busy-wait lose their cores to clients beside them
    assert spin_in_run("cpu", 2, " RUN ") and not spin_in_run("cpu", 4, "off")
    assert not spin_in_run("cpu", 1, "run")  # no pool threads to spin
    assert not spin_in_run("cuda", 4, "run")  # the GPU's runs: pool threads spinning would take the loop's cores
    with pytest.raises(ValueError, match=f"{ORT_SPIN_ENV}='yes' must be 'run'"):
        spin_in_run("cpu", 4, "yes")
    classifier_onnx(tmp_path / "c" / "1" / "model.onnx")
    (tmp_path / "c" / "config.pbtxt").write_text(classifier_config("c").replace('"intra_op_thread_count"', '"unused"')
                                                 + 'parameters { key: "lone_spinning" value: { string_value: "0" } }\n')
    seen = {}  # (lone_spinning 0: the lone-run twin, chosen by timing, is tests/serve/test_batcher.py's)
    for setting, spin in (("", False), ("run", False), ("", True)):
        monkeypatch.setenv(ORT_SPIN_ENV, setting)
        core = ServerCore(CoreOptions(tmp_path, intra_op_threads=2, allow_spinning=spin))
        core.load()
        seen[setting, spin] = core.model_config("c").parameters["intra_op_spinning"].string_value
    assert seen == {("", False): "off", ("run", False): "inside runs", ("", True): "always"}


def test_a_bad_spinning_setting_stops_the_server_with_one_line(tmp_path):
    import subprocess

    from trainserve.serve.model.sessions import ORT_SPIN_ENV

    env = {**os.environ, ORT_SPIN_ENV: "sometimes"}
    p = subprocess.run([sys.executable, "-m", "trainserve", "serve", "--model-repository", str(tmp_path),
                        "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert f"{ORT_SPIN_ENV}='sometimes' must be 'run'" in p.stderr + p.stdout
    assert "Traceback" not in p.stderr


def test_an_answer_that_leaves_the_batcher_idle_polls_however_long_its_run_took(tmp_path):
    """One process (ServerCore's own window): a lone user's next request comes within the client's own time
    after the answer, so the loop polls then even when the run outlasted the window (a CPU model's batch-1
    run is milliseconds); it stops when the window ends."""
    from trainserve.serve.engine.server_core import CoreOptions, ServerCore

    repo = slow_repo(tmp_path, spins=8000)  # a ~7 ms run on the instance's thread (idle_inline_max_us 0)

    async def main() -> None:
        core = ServerCore(CoreOptions(repo, intra_op_threads=1, busy_poll_us=1000))  # a 1 ms window
        core.load()
        await core.start()
        try:
            for _ in range(2):
                t = time.perf_counter()
                await core.infer("slow", "", {"input": np.ones((1, 4), np.float32)})
                assert time.perf_counter() - t > 0.002  # longer than the window
                assert core.poller.polling  # (before: only after requests shorter than the window)
                await asyncio.sleep(0.05)
                assert not core.poller.polling  # the window ended: the loop sleeps again
        finally:
            await core.stop()

    asyncio.run(main())
