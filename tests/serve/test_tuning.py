"""Load-time thread choice: measured on the model's shapes, logged, served in the config, overridable."""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np
import pytest

from trainserve.serve.model import tuning
from trainserve.serve.engine.server_core import CoreOptions, ServerCore
from tests.serve.tiny_models import classifier_onnx, expected_logits


def _repo(tmp_path, params: dict[str, str] | None = None):
    classifier_onnx(tmp_path / "m" / "1" / "model.onnx")
    extra = "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in (params or {}).items())
    (tmp_path / "m" / "config.pbtxt").write_text(
        'name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "probs" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        "dynamic_batching { }\n" + extra)
    return tmp_path


def _core(repo) -> ServerCore:
    core = ServerCore(CoreOptions(repo, intra_op_threads=2))  # a pool of 2 beside the single-threaded twin
    core.load()
    return core


def test_the_choice_is_measured_logged_and_served_in_the_config(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="trainserve.serve.model.sessions"):
        core = _core(_repo(tmp_path))
    model = core.model("m")
    choice = model.thread_choice
    assert choice.source == "measured" and choice.pool_threads == 2
    assert choice.timings_ms[1]["pool"] > 0 and choice.timings_ms[1]["single"] > 0
    # the single thread wins every size it is chosen for, and loses (or the sizes ran out) at the next
    for rows in range(1, choice.small_batch_rows + 1):
        if rows in choice.timings_ms:
            assert choice.timings_ms[rows]["single"] < choice.timings_ms[rows]["pool"]
    assert bool(model.small_sessions) == (choice.small_batch_rows > 0)
    assert "threads: " in caplog.text and "(measured; b1: pool" in caplog.text
    served = core.model_config("m").parameters
    assert served["intra_op_thread_count"].string_value == "2"
    assert served["small_batch_rows"].string_value == str(model.small_batch_rows)
    assert served["thread_choice"].string_value == choice.describe()
    assert "thread_choice" not in model.config.parameters  # the file's config is left as written


@pytest.mark.parametrize("rows", ["0", "4"])
def test_config_pbtxt_overrides_the_measurement(tmp_path, rows, monkeypatch):
    monkeypatch.setattr(tuning, "choose", lambda *a, **k: pytest.fail("measured although config.pbtxt decides"))
    core = _core(_repo(tmp_path, {"small_batch_rows": rows}))
    model = core.model("m")
    assert model.thread_choice.source == "config" and model.small_batch_rows == int(rows)
    assert bool(model.small_sessions) == (rows != "0")
    if rows == "4":  # runs of up to 4 rows go to the twin, larger ones to the pool
        assert model._session(0, 4, 4) is model.small_sessions[0]
        assert model._session(0, 5, 5) is model.sessions[0]

    async def go():
        await core.start()
        try:
            x = np.random.default_rng(1).random((3, 4), dtype=np.float32)
            return x, await core.infer("m", "", {"input": x})
        finally:
            await core.stop()

    x, result = asyncio.run(go())
    np.testing.assert_allclose(result["logits"], expected_logits(x), rtol=1e-5)


@pytest.mark.parametrize("value", ["-1", "some"])
def test_a_bad_small_batch_rows_leaves_the_model_not_ready_with_one_sentence(tmp_path, value):
    core = _core(_repo(tmp_path, {"small_batch_rows": value}))
    assert not core.model_ready("m")
    assert [e.reason for e in core.index()] == [
        f"model 'm': parameter small_batch_rows is {value!r}; use a whole number >= 0 "
        "(0: every batch on the instance's intra-op threads)"]


class _Session:
    """A stand-in for an onnxruntime session: counts its runs, each taking `run_ms`."""

    def __init__(self, name: str, run_ms: float = 0.0) -> None:
        self.name, self.run_ms, self.runs = name, run_ms, 0

    def run(self, outputs, feed):
        self.runs += 1
        time.sleep(self.run_ms / 1000)


class _Spec:
    name, shape, dtype, datatype = "x", (-1, 4), np.dtype(np.float32), "FP32"


def test_choose_stops_growing_once_the_pool_wins(monkeypatch):
    # crafted timings: the single thread wins at 1 and 2 rows, the pool from 4 rows on
    cost = {"pool": lambda rows: 1.0, "single": lambda rows: 0.4 * rows}
    monkeypatch.setattr(tuning, "median_run_ms", lambda session, feed, outputs: cost[session.name](len(feed["x"])))
    choice = tuning.choose(_Session("pool"), _Session("single"), [_Spec()], ["y"], pool_threads=8, max_rows=64)
    assert choice.small_batch_rows == 2
    assert sorted(choice.timings_ms) == [1, 2, 4, 64]  # stopped at 4; the largest batch on the pool for the log
    assert "batches up to 2 row(s) on 1 thread, larger on 8" in choice.describe()


def test_a_slow_model_keeps_the_pool_after_one_run(monkeypatch):
    def never(session, feed, outputs):
        raise AssertionError("a slow model is not timed further")

    monkeypatch.setattr(tuning, "median_run_ms", never)
    pool, single = _Session("pool", run_ms=tuning.SLOW_RUN_MS + 10), _Session("single")
    choice = tuning.choose(pool, single, [_Spec()], ["y"], pool_threads=8, max_rows=64)
    assert (choice.small_batch_rows, pool.runs, single.runs) == (0, 1, 0)
    assert choice.timings_ms[1]["pool"] >= tuning.SLOW_RUN_MS and "every batch on 8 thread(s)" in choice.describe()


def test_a_kind_gpu_model_on_a_cpu_server_says_where_it_runs(tmp_path, caplog):
    repo = _repo(tmp_path)
    cfg = repo / "m" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "instance_group [ { count: 1 kind: KIND_GPU } ]\n")
    with caplog.at_level(logging.WARNING, logger="trainserve.serve.model.sessions"):
        core = _core(repo)
    note = "config.pbtxt asks for KIND_GPU instances, but this server runs with --device cpu: the model runs on the CPU"
    assert core.model_ready("m") and note in caplog.text
    assert core.model_config("m").parameters["device_note"].string_value == note
