"""Processes that record unseen shapes, for tests/test_unseen.py (each forked from one that imported this module:
tests/forked.py).

    python tests/unseen_worker.py flush PATH START TAG   # 40 flushes, begun once START exists
    python tests/unseen_worker.py at-exit                # one shape recorded by ALGOSEL_RECORD_UNSEEN's recorder
    python tests/unseen_worker.py at-exit-into PATH      # one shape for a recorder of PATH, flushed at exit
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from algosel.problem import ConvProblem
from algosel.runtime.unseen import UnseenRecorder, recorder_from_env


def main() -> int:
    mode, *args = sys.argv[1:]
    if mode == "flush":
        path, start, tag = Path(args[0]), Path(args[1]), int(args[2])
        rec = UnseenRecorder(path, flush_at_exit=False)
        while not start.exists():  # both processes begin together, so that their flushes overlap
            time.sleep(0.001)
        for i in range(40):
            rec.add(ConvProblem(n=1, c=3, k=1 + i % 5, h=8, w=8, r=3, s=3))  # shared shapes
            rec.add(ConvProblem(n=1, c=3, k=100 + tag, h=8, w=8, r=3, s=3), calls=2)  # this process's own
            rec.flush()
    elif mode == "at-exit":
        recorder_from_env().add(ConvProblem(n=4, c=16, k=32, h=14, w=14, r=1, s=1), calls=9)
    elif mode == "at-exit-into":
        UnseenRecorder(args[0]).add(ConvProblem(n=1, c=1, k=1, h=1, w=1, r=1, s=1))
    else:
        raise SystemExit(f"unseen_worker.py: unknown mode {mode!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
