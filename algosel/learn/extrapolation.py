"""Warning about answers beyond a model's records: once per process and kind of extrapolation.

A kind is a dtype or layout the records lack, a size field beyond them, or no recorded problem of its kind
(:meth:`algosel.learn.selector.Selector.coverage` gives the reason, :func:`extrapolation_kind` its kind). Once per
kind, not once per process: a first answer beyond the recorded batch sizes must not silence a later one in a dtype
the records lack; nor once per problem, which would warn on every layer of a network.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

from algosel.problem import ConvProblem


class ExtrapolationWarning(UserWarning):
    """An answer for a problem outside what the model's records cover; warned once per process and kind of
    extrapolation (each dtype and layout the records lack, each size field beyond them, no problem of its kind)."""


#: The kinds warned about in this process. A frozenset rebound, never changed in place, so that
#: :func:`extrapolation_warnings_scope` can restore it.
_warned: frozenset[str] = frozenset()


def extrapolation_kind(why: str) -> str:
    """The kind of a :meth:`~algosel.learn.selector.Selector.coverage` reason: ``dtype 'bfloat16'``,
    ``layout 'nhwc'``, a size field (``n``, ``h``, ``flops``...) or the reason itself (no problem of its kind)."""
    return why.split(" is ", 1)[0].split("=", 1)[0]


def warn_extrapolation(problem: ConvProblem, why: str, stacklevel: int = 5) -> None:
    """Warn (:class:`ExtrapolationWarning`) that ``problem``'s answer is an extrapolation, unless its kind was
    warned about already in this process. ``stacklevel`` 5 names the caller of ``algosel.predict`` (predict ->
    choose -> rank -> here)."""
    global _warned  # noqa: PLW0603 - per process, whatever the selector
    kind = extrapolation_kind(why)
    if kind in _warned:
        return
    _warned = _warned | {kind}
    warnings.warn(
        f"algosel: {problem.key}: {why}; the model's answer is an extrapolation (Choice.extrapolated; "
        f"further ones of this kind ({kind}) are not warned about)",
        ExtrapolationWarning,
        stacklevel=stacklevel,
    )


@contextlib.contextmanager
def extrapolation_warnings_scope(fresh: bool = True) -> Iterator[None]:
    """Within the block, the kinds already warned about are none (``fresh``) or those of the process; after it,
    those of the process again, so that answers given inside (a speed measurement's grid, a test's) neither use up
    nor depend on the process's one warning per kind."""
    global _warned  # noqa: PLW0603
    saved = _warned
    if fresh:
        _warned = frozenset()
    try:
        yield
    finally:
        _warned = saved
