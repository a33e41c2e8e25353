"""What a training step runs: which convolution calls of a network compute their input's gradient.

A training step runs every convolution forward and its weight gradient, and the input gradient (``bwd_data``) only
where the convolution's input needs a gradient itself. The first convolution of a network over images takes the
images, which need none: autograd never computes that ``bwd_data``, so a selector's pick for it costs no user
anything, and an evaluation that counts it judges the selector where nobody gains (issue 40).

Where it comes from, in order:

- a layers file's ``input_grad`` column (:data:`INPUT_GRAD_COLUMN`: 1 or 0, empty where not recorded), which
  ``algosel layers`` writes from autograd itself (:func:`algosel.measure.conv_calls.extract_conv_calls` runs the model
  with gradients on, on meta tensors, and records whether each call's input requires a gradient);
- else the position in the network: the first call of each (network, size) block takes the network's input, which
  needs no gradient, unless the suite's spec says its inputs are features of a trained backbone
  (:attr:`~algosel.measure.suites.SuiteSpec.input_needs_grad`: the FPN head, AlexNet's classifier as convolutions);
  every later call's input is some layer's output, which does. The hook's record of unseen problems
  (network ``unseen``) is a list of shapes, not a network in order: all of its calls count.

A problem of no network (the grid's shapes) is taken to run: nothing the records know says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from algosel.measure.layer_table import INPUT_GRAD_COLUMN, LAYER_FIELDS
from algosel.measure.suites import SUITES, SuiteSpec
from algosel.problem import ConvProblem

#: The network name of the runtime hook's record of unseen problems (:data:`algosel.measure.layers.UNSEEN_NETWORK`).
UNSEEN_NETWORK = "unseen"


def input_needs_grad(
    frame: pd.DataFrame, specs: Mapping[str, SuiteSpec] = SUITES, unseen_network: str = UNSEEN_NETWORK
) -> np.ndarray:
    """Per row of a suite or layers frame: whether the call's input needs a gradient in a training step.

    Parameters
    ----------
    frame : pandas.DataFrame
        Rows in execution order with ``network`` and ``size`` (and optionally :data:`INPUT_GRAD_COLUMN`, whose
        non-empty values win).
    specs : mapping of str to SuiteSpec
        The suites, for networks whose inputs are a trained backbone's features.
    unseen_network : str
        The network whose rows are shapes rather than calls in order: every row needs the gradient.

    Returns
    -------
    numpy.ndarray of bool
        One value per row, in row order.
    """
    if frame.empty:
        return np.zeros(0, dtype=bool)
    networks = frame["network"].astype(str)
    first = ~frame.duplicated(subset=["network", "size"], keep="first")
    feature_input = networks.map(lambda n: n in specs and specs[n].input_needs_grad) | (networks == unseen_network)
    needs = (~first | feature_input).to_numpy(dtype=bool)
    if INPUT_GRAD_COLUMN in frame:
        recorded = pd.to_numeric(frame[INPUT_GRAD_COLUMN].astype(str).str.strip(), errors="coerce")
        needs = np.where(recorded.notna(), recorded.fillna(0).to_numpy() != 0, needs)
    return needs


def no_input_grad_shapes(frames: Iterable[pd.DataFrame], specs: Mapping[str, SuiteSpec] = SUITES) -> set[str]:
    """Shape keys whose every call in ``frames`` takes an input that needs no gradient: their ``bwd_data`` never runs.

    A shape that one network calls on its images and another on a layer's output (a stem shape reused inside a
    network) runs, so it is not among them.
    """
    never: set[str] = set()
    runs: set[str] = set()
    for frame in frames:
        if frame.empty:
            continue
        needs = input_needs_grad(frame, specs)
        for row, need in zip(frame[list(LAYER_FIELDS)].to_dict("records"), needs):
            key = ConvProblem(**{f: int(row[f]) for f in LAYER_FIELDS}).shape_key
            (runs if need else never).add(key)
    return never - runs


def runs_in_training(problem_keys: Iterable[str], never_shapes: set[str]) -> np.ndarray:
    """Per problem key: False for the ``bwd_data`` of a shape of ``never_shapes`` (:func:`no_input_grad_shapes`),
    True for every other problem (the grid's shapes included: nothing says they do not run)."""
    out = []
    for key in problem_keys:
        p = ConvProblem.from_key(key)
        out.append(not (p.direction == "bwd_data" and p.shape_key in never_shapes))
    return np.array(out, dtype=bool)


def call_runs(direction: str, needs_grad: bool) -> bool:
    """Whether a training step runs a call's ``direction``: always, but the input gradient of an input that needs
    none."""
    return direction != "bwd_data" or bool(needs_grad)
