"""The load stage's sample of the server process (`trainserve load --server-pid`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from trainserve.core.errors import UserError
from trainserve.loadtest.serverprocess import ServerProcessWatch


def test_a_process_is_sampled_with_its_children_and_alone() -> None:
    # a stand-in server: a parent that does nothing and a child that spins
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'while True: pass']); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        time.sleep(0.5)  # the child started
        watch = ServerProcessWatch(proc.pid).start()
        time.sleep(1.5)
        watched = watch.stop()
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    p = watched.process
    assert p.pid == proc.pid and p.ticks >= 3 and p.rss_max_bytes > 1024**2
    # the spinning child counts with its parent, not in the parent alone (a margin for a shared machine's cores)
    assert p.cpu_process_mean_percent > p.own_cpu_process_mean_percent + 10.0
    assert watched.timeline and watched.started_wall <= time.time()


def test_a_pid_that_is_not_there_fails_in_one_sentence() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # its pid is free now
    with pytest.raises(UserError, match=f"--server-pid {proc.pid}: no such process"):
        ServerProcessWatch(proc.pid)
