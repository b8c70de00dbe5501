"""Children of `trainserve run` do not outlive it, even when it is killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import REPO_ROOT, subprocess_env


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for whoever adopted it to reap it."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_dies_when_its_parent_is_killed_with_sigkill(tmp_path):
    # the parent starts a long-lived child the way the pipeline starts `trainserve serve` (its own session,
    # so no terminal signal reaches it), prints the child's pid, and is then killed with SIGKILL
    parent_code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from trainserve.core.procs import Children
        child = Children().start("sleeper", [sys.executable, "-c", "import time; time.sleep(120)"],
                                 Path({str(tmp_path / "sleeper.log")!r}))
        print(child.proc.pid, flush=True)
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True,
                              cwd=REPO_ROOT, env=subprocess_env())
    child_pid = None
    try:
        child_pid = int(parent.stdout.readline())
        os.kill(child_pid, 0)  # alive
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if not _alive(child_pid):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"child {child_pid} outlived its SIGKILLed parent by 10 s")
    finally:
        parent.kill()
        if child_pid is not None:
            try:
                os.kill(child_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
