"""The parts of the multi-front-end server, in process: the default count, the arena, the channel's
framing and errors, the port reservation, and the registry snapshot a front end answers from."""

from __future__ import annotations

import asyncio
import pickle
import socket

import numpy as np
import pytest

from trainserve.serve.engine import ipc, shm
from trainserve.serve.engine.server_core import CoreOptions, ServerCore
from trainserve.serve.engine.model_process import reserve_port
from trainserve.serve.request_errors import InvalidArgument, NotFound, TooLarge, Unavailable
from trainserve.serve.engine.remote_core import RemoteCore, registry_snapshot
from trainserve.serve.engine.serve_entry import default_frontends
from trainserve.serve.engine.server import ready_line


def test_default_frontends_is_one_below_8_cores_then_a_quarter_of_them_at_most_8_and_one_for_a_cpu_server():
    assert [default_frontends(c) for c in (1, 2, 7, 8, 16, 31, 64, 128)] == [1, 1, 1, 2, 4, 7, 8, 8]
    assert [default_frontends(c, "cpu") for c in (2, 16, 128)] == [1, 1, 1]
    assert default_frontends(16, "cuda") == 4
    assert ready_line("h", {"http": 1, "grpc": None}, 3) == "trainserve serve: ready http=h:1 grpc=off frontends=3"


def test_arena_reuses_freed_blocks_and_says_when_it_is_full():
    arena = shm.Arena(shm.create_arena_fd("test-arena", 1 << 16), 1 << 16)
    a = arena.alloc(100)
    b = arena.alloc(5000)
    assert a == (0, 4096) and b == (4096, 8192)  # a page at least, then powers of two
    arena.free(a)
    assert arena.alloc(10) == (0, 4096)  # the freed block comes back first
    assert arena.alloc(1 << 16) is None  # no room left: the caller sends the tensors inline
    view = shm.view(arena.mm, 4096, "<f4", (2, 3))
    view[...] = 7
    assert float(np.frombuffer(arena.mm, np.float32, 6, 4096).sum()) == 42


def test_errors_cross_the_channel_as_their_own_class_and_others_as_internal():
    e = ipc.raise_error(ipc.failure(NotFound("no version 3")))
    assert type(e) is NotFound and e.message == "no version 3" and e.http_status == 404
    e = ipc.raise_error(ipc.failure(TooLarge(10, 5)))  # a class whose __init__ takes other arguments
    assert type(e) is TooLarge and "exceeds" in e.message
    e = ipc.raise_error(ipc.failure(ValueError("boom")))
    assert e.grpc_code == "INTERNAL" and "ValueError: boom" in e.message


def test_link_reads_frames_split_anywhere_and_batches_one_turn_of_sends():
    got = []
    link = ipc.Link(lambda kind, rid, body: got.append((kind, rid, body)), lambda: None)
    frames = b"".join(ipc.HEADER.pack(len(b), k, r) + b for k, r, b in [(1, 7, b"abc"), (4, 8, b""), (6, 9, b"x" * 70)])
    for i in range(0, len(frames), 5):  # five bytes at a time: headers and bodies cut in the middle
        link.data_received(frames[i : i + 5])
    assert got == [(1, 7, b"abc"), (4, 8, b""), (6, 9, b"x" * 70)]
    big = bytes(range(256)) * 4096  # 1 MiB, read in 64 KiB pieces as a socket gives it
    frames = ipc.HEADER.pack(len(big), 4, 10) + big + ipc.HEADER.pack(1, 4, 11) + b"z"
    for i in range(0, len(frames), 65536):
        link.data_received(frames[i : i + 65536])
    assert got[3:] == [(4, 10, big), (4, 11, b"z")]

    class Transport:
        writes: list[bytes] = []

        def write(self, data: bytes) -> None:
            self.writes.append(data)

    async def burst() -> list[bytes]:
        link.transport = Transport()
        for rid in range(5):
            link.send(ipc.OK, rid, b"r")
        await asyncio.sleep(0)
        return link.transport.writes

    writes = asyncio.run(burst())
    assert len(writes) == 2  # the first at once, the other four together
    assert writes[1] == b"".join(ipc.HEADER.pack(1, ipc.OK, rid) + b"r" for rid in range(1, 5))


def test_inline_tensors_keep_dtype_shape_and_strings():
    for array in (np.arange(6, dtype=np.int64).reshape(2, 3), np.array([[b"a", b"bc"]], dtype=object)):
        (name, dtype, shape, offset, data), = ipc.decode(*ipc.encode(ipc.Answer((ipc.inline_tensor("t", array),)))).tensors
        back = ipc.inline_array(dtype, tuple(shape), data)
        assert offset == -1 and back.dtype == array.dtype and back.shape == array.shape
        assert back.tolist() == array.tolist()


