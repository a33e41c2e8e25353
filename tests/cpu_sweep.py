"""A real sweep process on CPU, for tests that kill or stop it: ``run_sweep`` over small convolutions with the
GEMM-lowering and PyTorch-default spaces, a fake timer, and the operands and correctness checks of a real sweep.

    python tests/cpu_sweep.py OUT [--cases N] [--case-s S] [--slow-first S] [--retry-crashed]

``--case-s`` sleeps that long inside every case (so that signals land in a case in flight), ``--slow-first`` that
long inside the first case only. Prints ``sweeping`` once set up (imports done), ``case <key>`` as each case starts
and the report as JSON at the end;
exits, as ``algosel sweep`` does, with 128 + the signal's number when SIGINT or SIGTERM stopped it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from algosel.candidates import DEFAULT_ID
from algosel.measure.sweep import SweepCase, Sweeper, run_sweep
from algosel.measure.timing import FakeTimer
from algosel.problem import ConvProblem
from algosel.spaces.gemm import GemmSpace
from algosel.spaces.pytorch import PyTorchDefaultSpace

ENV = {"env_id": "cpu-sweep", "gpu_name": "none (CPU test sweep)"}
TIMES_MS = {"gemm:fc": 0.5, "gemm:pointwise": 0.4, DEFAULT_ID: 1.0}


def cases(count: int) -> list[SweepCase]:
    """``count`` distinct small cases; every third is fully connected and every third pointwise (GEMM applies)."""
    out = []
    for i in range(count):
        n = 1 + i // 3
        if i % 3 == 0:
            p = ConvProblem(n=n, c=3, k=4, h=3, w=3, r=3, s=3)
        elif i % 3 == 1:
            p = ConvProblem(n=n, c=4, k=3, h=4, w=5, r=1, s=1, layout="nhwc")
        else:
            p = ConvProblem(n=n, c=2, k=3, h=5, w=4, r=3, s=2, pad_h=1, pad_w=1)
        out.append(SweepCase(p, "grid"))
    return out


class SleepingSweeper(Sweeper):
    """A CPU sweeper whose cases take at least ``case_s`` seconds (``slow_first_s`` for the first case)."""

    def __init__(self, case_s: float, slow_first_s: float, first_key: str):
        super().__init__(
            [GemmSpace(), PyTorchDefaultSpace()], FakeTimer(TIMES_MS.__getitem__), ENV, device="cpu", operand_sets=1
        )
        self.case_s, self.slow_first_s, self.first_key = case_s, slow_first_s, first_key

    def measure_case(self, case: SweepCase) -> list[dict]:
        print(f"case {case.key}", flush=True)
        time.sleep(self.slow_first_s if case.key == self.first_key else self.case_s)
        return super().measure_case(case)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--cases", type=int, default=30)
    parser.add_argument("--case-s", type=float, default=0.0)
    parser.add_argument("--slow-first", type=float, default=0.0)
    parser.add_argument("--retry-crashed", action="store_true")
    args = parser.parse_args()
    todo = cases(args.cases)
    sweeper = SleepingSweeper(args.case_s, args.slow_first or args.case_s, todo[0].key)
    print("sweeping", flush=True)
    report = run_sweep(todo, sweeper, args.out, progress=False, retry_crashed=args.retry_crashed)
    print(json.dumps({k: (str(v) if k == "part" else v) for k, v in report.__dict__.items()}), flush=True)
    return 128 + report.interrupted if report.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
