"""What every bad-input command line row must show (tests/test_reliability.py, test_bad_inputs_cli.py,
test_bad_inputs_models.py): no death by a signal, no traceback, the expected exit status, and then either one
error line naming what it says, or the output it says (with at most one warning line where the row expects one);
and the files it must not write unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def check_command_row(row: Any, hashes: Callable[..., dict[str, str]]) -> None:
    """Assert what a row (``argv``, ``status``, ``says``, ``unchanged``, ``before``, ``result``, optionally ``warns``)
    must show; ``hashes(*paths)`` fingerprints the files it must not write, as ``row.before`` was taken."""
    res = row.result
    assert res is not None
    assert res.returncode >= 0, f"killed by signal {-res.returncode}: {res.stderr[-2000:]}"
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == row.status, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    command = row.argv[0]
    warns = getattr(row, "warns", "")
    if row.status == 2:
        assert len(lines) == 1, res.stderr
        assert lines[0].startswith(f"algosel {command}: error: "), lines[0]
        for fragment in row.says:
            assert fragment in lines[0], (fragment, lines[0])
    else:
        for fragment in row.says:
            assert fragment in res.stdout, (fragment, res.stdout)
        if warns:
            assert len(lines) == 1 and lines[0].startswith(f"algosel {command}: warning: "), res.stderr
            assert warns in lines[0]
        else:
            assert not lines, res.stderr
    assert hashes(*row.unchanged) == row.before, "a file it must not write changed"
