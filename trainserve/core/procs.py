"""Child processes of `trainserve run`: each stage in its own process group, logged to a file, and
always stopped — on success, on failure and on Ctrl-C — so nothing outlives the run.

A stage runs in a new session (its own process group), so stopping it also stops what it started
(Locust workers, DataLoader workers) and a terminal's Ctrl-C reaches only the parent, which then
stops the children in order instead of letting them die half-way through writing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import trainserve

log = logging.getLogger(__name__)

STOP_GRACE_S = 10.0  # SIGTERM, then this long to exit, then SIGKILL
READY = re.compile(r"trainserve serve: ready (?P<rest>.*)")



def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: a container's or taskset's share), not the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """In a child, before exec (Linux): receive `sig` when the parent dies, even by SIGKILL, so a killed
    `trainserve run` leaves no server behind (a child in its own session is not reached by the terminal's
    signals). SIGTERM lets a server finish in-flight requests and exit. Elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG = 1


@dataclass
class Child:
    """A running stage: its process, log file and name."""

    name: str
    proc: subprocess.Popen
    log_path: Path
    lines: list[str] = field(default_factory=list)  # stdout lines seen so far (servers only)


class Children:
    """Every child started through it is stopped by `stop_all()` (call it in a finally)."""

    def __init__(self) -> None:
        self._children: list[Child] = []
        self._lock = threading.Lock()

    def start(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None,
              capture_stdout: bool = False) -> Child:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        logf = open(log_path, "ab", buffering=0)
        logf.write(f"$ {' '.join(argv)}\n".encode())
        with _critical():  # started and registered, or neither
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE if capture_stdout else logf,
                stderr=logf, env=env, start_new_session=True, preexec_fn=die_with_parent,
            )
            child = Child(name, proc, log_path)
            with self._lock:
                self._children.append(child)
        if capture_stdout:
            # drain stdout for the whole life of the process (a full pipe would block the server)
            threading.Thread(target=_tee, args=(proc, logf, child.lines), daemon=True).start()
        else:
            logf.close()
        log.debug("started %s (pid %d): %s", name, proc.pid, " ".join(argv))
        return child

    def wait(self, child: Child, timeout_s: float | None = None) -> int:
        """Wait for a stage to finish; a stage past its time limit is stopped and reported as rc 124."""
        try:
            rc = child.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = 124
        stop(child)  # also whatever it left behind in its process group
        with self._lock:
            self._children.remove(child)
        return rc

    def stop_all(self) -> None:
        """Stop every child still running, newest first (load before the server it loads)."""
        with self._lock:
            children = list(reversed(self._children))
            self._children.clear()
        for child in children:
            stop(child)

    def alive(self) -> list[Child]:
        return [c for c in self._children if c.proc.poll() is None]


def _tee(proc: subprocess.Popen, logf, lines: list[str]) -> None:
    with logf:
        for raw in iter(proc.stdout.readline, b""):
            logf.write(raw)
            lines.append(raw.decode(errors="replace").rstrip("\n"))


def stop(child: Child, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the child's whole process group, wait, then SIGKILL what is left."""
    stop_group(child.proc, child.name, grace_s=grace_s)


def stop_group(proc: subprocess.Popen, name: str, sig: int = signal.SIGTERM, grace_s: float = STOP_GRACE_S) -> None:
    """Stop a process started with start_new_session=True and everything in its process group: `sig`
    to the group while the leader runs, up to `grace_s` for it to exit, then SIGKILL to the group.
    Safe to call on a process that has already exited (it then only clears what it left behind)."""
    pgid = proc.pid  # start_new_session: the child leads its own group
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop within %.0f s of %s; killing it", name, grace_s, signal.Signals(sig).name)
    # the leader may be gone while helpers it started (workers) still run in its group
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def source_root() -> Path:
    """The folder that holds this trainserve package and its stages (train/, serve/, loadtest/)."""
    return Path(trainserve.__file__).resolve().parents[1]


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python process that must import this same source tree, even when
    it is not installed (or another copy is): os.environ with the tree first on PYTHONPATH, plus `extra`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(source_root()), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def wait_ready(child: Child, timeout_s: float) -> dict[str, str]:
    """Wait for the server's ready line and return its addresses, e.g. {"http": "127.0.0.1:41234", ...}."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in list(child.lines):
            m = READY.search(line)
            if m:
                return dict(part.split("=", 1) for part in m.group("rest").split() if "=" in part)
        if child.proc.poll() is not None:
            raise ChildFailed(child, f"exited with code {child.proc.returncode} before it was ready")
        time.sleep(0.05)
    raise ChildFailed(child, f"was not ready within {timeout_s:.0f} s")


class ChildFailed(Exception):
    def __init__(self, child: Child, what: str) -> None:
        super().__init__(f"{child.name} {what}")
        self.child = child


def trainserve_argv(*args: str) -> list[str]:
    """The same interpreter and package as the parent: `python -m trainserve ARGS`."""
    return [sys.executable, "-m", "trainserve", *args]


class _Signals:
    """Ctrl-C that arrives while a child is being started waits until it is registered, so no child
    can be forked and then forgotten by the cleanup."""

    depth = 0  # > 0 while inside _critical()
    pending = False


def _interrupt(signum, frame) -> None:  # noqa: ARG001
    if _Signals.depth:
        _Signals.pending = True
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def _critical():
    _Signals.depth += 1
    try:
        yield
    finally:
        _Signals.depth -= 1
        if not _Signals.depth and _Signals.pending:
            _Signals.pending = False
            raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_stop_children():
    """While running: SIGINT and SIGTERM raise KeyboardInterrupt, so the finally blocks that stop the
    children run (a SIGINT the caller ignores, as under nohup, stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, _interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
