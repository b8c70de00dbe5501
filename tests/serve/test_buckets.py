"""Batch buckets: parsing, padding, and a loaded model that pads, warms up and answers only its rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainserve.serve.model.buckets import bucket_for, pad_rows, parse_buckets
from trainserve.serve.model.sessions import BUCKET_SESSIONS_MAX_BYTES, LoadedModel, LoadError, SessionOptions, default_bucket_sessions
from trainserve.serve.repository import parse_config_file
from tests.serve.tiny_models import FEATURES, classifier_config, classifier_onnx, expected_logits


def test_parse_pow2_ends_at_max_batch_size():
    assert parse_buckets("pow2", 8) == [1, 2, 4, 8]
    assert parse_buckets("pow2", 48) == [1, 2, 4, 8, 16, 32, 48]
    assert parse_buckets("pow2", 1) == [1]


def test_parse_lists_and_off():
    assert parse_buckets(" 32, 1,8 ,8", 64) == [1, 8, 32]
    for off in ("none", "", "OFF", "0"):
        assert parse_buckets(off, 64) == []


@pytest.mark.parametrize("text, match", [("1,128", r"outside 1\.\.64"), ("0,4", "outside"), ("big", "pow2"),
                                         (",", "outside")])
def test_parse_rejects_bad_values(text, match):
    with pytest.raises(ValueError, match=match):
        parse_buckets(text, 64)


def test_parse_needs_a_batch_dimension():
    with pytest.raises(ValueError, match="max_batch_size > 0"):
        parse_buckets("pow2", 0)


def test_bucket_for_picks_the_smallest_that_fits():
    buckets = [1, 2, 4, 8]
    assert [bucket_for(buckets, n) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    assert bucket_for(buckets, 9) == 9  # larger than every bucket: unpadded
    assert bucket_for([], 3) == 3


def test_pad_rows_adds_zero_rows_and_keeps_the_data():
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    p = pad_rows(a, 4)
    assert p.shape == (4, 2) and p.dtype == np.float32
    np.testing.assert_array_equal(p[:3], a)
    np.testing.assert_array_equal(p[3], [0, 0])
    assert pad_rows(a, 3) is a


class _Recorder:
    """Wraps a session and records the batch size of every run."""

    def __init__(self, session) -> None:
        self.session, self.sizes = session, []

    def run(self, outputs, feed):
        self.sizes.append(next(iter(feed.values())).shape[0])
        return self.session.run(outputs, feed)


def _model(tmp_path: Path, extra: str = "", max_batch: int = 8) -> LoadedModel:
    classifier_onnx(tmp_path / "m" / "1" / "model.onnx")
    cfg = tmp_path / "m" / "config.pbtxt"
    cfg.write_text(classifier_config("m", max_batch_size=max_batch) + extra)
    return LoadedModel("m", "1", tmp_path / "m", parse_config_file(cfg), SessionOptions(device="cpu", intra_op_threads=1))


def test_cpu_default_is_no_padding(tmp_path):
    m = _model(tmp_path)
    assert m.buckets == [] and m.warmup_s == 0.0
    m.sessions[0] = rec = _Recorder(m.sessions[0])
    m.run(0, {"input": np.ones((3, FEATURES), np.float32)}, m.output_names, 3)
    assert rec.sizes == [3]


def test_padded_run_returns_only_the_requests_rows(tmp_path):
    m = _model(tmp_path, 'parameters { key: "batch_buckets" value: { string_value: "pow2" } }\n')
    assert m.buckets == [1, 2, 4, 8] and m.warmup_s > 0
    m.sessions[0] = rec = _Recorder(m.sessions[0])
    x = np.random.default_rng(0).standard_normal((5, FEATURES)).astype(np.float32)
    logits, probs = m.run(0, {"input": x}, m.output_names, 5)
    assert rec.sizes == [8]  # padded to the bucket
    assert logits.shape == (5, 3) and probs.shape == (5, 3)
    np.testing.assert_allclose(logits, expected_logits(x), rtol=1e-5, atol=1e-5)
    m.run(0, {"input": x[:4]}, m.output_names, 4)
    assert rec.sizes == [8, 4]  # an exact bucket is not copied or padded


def test_bucket_sessions_give_each_bucket_its_own_session(tmp_path):
    m = _model(tmp_path, 'parameters { key: "batch_buckets" value: { string_value: "2,8" } }\n'
                         'parameters { key: "bucket_sessions" value: { string_value: "true" } }\n')
    assert sorted(m.bucket_sessions[0]) == [2, 8]
    assert m.bucket_sessions[0][8] is m.sessions[0]  # the largest bucket runs on the instance's own session
    assert m.bucket_sessions[0][2] is not m.sessions[0]
    recs = {b: _Recorder(s) for b, s in m.bucket_sessions[0].items()}
    m.bucket_sessions[0] = recs
    x = np.ones((3, FEATURES), np.float32)
    (logits,) = m.run(0, {"input": x}, ["logits"], 3)
    m.run(0, {"input": x[:1]}, ["logits"], 1)
    assert recs[8].sizes == [8] and recs[2].sizes == [2]
    np.testing.assert_allclose(logits, expected_logits(x), rtol=1e-5)


def test_bad_bucket_parameter_is_a_load_error(tmp_path):
    with pytest.raises(LoadError, match=r"model 'm': batch_buckets '1,64' has size\(s\) \[64\] outside 1\.\.8"):
        _model(tmp_path, 'parameters { key: "batch_buckets" value: { string_value: "1,64" } }\n')


def test_bad_bucket_sessions_parameter_is_a_load_error(tmp_path):
    with pytest.raises(LoadError, match="model 'm': parameter bucket_sessions is 'maybe'; use true or false"):
        _model(tmp_path, 'parameters { key: "bucket_sessions" value: { string_value: "maybe" } }\n')



def test_a_session_per_bucket_by_default_only_on_cuda_and_while_the_weights_fit():
    assert default_bucket_sessions("cuda", 16 * 2**20, 10)
    assert not default_bucket_sessions("cpu", 16 * 2**20, 10)
    # a 1 GB model with 10 buckets would hold 10 GB of weights per instance: one session instead
    assert not default_bucket_sessions("cuda", 2**30, 10)
    assert default_bucket_sessions("cuda", BUCKET_SESSIONS_MAX_BYTES // 4, 4)
