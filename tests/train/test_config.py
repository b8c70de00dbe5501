import pytest

from trainserve.train.config import TrainConfig
from trainserve.core.errors import UserError


@pytest.mark.parametrize("field,value", [("batch_size", 0), ("device", "tpu"), ("precision", "fp8"), ("epochs", 0),
                                         ("lr", 0.0), ("lr_scale", "sqrt"), ("num_workers", -1), ("steps", 0),
                                         ("data_placement", "gpu")])
def test_bad_values_name_the_field(field, value):
    with pytest.raises(UserError, match=field):
        TrainConfig(**{field: value})


def test_linear_lr_scaling():
    assert TrainConfig(lr=0.1, batch_size=512, lr_scale="linear").effective_lr == pytest.approx(0.2)
    assert TrainConfig(lr=0.1, batch_size=512).effective_lr == pytest.approx(0.1)


def test_round_trip():
    c = TrainConfig(model="mlp", steps=7)
    assert TrainConfig.from_dict(c.to_dict()) == c
