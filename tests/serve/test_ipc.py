"""serve/engine/ipc.py's messages: each kind survives encode -> decode whole, and a message of another version or
shape is refused by name, not misread."""

from __future__ import annotations

import marshal

import numpy as np
import pytest

from trainserve.serve.engine import ipc

ARENA = ipc.arena_tensor("input", np.zeros((4, 3, 32, 32), np.float32), 4096)
INLINE = ipc.inline_tensor("text", np.array([[b"a", b"bc"]], dtype=object))

MESSAGES = [
    ipc.Infer("classifier", "", (ARENA, INLINE), None, 53248, 4096, 1),
    ipc.Infer("classifier", "2", (ipc.inline_tensor("x", np.ones((2, 3), np.float16)),), ("logits",), -1, 0, 4),
    ipc.Call("statistics", ("classifier", "")),
    ipc.Ready({"http": 8000, "grpc": 8001}),
    ipc.Answer((ipc.arena_tensor("logits", np.zeros((4, 10), np.float32), 53248), INLINE)),
    ipc.Failure("NotFound", "no version 3"),
    ipc.Result([{"name": "classifier", "inference_count": 3}]),
    ipc.Hello({"frontends": 2, "entries": [], "spin": (1000, 0, False)}),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_kind_round_trips(message):
    kind, body = ipc.encode(message)
    assert kind == ipc.KINDS[type(message)]
    back = ipc.decode(kind, body)
    assert type(back) is type(message) and back == message
    assert ipc.decode(*ipc.encode(back)) == message


def test_every_kind_has_a_message_and_a_case_here():
    assert sorted(ipc.KINDS.values()) == [ipc.INFER, ipc.CALL, ipc.READY, ipc.OK, ipc.ERROR, ipc.RESULT, ipc.HELLO]
    assert {type(m) for m in MESSAGES} == set(ipc.KINDS)


def test_an_inline_tensor_keeps_its_dtype_shape_and_values():
    for array in (np.arange(6, dtype=np.int64).reshape(2, 3), np.array([[b"a", b"bc"]], dtype=object)):
        ((name, dtype, shape, offset, data),) = ipc.decode(*ipc.encode(ipc.Answer((ipc.inline_tensor("t", array),)))).tensors
        back = ipc.inline_array(dtype, tuple(shape), data)
        assert name == "t" and offset == -1 and back.dtype == array.dtype and back.shape == array.shape
        assert back.tolist() == array.tolist()


def test_another_version_or_other_fields_are_refused_by_name():
    fields = ("classifier", "", (), None, -1, 0, 1)
    with pytest.raises(ValueError, match=r"Infer message of version 0; this side reads version 1"):
        ipc.decode(ipc.INFER, marshal.dumps((0, *fields)))
    with pytest.raises(ValueError, match=r"Infer message with 6 fields; expected 7 \(model, version, tensors"):
        ipc.decode(ipc.INFER, marshal.dumps((ipc.VERSION, *fields[:-1])))
    with pytest.raises(ValueError, match="unknown message kind 99"):
        ipc.decode(99, b"")


def test_the_hot_kinds_stay_marshal_and_the_rare_ones_pickle():
    assert marshal.loads(ipc.encode(MESSAGES[0])[1])[0] == ipc.VERSION
    assert marshal.loads(ipc.encode(MESSAGES[4])[1])[0] == ipc.VERSION
    with pytest.raises(ValueError):
        marshal.loads(ipc.encode(MESSAGES[6])[1])
