"""What a training step runs (algosel.measure.steps): the input gradient of a call whose input needs none is left out
of the evaluation's headline and of whole-network totals; `algosel layers` records it from autograd."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn

from algosel.cli import main
from algosel.learn.evaluate_networks import network_totals
from algosel.measure.layers import load_layers, model_layers, write_layers
from algosel.measure.steps import input_needs_grad, no_input_grad_shapes, runs_in_training
from algosel.problem import ConvProblem

STEM = {"n": 2, "c": 3, "k": 8, "h": 16, "w": 16, "r": 7, "s": 7, "pad_h": 3, "pad_w": 3, "stride_h": 2,
        "stride_w": 2, "dilation_h": 1, "dilation_w": 1, "groups": 1}  # fmt: skip
INNER = {**STEM, "c": 8, "r": 3, "s": 3, "pad_h": 1, "pad_w": 1, "stride_h": 1, "stride_w": 1}


def _rows(network: str, *layers: dict, size: str = "16x16") -> pd.DataFrame:
    return pd.DataFrame(
        [{**layer, "network": network, "layer": f"l{i}", "size": size} for i, layer in enumerate(layers)]
    )


def test_the_first_call_of_an_image_network_needs_no_input_gradient_and_feature_inputs_do() -> None:
    frame = pd.concat([_rows("net", STEM, INNER), _rows("net", STEM, INNER, size="32x32"),
                       _rows("fpn", INNER), _rows("alexnet_fc", INNER), _rows("unseen", STEM)])  # fmt: skip
    # one block per (network, size): the first call of each takes the images; the FPN head and AlexNet's classifier
    # take a trained backbone's features; the hook's unseen shapes are no network in order
    assert input_needs_grad(frame).tolist() == [False, True, False, True, True, True, True]


def test_a_recorded_input_grad_column_wins_over_the_position() -> None:
    frame = _rows("net", STEM, INNER, INNER).assign(input_grad=["", "0", "1"])
    assert input_needs_grad(frame).tolist() == [False, False, True]


def test_a_shape_runs_where_any_network_calls_it_on_an_input_that_needs_a_gradient() -> None:
    stem_key = ConvProblem(**STEM).shape_key
    assert no_input_grad_shapes([_rows("a", STEM, INNER)]) == {stem_key}
    # the same shape inside another network (its input a layer's output): its input gradient runs there
    assert no_input_grad_shapes([_rows("a", STEM, INNER), _rows("b", INNER, STEM)]) == set()
    keys = [q.key for q in ConvProblem(**STEM, dtype="float16").directions()]
    keys += [q.key for q in ConvProblem(**INNER).directions()]  # a shape of no network: runs
    assert runs_in_training(keys, {stem_key}).tolist() == [True, False, True, True, True, True]


def test_layers_capture_records_whether_each_input_needs_a_gradient(tmp_path) -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, 8, 3, padding=1)
            self.side = nn.Conv2d(3, 8, 1)
            self.body = nn.Conv2d(8, 8, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # the side branch takes the (scaled) images too: no gradient there either
            return self.body(self.stem(x)) + self.side(2 * x)

    with torch.device("meta"):
        net = Net()
    frame, _ = model_layers(net, [[(2, 3, 16, 16)]], "net")
    assert dict(zip(frame["layer"], frame["input_grad"])) == {"stem": 0, "body": 1, "side": 0}
    path = write_layers(frame, tmp_path / "net.csv")
    back = load_layers(path)
    assert back["input_grad"].tolist() == ["0", "1", "0"]
    # the recorded column says what the position alone would get wrong: the third call needs no gradient
    assert input_needs_grad(back).tolist() == [False, True, False]


def test_a_bad_input_grad_value_is_one_line_naming_line_and_column(tmp_path, capsys) -> None:
    path = tmp_path / "bad.csv"
    write_layers(_rows("net", STEM, INNER).assign(input_grad=["0", "yes"]), path)
    assert main(["sweep", "--layers", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 3, column 'input_grad': 'yes' is not 1, 0 or empty" in err[0]


@pytest.mark.parametrize(("network", "first_bwd_data"), [("net", False), ("alexnet_fc", True)])
def test_network_totals_count_the_first_input_gradient_only_where_the_input_needs_one(network, first_bwd_data):
    suites = _rows(network, INNER, INNER)
    times = {"fwd": 1.0, "bwd_data": 2.0, "bwd_filter": 4.0}
    table = pd.DataFrame([{"problem_key": q.key, "best": times[q.direction], "model": times[q.direction]}
                          for q in ConvProblem(**INNER).directions()]).set_index("problem_key")  # fmt: skip
    row = network_totals({network: table}, suites, ["float32"], selectors=("model",)).iloc[0]
    assert row["calls"] == 5 + first_bwd_data
    assert row["best_ms"] == pytest.approx(7 + 5 + 2 * first_bwd_data)
