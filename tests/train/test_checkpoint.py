import pytest
import torch

from trainserve.train import checkpoint as ckpt
from trainserve.core.errors import UserError


def _state():
    return {"model": {"w": torch.ones(2)}, "optimizer": {"state": {}, "param_groups": []}, "scaler": {},
            "epoch": 1, "step": 3, "card": {"family": "mlp"}, "rng": ckpt.rng_state(), "train_config": {},
            "history": [{"epoch": 1}]}


def test_save_is_atomic_and_loads_weights_only(tmp_path):
    p = tmp_path / "c.pt"
    ckpt.save(p, _state())
    assert [f.name for f in tmp_path.iterdir()] == ["c.pt"]
    back = torch.load(p, weights_only=True)
    assert back["step"] == 3 and torch.equal(back["model"]["w"], torch.ones(2))
    from trainserve.core.fsutil import FILE_MODE

    assert p.stat().st_mode & 0o777 == FILE_MODE  # the umask's mode, readable where the umask allows: not 0600


def test_temporary_files_of_a_killed_write_are_removed_by_the_next_save(tmp_path):
    p = tmp_path / "c.pt"
    stale = tmp_path / ".c.pt.k2x9q1.tmp"  # what a write killed midway leaves
    stale.write_bytes(b"half a checkpoint")
    other = tmp_path / ".other.pt.abc.tmp"  # not this checkpoint's: left alone
    other.write_bytes(b"x")
    ckpt.save(p, _state())
    assert sorted(f.name for f in tmp_path.iterdir()) == [".other.pt.abc.tmp", "c.pt"]


def test_rng_round_trip():
    s = ckpt.rng_state()
    a = torch.rand(3)
    ckpt.set_rng_state(s)
    assert torch.equal(torch.rand(3), a)


@pytest.mark.parametrize("content", [b"", b"not a checkpoint", b"PK\x03\x04broken"])
def test_corrupt_is_a_user_error(tmp_path, content):
    p = tmp_path / "c.pt"
    p.write_bytes(content)
    with pytest.raises(UserError, match="corrupt"):
        ckpt.load(p)


def test_missing_and_foreign_files(tmp_path):
    with pytest.raises(UserError, match="no checkpoint"):
        ckpt.load(tmp_path / "nope.pt")
    torch.save({"weights": torch.ones(1)}, tmp_path / "other.pt")
    with pytest.raises(UserError, match="lacks trainserve fields"):
        ckpt.load(tmp_path / "other.pt")
