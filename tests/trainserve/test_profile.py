import json

import pytest

from trainserve.core.errors import UserError
from trainserve.core.profile import LatencyStats, ProfileRecord, percentile


def test_percentiles_are_nearest_rank_with_sub_ms_resolution():
    samples = [0.11 + i * 0.01 for i in range(100)]  # 0.11 .. 1.10 ms
    s = LatencyStats.from_samples_ms(samples)
    assert s.count == 100
    assert s.p50_ms == pytest.approx(0.60)
    assert s.p99_ms == pytest.approx(1.09)
    assert s.max_ms == pytest.approx(1.10)
    assert percentile([5.0], 99.9) == 5.0


def test_record_round_trips_through_json(tmp_path):
    rec = ProfileRecord(phase="train", model="cnn", backend="torch", device="cpu", batch_size=32)
    rec.speed.latency = LatencyStats.from_samples_ms([1.0, 2.0, 3.0])
    rec.validity.warnings.append("input-bound")
    path = tmp_path / "p.json"
    rec.save(path)
    back = ProfileRecord.load(path)
    assert back == rec
    assert json.loads(path.read_text())["speed"]["latency"]["p50_ms"] == 2.0


def test_wrong_schema_version_is_a_user_error(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"schema_version": 99, "phase": "train"}))
    with pytest.raises(UserError, match="schema_version"):
        ProfileRecord.load(path)
