"""Call statistics of one executor: how many calls took each path, and why the rest passed through.

Counted three ways, each where it is cheapest: a Python counter for calls that run Python anyway (the Python
Function, fallbacks, calls the hook does not handle); a per-route call count for routes the hot path runs
(``Route.calls``); and the compiled dispatch table's own counters for calls that never enter Python. A route's
count is reported under each of its reasons (``gemm``, ``cudnn`` or ``pytorch:<reason>``, one per direction).
"""

from __future__ import annotations

from collections import Counter
from typing import Any


class CallStats:
    """Calls per path of one executor (:meth:`snapshot`), reset by :meth:`reset`."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._routes: list[Any] = []  # routes counted by call: their calls, and their slots in dispatch tables
        self._tables: list[Any] = []  # the executor's dispatch tables, old ones too (their counts stay)

    def count(self, path: str, calls: int = 1) -> None:
        self.counts[path] += calls

    def add_route(self, route: Any) -> None:
        """Count ``route``'s calls from now on under its reasons."""
        self._routes.append(route)

    def add_table(self, table: Any) -> None:
        self._tables.append(table)

    def snapshot(self) -> Counter[str]:
        total = Counter(self.counts)
        for route in self._routes:
            calls = route.calls + sum(table.calls(slot) for table, slot in route.slots)
            for reason in route.reasons:
                total[reason] += calls
        return total

    def reset(self) -> None:
        self.counts.clear()
        for route in self._routes:
            route.calls = 0
        for table in self._tables:
            table.reset_calls()