def test_a_port_in_use_cannot_be_reserved_but_the_front_ends_can_share_a_reserved_one():
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(OSError):
            reserve_port("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()
    reserved = reserve_port("127.0.0.1", 0)
    port = reserved.getsockname()[1]
    frontends = []
    try:
        for _ in range(2):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
            frontends.append(s)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # a listening front end took it, not the reservation (which never listens)
    finally:
        for s in [reserved, *frontends]:
            s.close()


def test_the_snapshot_answers_as_the_core_does(model_repo):
    core = ServerCore(CoreOptions(model_repo, intra_op_threads=1))
    core.load()
    core.frontends = 3
    remote = RemoteCore(pickle.loads(pickle.dumps(registry_snapshot(core))), shm.Arena(shm.create_arena_fd("t", 1 << 16), 1 << 16),
                        on_engine_gone=lambda: None)
    assert remote.server_metadata() == core.server_metadata()
    assert [(e.name, e.version, e.state, e.reason) for e in remote.index()] == \
        [(e.name, e.version, e.state, e.reason) for e in core.index()]
    assert remote.model_metadata("classifier") == core.model_metadata("classifier")
    assert remote.model_config("classifier", "1") == core.model_config("classifier", "1")
    assert remote.model_config("classifier").parameters["frontends"].string_value == "3"
    assert remote.entry("classifier").version == core.entry("classifier").version
    for call in (lambda c: c.entry("nope"), lambda c: c.entry("classifier", "9"), lambda c: c.model_metadata("broken")):
        with pytest.raises((InvalidArgument, NotFound, Unavailable)) as theirs:
            call(core)
        with pytest.raises(type(theirs.value)) as ours:
            call(remote)
        assert ours.value.message == theirs.value.message
    assert remote.model_ready("classifier") and not remote.model_ready("broken")

    async def infer_without_a_model_process() -> None:
        await remote.start()
        with pytest.raises(Unavailable, match="model process"):
            await remote.infer("classifier", "", {"input": np.ones((1, 4), np.float32)})

    asyncio.run(infer_without_a_model_process())
    assert remote.arena.alloc(4096) == (0, 4096)  # the request's block was given back


def test_a_freed_large_block_gives_its_memory_back():
    arena = shm.Arena(shm.create_arena_fd("test-release", 8 << 20), 8 << 20)
    block = arena.alloc(shm.RELEASE_BYTES)
    shm.view(arena.mm, block[0], "|u1", (block[1],))[...] = 1
    arena.free(block)
    assert shm.view(arena.mm, block[0], "|u1", (block[1],)).max() == 0  # the pages were dropped, not kept


class _Wire:
    """A transport that hands what is written to the other side's Link on the next loop turn."""

    def __init__(self, to: ipc.Link, messages: list | None = None) -> None:
        self.to, self.messages = to, messages

    def write(self, data: bytes) -> None:
        if self.messages is not None:  # the INFER messages written, by their requests' count
            pos = 0
            while pos < len(data):
                length, kind, _ = ipc.HEADER.unpack_from(data, pos)
                if kind == ipc.INFER:
                    self.messages.append(ipc.decode(kind, data[pos + 9 : pos + 9 + length]).requests)
                pos += 9 + length
        asyncio.get_running_loop().call_soon(self.to.data_received, data)

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_front_end_merges_one_turn_of_requests_and_each_gets_its_own_rows_errors_and_counts(model_repo):
    """Requests that arrive together go to the model process as one message per batch (at most
    max_batch_size rows, 8 here), the first of the turn alone; each client gets its own rows back; a request
    the model refuses is not merged and gets its own error; the statistics count every client's request."""
    from trainserve.serve.engine.model_process import Engine, FrontEndProcess
    from trainserve.serve.engine.server import ServerOptions
    from tests.serve.tiny_models import expected_logits

    async def main() -> None:
        core = ServerCore(CoreOptions(model_repo, intra_op_threads=1, busy_poll_us=0))
        core.load()
        await core.start()
        arena = shm.Arena(shm.create_arena_fd("test-merge", 1 << 20), 1 << 20)
        engine = Engine(core, ServerOptions(), 2)
        child = FrontEndProcess(0, None, arena.mm)  # type: ignore[arg-type]
        remote = RemoteCore(registry_snapshot(core), arena, lambda: None)
        child.link = ipc.Link(lambda k, r, b: engine._on_message(child, k, r, b), lambda: None)
        remote.link = ipc.Link(remote.on_message, lambda: None)
        messages: list[int] = []
        child.link.connection_made(_Wire(remote.link))
        remote.link.connection_made(_Wire(child.link, messages))
        await remote.start()
        before = core.statistics("classifier", "2")[0].to_dict()
        xs = [np.full((1, 4), i, np.float32) for i in range(11)] + [np.arange(8, dtype=np.float32).reshape(2, 4)]
        calls = [remote.infer("classifier", "", {"input": x}) for x in xs]
        calls.insert(5, remote.infer("classifier", "", {"input": np.ones((1, 5), np.float32)}))  # a wrong shape
        calls.insert(7, remote.infer("classifier", "", {"input": xs[3]}, ["probs"]))  # other outputs: a group of its own
        got = await asyncio.gather(*calls, return_exceptions=True)
        await core.stop()
        bad, probs_only = got.pop(5), got.pop(6)
        assert isinstance(bad, InvalidArgument) and "Expected [-1,4], got [1,5]" in bad.message
        assert list(probs_only) == ["probs"] and probs_only["probs"].shape == (1, 3)
        for x, result in zip(xs, got):
            assert result["logits"].shape == (len(x), 3)
            np.testing.assert_allclose(result["logits"], expected_logits(x), rtol=1e-5)
        # the first alone; the other 10 batch-1 requests and the 2-row one (12 rows) in groups of at most 8
        # rows (8 requests, then 3); the refused one alone; the probs-only one alone (a group of one)
        assert sorted(messages) == [1, 1, 1, 3, 8], messages
        after = core.statistics("classifier", "2")[0].to_dict()
        s0, s1 = before["inference_stats"], after["inference_stats"]
        assert s1["success"]["count"] - s0["success"]["count"] == 13
        assert s1["fail"]["count"] - s0["fail"]["count"] == 1
        assert after["inference_count"] - before["inference_count"] == 14  # rows: 11 + 2 + 1
        assert s1["queue"]["count"] - s0["queue"]["count"] == 13

    asyncio.run(main())
