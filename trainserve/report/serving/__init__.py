"""The served figures: scenarios, the in-process limits beside them, what batching buys, where latency goes
(attribution), their figures and the perf_analyzer CSV."""
