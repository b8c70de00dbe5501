"""The server core: registry over a repository, validation with Triton's messages, stats, lifecycle."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from trainserve.serve.engine.server_core import CoreOptions, ServerCore
from trainserve.serve.request_errors import InvalidArgument, NotFound, Unavailable
from tests.serve.tiny_models import expected_logits


@pytest.fixture(scope="module")
def core(model_repo):
    c = ServerCore(CoreOptions(model_repo, intra_op_threads=1))
    c.load()
    return c


def _run(core: ServerCore, coro_fn):
    async def main():
        await core.start()
        try:
            return await coro_fn()
        finally:
            await core.stop()

    return asyncio.run(main())


def test_registry_reports_each_version_and_the_broken_model_with_its_error(core):
    index = {(e.name, e.version): e for e in core.index()}
    assert {k for k, e in index.items() if e.ready} == {("classifier", "1"), ("classifier", "2"), ("ints", "1"), ("strings", "1")}
    broken = index[("broken", "1")]
    assert broken.state == "UNAVAILABLE" and "broken/1/model.onnx" in broken.reason
    assert core.model_ready("classifier") and core.model_ready("classifier", "1")
    assert not core.model_ready("broken") and not core.model_ready("nope")


def test_metadata_and_autocompleted_config(core):
    md = core.model_metadata("classifier")
    assert md.versions == ["1", "2"]
    assert [(t.name, t.datatype, t.shape) for t in md.inputs] == [("input", "FP32", (-1, 4))]
    assert [t.name for t in md.outputs] == ["logits", "probs"]
    ints = core.model_config("ints")  # no config.pbtxt: completed from the ONNX graph
    assert ints.max_batch_size == 4 and ints.HasField("dynamic_batching")
    assert [(i.name, list(i.dims)) for i in ints.input] == [("input_ids", [-1])]
    assert core.model("classifier").threads == {"intra_op": 1, "inter_op": 1, "small_batch_rows": 0,
                                               "lone_spinning": False}


def test_infer_returns_requested_outputs_of_the_requested_version(core):
    x = np.random.default_rng(0).random((3, 4), dtype=np.float32)

    async def go():
        both = await core.infer("classifier", "1", {"input": x})
        only = await core.infer("classifier", "", {"input": x}, ["probs"])
        ints = await core.infer("ints", "", {"input_ids": np.array([[1, 2, 3]], dtype=np.int64)})
        text = await core.infer("strings", "", {"text": np.array([[b"ab"]], dtype=object)})
        return both, only, ints, text

    both, only, ints, text = _run(core, go)
    np.testing.assert_allclose(both["logits"], expected_logits(x), rtol=1e-5)
    assert list(only) == ["probs"]
    np.testing.assert_allclose(only["probs"].sum(axis=1), 1.0, rtol=1e-5)
    assert ints["logits"].tolist() == [[2.0, 4.0, 6.0]]
    assert text["text_out"].tolist() == [[b"ab"]]


@pytest.mark.parametrize(
    ("model", "version", "inputs", "outputs", "error", "message"),
    [
        ("nope", "", {}, None, InvalidArgument, "Request for unknown model: 'nope' is not found"),
        ("classifier", "7", {}, None, NotFound, "'classifier' version 7 is not found"),
        ("broken", "", {}, None, NotFound, "has no available versions"),
        ("classifier", "", {"x": np.zeros((1, 4), np.float32)}, None, InvalidArgument, "unexpected inference input 'x'"),
        ("classifier", "", {}, None, InvalidArgument, "expected 1 inputs but got 0 inputs"),
        ("classifier", "", {"input": np.zeros((1, 4), np.float64)}, None, InvalidArgument,
         "inference input 'input' data-type is 'FP64', but model 'classifier' expects 'FP32'"),
        ("classifier", "", {"input": np.zeros((1, 5), np.float32)}, None, InvalidArgument,
         r"unexpected shape for input 'input' for model 'classifier'. Expected \[-1,4\], got \[1,5\]"),
        ("classifier", "", {"input": np.zeros((9, 4), np.float32)}, None, InvalidArgument,
         "inference request batch-size must be <= 8 for 'classifier'"),
        ("classifier", "", {"input": np.zeros((1, 4), np.float32)}, ["nope"], InvalidArgument, "unexpected inference output 'nope'"),
    ],
)
def test_bad_requests_raise_triton_like_errors(core, model, version, inputs, outputs, error, message):
    async def go():
        with pytest.raises(error, match=message) as info:
            await core.infer(model, version, inputs, outputs)
        return info.value

    err = _run(core, go)
    assert err.http_status == {NotFound: 404, Unavailable: 503, InvalidArgument: 400}[error]


def test_stats_count_success_failure_and_rows(model_repo):
    core = ServerCore(CoreOptions(model_repo, intra_op_threads=1))
    core.load()
    x = np.ones((2, 4), np.float32)

    async def go():
        await core.infer("classifier", "1", {"input": x})
        await core.infer("classifier", "1", {"input": x[:1]})
        with pytest.raises(InvalidArgument):
            await core.infer("classifier", "1", {"input": np.ones((1, 3), np.float32)})

    _run(core, go)
    s = core.statistics("classifier", "1")[0].to_dict()
    assert s["inference_count"] == 3 and s["execution_count"] == 2
    assert s["inference_stats"]["success"]["count"] == 2 and s["inference_stats"]["fail"]["count"] == 1
    assert s["inference_stats"]["compute_infer"]["ns"] > 0 and s["last_inference"] > 0
    assert [b["batch_size"] for b in s["batch_stats"]] == [1, 2]


def test_stopped_core_refuses_inference(model_repo):
    core = ServerCore(CoreOptions(model_repo, intra_op_threads=1))
    core.load()

    async def go():
        await core.start()
        assert core.ready
        await core.stop()
        assert not core.ready
        with pytest.raises(Unavailable, match="shutting down"):
            await core.infer("classifier", "", {"input": np.ones((1, 4), np.float32)})

    asyncio.run(go())


def test_missing_repository_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        ServerCore(CoreOptions(tmp_path / "absent")).load()


def test_cudnn_conv_algo_search_parameter_is_checked_like_tritons(tmp_path):
    from tests.serve.tiny_models import classifier_config, classifier_onnx

    for name, value in (("good", "0"), ("bad", "fast")):
        classifier_onnx(tmp_path / name / "1" / "model.onnx")
        (tmp_path / name / "config.pbtxt").write_text(
            classifier_config(name) + f'parameters {{ key: "cudnn_conv_algo_search" value: {{ string_value: "{value}" }} }}\n')
    c = ServerCore(CoreOptions(tmp_path, intra_op_threads=1))
    c.load()
    index = {e.name: e for e in c.index()}
    assert index["good"].ready
    assert not index["bad"].ready
    assert "cudnn_conv_algo_search is 'fast'; use 0 (exhaustive), 1 (heuristic) or 2" in index["bad"].reason
