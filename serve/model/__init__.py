"""The model layer: onnxruntime sessions (sessions.py), dynamic batching (batcher.py), batch buckets
(buckets.py), the CPU thread layout (tuning.py), working-set measurement (working_set.py), per-model
statistics (model_stats.py), and the in-process measurements built on them (inprocess_limits.py,
frontier_probe.py). It knows no protocol and no process topology (`lint-imports` checks)."""
