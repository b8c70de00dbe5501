"""Dynamic batching: many clients joined into one run, each getting exactly its rows; the bounded queue."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from trainserve.serve.model.batcher import BatchingConfig
from trainserve.serve.engine.server_core import CoreOptions, ServerCore
from trainserve.serve.request_errors import Unavailable
from tests.serve.tiny_models import classifier_config, classifier_onnx, expected_logits


def _repo(tmp_path, extra: str = "", **config):
    classifier_onnx(tmp_path / "m" / "1" / "model.onnx")
    (tmp_path / "m" / "config.pbtxt").write_text(classifier_config("m", **config) + extra)
    return tmp_path


async def _with_core(repo, fn, **options):
    core = ServerCore(CoreOptions(repo, intra_op_threads=1, **options))
    core.load()
    await core.start()
    try:
        return core, await fn(core)
    finally:
        await core.stop()


@pytest.mark.parametrize("buckets", ["none", "pow2"])  # pow2: runs padded to 1, 2, 4, 8 rows
def test_concurrent_clients_are_batched_and_each_gets_its_rows(tmp_path, buckets):
    extra = f'parameters {{ key: "batch_buckets" value: {{ string_value: "{buckets}" }} }}\n'
    repo = _repo(tmp_path, extra, max_batch_size=8, delay_us=20_000)
    rows = [1, 2, 3, 1, 2, 1, 4, 1, 1, 2, 3, 1]  # 21 rows from 12 clients
    xs = [np.random.default_rng(i).random((n, 4), dtype=np.float32) + i for i, n in enumerate(rows)]

    async def go(core):
        return await asyncio.gather(*(core.infer("m", "", {"input": x}) for x in xs))

    core, results = asyncio.run(_with_core(repo, go))
    for x, r in zip(xs, results):
        assert r["logits"].shape == (len(x), 3)
        np.testing.assert_allclose(r["logits"], expected_logits(x), rtol=1e-5)
    s = core.statistics("m")[0]
    assert s.inference_count == sum(rows)  # the padding's rows are not counted
    assert sum(n * b.compute_infer.count for n, b in s.batches.items()) == sum(rows)
    assert s.execution_count < len(rows)
    assert all(size <= 8 for size in s.batches)
    assert s.queue.count == len(rows)


def test_preferred_batch_size_runs_without_waiting_for_the_delay(tmp_path):
    repo = _repo(tmp_path, max_batch_size=8, delay_us=5_000_000, preferred=(4,))
    x = np.ones((1, 4), np.float32)

    async def go(core):
        return await asyncio.wait_for(asyncio.gather(*(core.infer("m", "", {"input": x}) for _ in range(4))), 3)

    core, results = asyncio.run(_with_core(repo, go))
    assert len(results) == 4
    assert core.statistics("m")[0].batches.keys() == {4}


def test_requests_with_different_shapes_are_not_joined(tmp_path):
    from tests.serve.tiny_models import int64_onnx

    int64_onnx(tmp_path / "ints" / "1" / "model.onnx")
    a, b = np.arange(3).reshape(1, 3), np.arange(5).reshape(1, 5)

    async def go(core):
        return await asyncio.gather(core.infer("ints", "", {"input_ids": a}), core.infer("ints", "", {"input_ids": b}))

    _, (ra, rb) = asyncio.run(_with_core(tmp_path, go))
    assert ra["logits"].tolist() == [[0, 2, 4]] and rb["logits"].tolist() == [[0, 2, 4, 6, 8]]


def test_full_queue_refuses_at_once_with_unavailable(tmp_path):
    repo = _repo(tmp_path, max_batch_size=8, delay_us=200_000)
    x = np.ones((1, 4), np.float32)

    async def go(core):
        return await asyncio.gather(*(core.infer("m", "", {"input": x}) for _ in range(10)), return_exceptions=True)

    core, results = asyncio.run(_with_core(repo, go, max_queue_size=3))
    refused = [r for r in results if isinstance(r, Unavailable)]
    served = [r for r in results if isinstance(r, dict)]
    assert len(refused) == 7 and len(served) == 3
    assert "exceeds maximum queue size of 3" in refused[0].message and refused[0].http_status == 503
    assert core.statistics("m")[0].fail.count == 7


def test_batching_config_validation_names_the_field():
    with pytest.raises(ValueError, match="max_queue_size=0"):
        BatchingConfig(max_batch_size=4, max_queue_size=0)
    with pytest.raises(ValueError, match="preferred_batch_sizes"):
        BatchingConfig(max_batch_size=4, preferred_batch_sizes=(8,))


def test_a_request_that_finds_the_batcher_idle_runs_at_once_and_is_counted(tmp_path):
    repo = _repo(tmp_path, max_batch_size=8, delay_us=0)
    x = np.ones((1, 4), np.float32)

    async def go(core):
        batcher = core.entry("m").batcher
        first = await core.infer("m", "", {"input": x})  # no run time known yet: through the worker
        await asyncio.sleep(0.01)  # requests further apart than a run takes
        submit = batcher.submit
        direct = []
        batcher._run_direct = lambda inputs, rows, requests=1, run=batcher._run_direct: direct.append(rows) or run(inputs, rows, requests)
        second = await submit({"input": x}, 1)
        return first, second, direct

    core, (first, second, direct) = asyncio.run(_with_core(repo, go))
    assert direct == [1]
    np.testing.assert_allclose(second["logits"], expected_logits(x), rtol=1e-5)
    np.testing.assert_allclose(first["logits"], second["logits"])
    stats = core.statistics("m")[0]
    assert stats.execution_count == 2 and stats.inference_count == 2 and stats.compute_infer.count == 2


def test_idle_inline_zero_sends_every_run_to_the_instance_threads(tmp_path):
    repo = _repo(tmp_path, 'parameters { key: "idle_inline_max_us" value: { string_value: "0" } }\n',
                 max_batch_size=8, delay_us=0)
    x = np.ones((1, 4), np.float32)

    async def go(core):
        batcher = core.entry("m").batcher
        assert batcher.config.idle_inline_max_us == 0
        direct = []
        batcher._run_direct = lambda inputs, rows, requests=1, run=batcher._run_direct: direct.append(rows) or run(inputs, rows, requests)
        for _ in range(3):
            await core.infer("m", "", {"input": x})
            await asyncio.sleep(0.01)  # far apart: with the default, the 2nd and 3rd would run on the loop
        return direct

    core, direct = asyncio.run(_with_core(repo, go))
    assert direct == []
    assert core.statistics("m")[0].execution_count == 3


def _where_runs(batcher) -> list[str]:
    """The thread each following run of `batcher` happens on, appended as it runs (MainThread = the event loop)."""
    import threading

    where: list[str] = []
    run = batcher._run  # the session run itself, wherever the batch was joined
    batcher._run = lambda *a: where.append(threading.current_thread().name) or run(*a)
    batcher._inline_ns = 0  # only the lone-request rule may put a run on the loop
    return where


def _as_if(batcher, run_ms: float, idle_ms: float) -> None:
    """A batch of one row takes `run_ms`, and the last run ended `idle_ms` ago."""
    import time

    batcher._run_ns[1] = run_ms * 1e6
    batcher._idle_since_ns = time.perf_counter_ns() - int(idle_ms * 1e6)


def test_a_run_is_on_the_loop_only_after_the_batcher_was_idle_longer_than_the_run(tmp_path):
    from trainserve.serve.model.batcher import LONE_CREDIT

    repo = _repo(tmp_path, max_batch_size=8, delay_us=0)
    x = np.ones((1, 4), np.float32)

    async def go(core):
        batcher = core.entry("m").batcher
        where = _where_runs(batcher)
        _as_if(batcher, run_ms=1, idle_ms=5)  # idle longer than a run: lone
        await batcher.submit({"input": x}, 1)
        # Just after the last run, as a request that waited through a run on the loop comes: not known to be
        # lone, so the loop stays free while it runs and reads whoever else is there.
        _as_if(batcher, run_ms=1, idle_ms=0)
        await batcher.submit({"input": x}, 1)
        # Nobody came during that run on the thread: the next LONE_CREDIT such requests run on the loop,
        # then one goes to the thread again to look for company.
        for _ in range(LONE_CREDIT + 1):
            _as_if(batcher, run_ms=1, idle_ms=0)
            await batcher.submit({"input": x}, 1)
        return where

    _, where = asyncio.run(_with_core(repo, go))
    on_thread = [not w == "MainThread" for w in where]
    assert on_thread == [False, True] + [False] * LONE_CREDIT + [True]


def test_the_lone_credit_is_bounded_by_the_loop_time_its_runs_take(tmp_path):
    # A CPU model's lone request may run on the loop up to 50 ms: runs of 10 ms get 3 runs of credit (32 ms),
    # not 16 runs holding the loop for 160 ms while a burst that came just after a run waits to be read.
    from trainserve.serve.model.batcher import LONE_CREDIT_NS

    repo = _repo(tmp_path, 'parameters { key: "idle_inline_max_us" value: { string_value: "50000" } }\n',
                 max_batch_size=8, delay_us=0)
    x = np.ones((1, 4), np.float32)
    run_ms = 10
    credit = int(LONE_CREDIT_NS // (run_ms * 1e6))
    assert 0 < credit < 16

    async def go(core):
        batcher = core.entry("m").batcher
        where = _where_runs(batcher)
        for _ in range(credit + 3):  # each comes just after the last run ended
            _as_if(batcher, run_ms=run_ms, idle_ms=0)
            await batcher.submit({"input": x}, 1)
        return where

    _, where = asyncio.run(_with_core(repo, go))
    on_thread = [not w == "MainThread" for w in where]
    assert on_thread == [True] + [False] * credit + [True, False]


def test_a_request_that_comes_while_another_waits_ends_the_lone_credit(tmp_path):
    from trainserve.serve.model.batcher import LONE_CREDIT_NS

    repo = _repo(tmp_path, max_batch_size=8, delay_us=0)
    one, two = np.ones((1, 4), np.float32), np.ones((2, 4), np.float32)

    async def go(core):
        batcher = core.entry("m").batcher
        where = _where_runs(batcher)
        # as after a run on the thread that nobody came during
        batcher._lone_credit_ns = LONE_CREDIT_NS
        _as_if(batcher, run_ms=1, idle_ms=0)
        # two rows have no run time yet: queued; the one-row request then finds company waiting
        await asyncio.gather(batcher.submit({"input": two}, 2), batcher.submit({"input": one}, 1))
        _as_if(batcher, run_ms=1, idle_ms=0)
        await batcher.submit({"input": one}, 1)
        return where

    _, where = asyncio.run(_with_core(repo, go))
    assert where[-1] != "MainThread"  # soon after a run, with company seen: on the thread


def test_a_bad_idle_inline_parameter_leaves_the_model_not_ready(tmp_path):
    repo = _repo(tmp_path, 'parameters { key: "idle_inline_max_us" value: { string_value: "soon" } }\n',
                 max_batch_size=8)
    core = ServerCore(CoreOptions(repo, intra_op_threads=1))
    core.load()
    assert not core.model_ready("m")
    assert [e.reason for e in core.index()] == [
        "model 'm': parameter idle_inline_max_us is 'soon'; use a whole number of microseconds"]


def test_a_lone_request_does_not_wait_out_the_queue_delay(tmp_path):
    # a 2 s queue delay: a request that waited for company would take 2 s and show it as queue time
    repo = _repo(tmp_path, max_batch_size=8, delay_us=2_000_000, preferred=(4, 8))
    x = np.ones((1, 4), np.float32)

    async def go(core):
        loop = asyncio.get_running_loop()
        took = []
        for _ in range(5):
            t0 = loop.time()
            await asyncio.wait_for(core.infer("m", "", {"input": x}), 1.0)
            took.append(loop.time() - t0)
            await asyncio.sleep(0.02)  # one user, far apart: low load
        return took

    core, took = asyncio.run(_with_core(repo, go))
    assert max(took) < 0.5
    s = core.statistics("m")[0]
    assert s.execution_count == 5 and s.queue.count == 5
    assert s.queue.ns / s.queue.count < 2_000_000  # mean queue time under 2 ms, not the 2 s delay


def test_a_batch_nearly_at_a_preferred_size_waits_for_the_rest(tmp_path):
    repo = _repo(tmp_path, max_batch_size=8, delay_us=2_000_000, preferred=(4,))
    three, one = np.ones((3, 4), np.float32), np.full((1, 4), 2.0, np.float32)

    async def go(core):
        async def later(x, s):
            await asyncio.sleep(s)
            return await core.infer("m", "", {"input": x})

        await asyncio.gather(*(core.infer("m", "", {"input": one}) for _ in range(4)))  # arrivals are close
        # 3 rows of a preferred 4: worth waiting for the request that comes 5 ms later
        return await asyncio.wait_for(asyncio.gather(later(three, 0), later(one, 0.005)), 1.5)

    core, (r3, r1) = asyncio.run(_with_core(repo, go))
    np.testing.assert_allclose(r3["logits"], expected_logits(three), rtol=1e-5)
    np.testing.assert_allclose(r1["logits"], expected_logits(one), rtol=1e-5)
    s = core.statistics("m")[0]
    assert s.execution_count == 2 and s.batches.keys() == {4}


@pytest.mark.parametrize("value", [-1, 1_000_001])
def test_busy_poll_out_of_range_is_refused(tmp_path, value):
    with pytest.raises(ValueError, match="busy_poll_us"):
        CoreOptions(tmp_path, busy_poll_us=value)


def _slow_repo(tmp_path, spins: int, policy: str = ""):
    from tests.serve.test_grpc_server import slow_classifier_onnx

    slow_classifier_onnx(tmp_path / "slow" / "1" / "model.onnx", spins=spins)
    (tmp_path / "slow" / "config.pbtxt").write_text(
        'max_batch_size: 8\ninput [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        f'output [ {{ name: "logits" data_type: TYPE_FP32 dims: [ 3 ] }} ]\ndynamic_batching {{ {policy} }}\n')
    return tmp_path


def test_the_queue_is_bounded_by_bytes_too(tmp_path):
    repo = _slow_repo(tmp_path, spins=200_000)  # ~0.15 s a run: the others queue behind the first
    x = np.ones((8, 4), np.float32)  # 128 bytes a request

    async def go(core):
        return await asyncio.gather(*(core.infer("slow", "", {"input": x}) for _ in range(6)), return_exceptions=True)

    # all six are queued before the worker takes the first: room for two (256 of 300 bytes), four refused
    core, results = asyncio.run(_with_core(repo, go, max_queue_bytes=300))
    refused = [r for r in results if isinstance(r, Unavailable)]
    assert len(refused) == 4 and all(isinstance(r, dict) for r in results[:2])
    assert refused[0].message == "exceeds maximum queue size of 300 bytes" and refused[0].http_status == 503


@pytest.mark.parametrize("where", ["server", "config"])
def test_a_request_queued_past_its_deadline_is_refused_at_once(tmp_path, where):
    policy = "default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 100000 }"
    repo = _slow_repo(tmp_path, spins=600_000, policy=policy if where == "config" else "")  # ~0.4 s a run
    x = np.ones((8, 4), np.float32)  # a full batch each: every request is its own run
    options = {"queue_timeout_s": 0.1} if where == "server" else {"queue_timeout_s": 60.0}

    async def go(core):
        results = await asyncio.gather(*(core.infer("slow", "", {"input": x}) for _ in range(3)),
                                       return_exceptions=True)
        return results

    core, results = asyncio.run(_with_core(repo, go, **options))
    assert isinstance(results[0], dict)  # the first ran at once
    assert all(isinstance(r, Unavailable) and r.message == "Request timeout expired" for r in results[1:])
    s = core.statistics("slow")[0]
    assert s.execution_count == 1 and s.fail.count == 2  # refused, never run: not answered after running them all


def test_queue_bounds_are_validated_with_the_field_named(tmp_path):
    with pytest.raises(ValueError, match="max_queue_bytes=0"):
        CoreOptions(tmp_path, max_queue_bytes=0)
    with pytest.raises(ValueError, match="queue_timeout_s=-1"):
        CoreOptions(tmp_path, queue_timeout_s=-1)


def test_infer_then_answers_through_its_callback_as_infer_does(tmp_path):
    """The model process's path (no task per request): results batched like infer's, every refusal and error
    through the callback (never raised), and the same statistics."""
    from trainserve.serve.request_errors import InvalidArgument

    repo = _repo(tmp_path, max_batch_size=8, delay_us=20_000, preferred=(4,))
    xs = [np.random.default_rng(i).standard_normal((1, 4)).astype(np.float32) for i in range(4)]

    async def go(core):
        loop = asyncio.get_running_loop()
        answers = []
        for x in xs:  # four at once: one batch of 4
            fut = loop.create_future()
            core.infer_then("m", "", {"input": x}, ["logits"], lambda r, e, f=fut: f.set_result((r, e)))
            answers.append(fut)
        results = await asyncio.gather(*answers)
        errors = []
        core.infer_then("nope", "", {"input": xs[0]}, None, lambda r, e: errors.append((r, e)))
        core.infer_then("m", "", {"wrong": xs[0]}, None, lambda r, e: errors.append((r, e)))
        return results, errors

    core, (results, errors) = asyncio.run(_with_core(repo, go))
    for x, (result, error) in zip(xs, results):
        assert error is None and list(result) == ["logits"]
        np.testing.assert_allclose(result["logits"], expected_logits(x), rtol=1e-5, atol=1e-5)
    assert [type(e) for _, e in errors] == [InvalidArgument, InvalidArgument] and all(r is None for r, _ in errors)
    assert "unknown model" in errors[0][1].message and "unexpected inference input 'wrong'" in errors[1][1].message
    stats = core.statistics("m")[0]
    assert stats.execution_count == 1 and stats.inference_count == 4
    assert stats.success.count == 4 and stats.fail.count == 1  # the unknown model is nobody's failure


def test_a_lone_request_to_a_cpu_model_runs_on_the_loop_for_longer_than_a_gpu_models(tmp_path):
    """A CPU model's lone run goes on the event loop up to CPU_IDLE_INLINE_MAX_US (its threads take every core
    anyway; the hand-off costs two wake-ups), a GPU model's up to 2 ms; config.pbtxt's parameter wins on both."""
    from google.protobuf import text_format
    from trainserve.serve.model.batcher import CPU_IDLE_INLINE_MAX_US
    from tritonclient.grpc import model_config_pb2

    def config(extra: str = ""):
        return text_format.Parse(classifier_config("m") + extra, model_config_pb2.ModelConfig())

    assert CPU_IDLE_INLINE_MAX_US > BatchingConfig().idle_inline_max_us == 2000
    assert BatchingConfig.from_model_config(config(), 10, device="cpu").idle_inline_max_us == CPU_IDLE_INLINE_MAX_US
    assert BatchingConfig.from_model_config(config(), 10, device="cuda").idle_inline_max_us == 2000
    given = 'parameters { key: "idle_inline_max_us" value: { string_value: "300" } }\n'
    assert BatchingConfig.from_model_config(config(given), 10, device="cpu").idle_inline_max_us == 300
    # and the server's CPU core builds its batchers so: a lone request of a ~7 ms model runs on the loop
    repo = _slow_repo(tmp_path, 8000)

    async def go(core):
        seen = []
        b = core.entry("slow", "1").batcher
        run = b._run_direct
        b._run_direct = lambda *a, **k: seen.append(threading.current_thread().name) or run(*a, **k)
        for _ in range(3):
            await core.infer("slow", "", {"input": np.ones((1, 4), np.float32)})
            await asyncio.sleep(0.02)  # lone: the batcher has been idle for longer than a run
        return seen

    _, seen = asyncio.run(_with_core(repo, go))
    assert seen and set(seen) == {threading.main_thread().name}  # 2.0 ms before: every run on the thread


@pytest.mark.parametrize("lone_spinning", ["1", "0"])
def test_a_lone_batch1_request_runs_on_the_spinning_twin_and_batches_never_do(tmp_path, lone_spinning):
    """A CPU model of several threads: with `lone_spinning` (or when it timed faster) a lone batch-1 request runs
    on a twin session whose pool spins inside runs; batches from the queue and runs of several rows run on the
    pool (whose threads sleep). With "0" there is no twin. The served config says which."""
    (tmp_path / "m" / "1").mkdir(parents=True)
    classifier_onnx(tmp_path / "m" / "1" / "model.onnx")
    (tmp_path / "m" / "config.pbtxt").write_text(
        classifier_config("m", delay_us=20_000, preferred=(4,)).replace('string_value: "1"', 'string_value: "2"')
        + 'parameters { key: "small_batch_rows" value: { string_value: "0" } }\n'
        + f'parameters {{ key: "lone_spinning" value: {{ string_value: "{lone_spinning}" }} }}\n')
    x = np.arange(4, dtype=np.float32).reshape(1, 4)

    async def go(core):
        model = core.entry("m", "1").model
        runs = {"lone": 0}
        if model.lone_session is not None:
            real = model.lone_session

            class Counting:
                def run(self, *a, **k):
                    runs["lone"] += 1
                    return real.run(*a, **k)

            model.lone_session = Counting()
        config = model.served_config().parameters["intra_op_spinning"].string_value
        for _ in range(3):  # lone: the batcher idle for longer than a run before each
            r = await core.infer("m", "", {"input": x})
            np.testing.assert_allclose(r["logits"], expected_logits(x), rtol=1e-5)
            await asyncio.sleep(0.02)
        lone = runs["lone"]
        # what the worker runs (a batch from the queue: lone=False), and a lone run of several rows: the pool
        for rows, is_lone in ((1, False), (4, True)):
            out = model.run(0, {"input": np.repeat(x, rows, 0)}, model.output_names, rows, lone=is_lone)
            np.testing.assert_allclose(out[0], expected_logits(np.repeat(x, rows, 0)), rtol=1e-5)
        return config, lone, runs["lone"] - lone

    _, (config, lone, batched) = asyncio.run(_with_core(tmp_path, go))
    if lone_spinning == "1":
        # the first request's run time is not known yet: it goes to the thread, on the pool; the next two are lone
        assert (config, lone, batched) == ("inside lone batch-1 runs", 2, 0)
    else:
        assert (config, lone, batched) == ("off", 0, 0)
