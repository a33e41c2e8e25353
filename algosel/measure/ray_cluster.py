"""The Ray side of a sweep on a cluster: importing Ray (an optional extra), connecting to a cluster, and turning a
task's resource request into Ray's options and a number of task slots.

Ray is imported only here and only when asked for (:func:`require_ray`): ``import algosel`` and a local sweep never
load it, and without it installed ``algosel sweep --ray`` is a one-line error naming the extra to install.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Mapping
from typing import Any

#: A sweep task's request on a GPU cluster: one GPU each (the sweeper times one GPU at a time).
GPU_TASK: Mapping[str, float] = {"num_gpus": 1}

#: How long the reachability check of an address waits: Ray's own connect to an address where nothing answers
#: retries for minutes (measured: still waiting after 300 s with Ray 2.60) before it fails.
CONNECT_TIMEOUT_S = 5.0

#: Request keys that are options of ``ray.remote`` and the cluster resource each one counts; any other key of a
#: request is a custom resource (``{"H200": 1}``), counted under its own name.
_OPTION_RESOURCES = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}


class RayUnavailableError(ValueError):
    """Ray is not installed, or the cluster cannot be used: one line naming the cause and the way out (a ValueError,
    so that the command line prints it as one line)."""


def require_ray():
    """The ``ray`` module, imported now.

    Raises
    ------
    RayUnavailableError
        Where Ray is not installed, naming ``pip install 'algosel[ray]'``.
    """
    try:
        import ray  # noqa: PLC0415 - optional, and heavy: loaded only for a sweep on Ray
    except ImportError:
        raise RayUnavailableError(
            "Ray is not installed (algosel sweep --ray needs it): pip install 'algosel[ray]'"
        ) from None
    return ray


def _host_port(address: str, source: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port`` or ``ray://host:port``; None for Ray's own words (``auto``, ``local``)."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep:
        return None
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise RayUnavailableError(f"{source} {address}: the port {port!r} is not a number") from None


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S, source: str = "--ray") -> None:
    """Raise :class:`RayUnavailableError`, naming ``source`` (where the address came from) and the address, unless
    something accepts a TCP connection at ``address``'s host and port within ``timeout_s`` (Ray's own connect would
    wait minutes for an address where nothing answers)."""
    target = _host_port(address, source)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout_s):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise RayUnavailableError(f"{source} {address}: cannot reach a Ray cluster there ({why})") from None


def connect(address: str | None = None, **init_kwargs: Any) -> None:
    """Connect this process to a Ray cluster (a no-op if it already is).

    ``address`` as ``ray.init`` takes it: ``host:port`` of a cluster's head (GCS, port 6379 by default),
    ``ray://host:port`` (Ray Client, which needs ``pip install 'ray[client]'``), ``auto`` (the cluster ``ray start``
    made on this machine); None or ``""``: that one, or ``RAY_ADDRESS``, or else a new cluster of this machine alone
    (its GPUs). ``init_kwargs`` go to ``ray.init``.

    Raises
    ------
    RayUnavailableError
        Ray is not installed, the address is unreachable or refuses the connection: one line naming it.
    """
    ray = require_ray()
    if ray.is_initialized():
        return
    address = address or None
    if address:
        check_reachable(address)
    elif os.environ.get("RAY_ADDRESS"):  # what ray.init connects to without an address
        check_reachable(os.environ["RAY_ADDRESS"], source="RAY_ADDRESS")
    try:
        ray.init(address=address, **init_kwargs)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RayUnavailableError(f"--ray {address or '(this machine)'}: {first}") from None


def task_options(request: Mapping[str, float]) -> dict[str, Any]:
    """``ray.remote`` options of a task that asks for ``request`` (``{"num_gpus": 1}``, ``{"num_cpus": 1}``, custom
    resources by name).

    A task that asks for a GPU runs in a fresh worker process (``max_calls=1``): Ray may hand a reused worker
    another GPU than the one its CUDA context was made on, and two tasks would then time on one GPU. Ray sets this
    itself only for ``@ray.remote(num_gpus=...)``, not for the same request given through ``.options()``.
    """
    if not request:
        raise ValueError("a task's resource request is empty; e.g. {'num_gpus': 1}")
    options: dict[str, Any] = {}
    custom: dict[str, float] = {}
    for key, amount in request.items():
        if not (isinstance(amount, (int, float)) and amount > 0 and math.isfinite(amount)):
            raise ValueError(f"task resource {key}={amount!r}: expected a positive number")
        if key in _OPTION_RESOURCES:
            options[key] = amount
        else:
            custom[key] = amount
    if custom:
        options["resources"] = custom
    if options.get("num_gpus"):
        options["max_calls"] = 1
    return options


def resource_name(key: str) -> str:
    """The cluster resource a request key counts: ``GPU`` for ``num_gpus``, a custom resource under its own name."""
    return _OPTION_RESOURCES.get(key, key)


def task_slots(request: Mapping[str, float], cluster: Mapping[str, float]) -> int:
    """How many tasks asking for ``request`` the cluster's resources ``cluster`` (``ray.cluster_resources()``) run
    at once. A task takes one CPU unless it asks otherwise (Ray's default)."""
    needs = {resource_name(key): float(amount) for key, amount in request.items()}
    needs.setdefault("CPU", 1.0)
    return min(int(float(cluster.get(name, 0.0)) // amount) for name, amount in needs.items() if amount > 0)


def describe_request(request: Mapping[str, float]) -> str:
    """``num_gpus=1`` for the request ``{"num_gpus": 1}`` (error messages)."""
    return ", ".join(f"{key}={amount:g}" for key, amount in request.items())
