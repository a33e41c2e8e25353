"""The zoo's configuration: one frozen :class:`ZooConfig`, made once by the command line's ``main`` (from the
environment, then the options given) and handed down to the driver and every job.

The driver hands it to each job's process through the environment (:meth:`ZooConfig.child_env`), under the names
shell scripts set too (``ALGOSEL_ZOO_MODEL=... python benchmarks/zoo.py ...``); the child reads it back with
:meth:`ZooConfig.from_env`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from types import MappingProxyType

from zoolib.jobs import JOBS
from zoolib.nets import NETS


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


@dataclasses.dataclass(frozen=True)
class ZooConfig:
    """What a zoo run measures and how. The environment variable of each field is in brackets."""

    #: A quick run of the driver on the CPU (tests): small inputs, two rounds, and the hook's CPU-as-GPU device seam
    #: (``ALGOSEL_ZOO_SMOKE=1``).
    smoke: bool = False
    #: ``--model``: the hook's model directory; None: the shipped model for this GPU (``ALGOSEL_ZOO_MODEL``).
    model: str | None = None
    #: Which of ``--processes`` repeated processes this is, 0 in a job's first (``ALGOSEL_ZOO_PROCESS``).
    process: int = 0
    #: ``--aa``: the paired job's rotation gets the default a second time (``ALGOSEL_ZOO_AA=1``).
    aa: bool = False
    #: Verify mode looks at the device before timing a new problem (``Executor.look_first``); its cold cost is then
    #: counted over the passes until every signature is decided. Off with ``--no-look-first``
    #: (``ALGOSEL_ZOO_NO_LOOK_FIRST=1``).
    look_first: bool = True
    #: ``--min-gain-us``: the hook's least gain, for prediction and verify mode; None: the hook's; rows record it
    #: (``ALGOSEL_ZOO_MIN_GAIN_US``).
    min_gain_us: float | None = None
    #: ``--verify-k``: verify mode's shortlist (``ALGOSEL_ZOO_VERIFY_K``).
    verify_k: int = 3
    #: ``--probe-calls``: calls a switch looks at the device before it is kept, for prediction and verify mode; None:
    #: the hook's; 0 switches at once and verify mode times at the first call (``ALGOSEL_ZOO_PROBE_CALLS``).
    probe_calls: int | None = None
    #: ``--force``: the hook's model loaded for this GPU whatever GPU it was trained for (an H100 running the H200's
    #: model); rows say so (``forced_model``) (``ALGOSEL_ZOO_FORCE=1``).
    force: bool = False
    #: ``--budget-s``: what the first job of a run is expected to take (later ones: the longest so far).
    budget_first_job_s: float = 60.0
    #: The networks: name -> (batch, input size, kind).
    nets: Mapping[str, tuple[int, int, str]] = dataclasses.field(default_factory=lambda: NETS, repr=False)
    #: Builders of networks beyond :mod:`zoolib.nets`'s kinds, by kind (benchmarks/zoo_gpu.py registers its own):
    #: ``builder(name, batch, size, memory_format, device) -> (model, inputs)``, ``inputs`` a list of argument lists
    #: (a step takes the next one in turn).
    builders: Mapping[str, Callable] = dataclasses.field(default_factory=dict, repr=False)
    #: The jobs by name: ``job(cfg, name, dtype, device, **options) -> row`` (:mod:`zoolib.jobs`).
    jobs: Mapping[str, Callable] = dataclasses.field(default_factory=lambda: JOBS, repr=False)

    def __post_init__(self) -> None:
        for name in ("nets", "builders", "jobs"):  # read-only copies: a config never changes once made
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **fields) -> ZooConfig:
        """The configuration the environment sets (``os.environ`` unless given), with ``fields`` besides."""
        env = os.environ if environ is None else environ
        gain, probe = env.get("ALGOSEL_ZOO_MIN_GAIN_US"), env.get("ALGOSEL_ZOO_PROBE_CALLS")
        return cls(
            smoke=env.get("ALGOSEL_ZOO_SMOKE") == "1",
            model=env.get("ALGOSEL_ZOO_MODEL") or None,
            process=int(env.get("ALGOSEL_ZOO_PROCESS") or 0),
            aa=env.get("ALGOSEL_ZOO_AA") == "1",
            look_first=env.get("ALGOSEL_ZOO_NO_LOOK_FIRST") != "1",
            min_gain_us=float(gain) if gain else None,
            verify_k=int(env.get("ALGOSEL_ZOO_VERIFY_K") or 3),
            probe_calls=int(probe) if probe else None,
            force=env.get("ALGOSEL_ZOO_FORCE") == "1",
            **fields,
        )

    def with_args(self, args) -> ZooConfig:
        """This configuration with the command line's options (benchmarks/zoo.py's parser) where they are given."""
        given = {
            "model": args.model or None,
            "aa": args.aa or None,
            "look_first": False if args.no_look_first else None,
            "min_gain_us": args.min_gain_us,
            "verify_k": args.verify_k,
            "probe_calls": args.probe_calls,
            "force": args.force or None,
        }
        return dataclasses.replace(self, **{k: v for k, v in given.items() if v is not None})

    def child_env(self, process: int) -> dict[str, str]:
        """The environment variables that hand this configuration to a job's process (the ``process``-th of its
        job), every one of them set: what :meth:`from_env` reads back."""
        return {
            "ALGOSEL_ZOO_SMOKE": "1" if self.smoke else "0",
            "ALGOSEL_ZOO_MODEL": self.model or "",
            "ALGOSEL_ZOO_PROCESS": str(process),
            "ALGOSEL_ZOO_AA": "1" if self.aa else "0",
            "ALGOSEL_ZOO_NO_LOOK_FIRST": "0" if self.look_first else "1",
            "ALGOSEL_ZOO_MIN_GAIN_US": "" if self.min_gain_us is None else str(self.min_gain_us),
            "ALGOSEL_ZOO_VERIFY_K": str(self.verify_k),
            "ALGOSEL_ZOO_PROBE_CALLS": "" if self.probe_calls is None else str(self.probe_calls),
            "ALGOSEL_ZOO_FORCE": "1" if self.force else "0",
        }

    def hook_config(self) -> dict | None:
        """What a row records of the hook's settings where they are not the hook's defaults (None where they are)."""
        if self.min_gain_us is None and self.verify_k == 3 and self.probe_calls is None:
            return None
        config: dict = {"min_gain_us": self.min_gain_us, "verify_k": self.verify_k}
        if self.probe_calls is not None:
            config["probe_calls"] = self.probe_calls
        return config
