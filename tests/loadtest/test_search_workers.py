"""The search's master/worker exchange (loadtest/search_workers.py) over an in-process stand-in for Locust's
message bus: the master's merged window is every worker's requests together, and a silent worker fails it."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from trainserve.loadtest import search_workers
from trainserve.loadtest.search import SearchConfig, evaluate
from trainserve.loadtest.search_workers import WorkerProbes, WorkerSide
from trainserve.loadtest.windows import StabilityRule


class _Runner:
    """register_message/send_message as Locust's runners have them; delivery is immediate."""

    def __init__(self, node_id: str) -> None:
        self.node_id = self.id = node_id
        self.custom_messages: dict[str, Any] = {}
        self.peers: list[_Runner] = []
        self.environment = SimpleNamespace(trainserve=SimpleNamespace(probe=None, rate=None, scheduled_total=0,
                                                                      answered_total=0), runner=self)
        self.user_count = 1
        self.clients: dict[str, Any] = {}

    def register_message(self, msg_type: str, listener: Any, concurrent: bool = False) -> None:
        self.custom_messages[msg_type] = listener

    def send_message(self, msg_type: str, data: Any = None, client_id: str | None = None) -> None:
        for peer in self.peers:
            if msg_type in peer.custom_messages:
                peer.custom_messages[msg_type](environment=peer.environment,
                                               msg=SimpleNamespace(type=msg_type, data=data, node_id=self.node_id))


def _fleet(workers: int, answering: int | None = None) -> tuple[WorkerProbes, list[_Runner]]:
    master = _Runner("master")
    master.clients = {}
    nodes = []
    for k in range(workers):
        node = _Runner(f"w{k}")
        WorkerSide(node)
        master.clients[node.node_id] = node
        if answering is None or k < answering:
            node.peers = [master]
        master.peers.append(node)
        nodes.append(node)
    return WorkerProbes(master), nodes


def test_the_master_merges_every_workers_window(monkeypatch) -> None:
    monkeypatch.setattr(search_workers, "REPLY_S", 0.05)
    probes, workers = _fleet(2)
    start = time.time() - 10.0
    template = probes.start(300.0, start, warmup_s=1.0, window_s=1.0)
    assert [w.environment.trainserve.rate for w in workers] == [300.0, 300.0]  # each user takes rate/users
    for k, w in enumerate(workers):  # worker 0: 100 answers at 2 ms in window 0; worker 1: 50 at 40 ms
        log = w.environment.trainserve.probe
        assert log.window_end(0) == template.window_end(0)  # the same windows in every process
        for _ in range(100 if k == 0 else 50):
            log.scheduled(start + 1.5)
            log.add(start + 1.5, 2.0 if k == 0 else 40.0, failed=False)
        log.scheduled(start + 1.5)  # one more due in window 0 on each worker, never answered: late
    window, problems = probes.close(0)
    assert problems == []
    assert window.requests == 152 and window.late == 2 and window.length_s == 1.0
    assert window.hist.percentile(99) >= 40.0  # the slow worker's answers are in the merged p99
    busy, per = probes.finish()
    assert sorted(per) == ["w0", "w1"] and busy == max(per.values())


def test_a_silent_worker_fails_the_probe(monkeypatch) -> None:
    monkeypatch.setattr(search_workers, "REPLY_S", 0.05)
    probes, workers = _fleet(2, answering=1)
    probes.start(100.0, time.time() - 10.0, warmup_s=0.0, window_s=1.0)
    windows, problems = [], []
    for i in range(3):
        for w in workers:
            log = w.environment.trainserve.probe
            for _ in range(100):
                log.scheduled(log.window_end(i) - 0.5)
                log.add(log.window_end(i) - 0.5, 1.0, failed=False)
        window, missing = probes.close(i)
        windows.append(window)
        problems += missing
    assert all(w.requests == 100 for w in windows)  # only the answering worker's
    config = SearchConfig(slo_p99_ms=50.0, warmup_s=0.0, max_probe_s=3.0, rule=StabilityRule(window_s=1.0))
    probe = evaluate(100.0, windows, config, problems=problems)
    assert not probe.passed and "worker w1 did not report window 0" in probe.reasons[0]
    assert probe.client_saturated  # the client failed this rate: a capacity above it is a lower bound
