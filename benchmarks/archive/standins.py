"""Selector stand-ins for the runtime benchmarks: the shipped selector, seen as if its records lacked every problem,
with predicted times chosen so that the route a benchmark measures is the one the executor takes.

Imported by the scripts beside it (``python benchmarks/<script>.py`` puts this folder on ``sys.path``).
"""

from __future__ import annotations


class Unrecorded:
    """The selector as it sees a problem its records lack (its candidates: the nearest recorded problem's list)."""

    def __init__(self, sel, reference=None):
        self._sel = sel
        self._reference = reference

    def __getattr__(self, name):
        return getattr(self._sel, name)

    def is_recorded(self, problem):
        return False

    def records_distance(self, problem):
        """The distance to the ``reference`` catalogue's problems (e.g. the training shapes' alone: a held-out
        problem is at distance 0 from the full catalogue, which holds it), else to the model's records."""
        return (self._reference or self._sel.catalogue).distance(problem)

    def host_us(self, problem, candidate_ids):
        """The records' host times of the nearest problem of the ``reference`` catalogue (as for the distance): a
        held-out problem's own record is not looked at."""
        catalogue = self._reference or self._sel.catalogue
        key = catalogue.nearest(problem)
        return {} if key is None else catalogue.host_us(key, candidate_ids)


class NearestListed(Unrecorded):
    """... whose offline candidates are the ``reference`` catalogue's nearest recorded problem's list, as the
    runtime's are for a problem its records lack (:meth:`choose`, ``live=False``); :meth:`own_choices` ranks the
    problem's own recorded list instead, standing in for cuDNN's live list of the problem (``queried`` counts
    them). Predicted times are those of the list ranked last for the problem, as the runtime's are."""

    def __init__(self, sel, reference=None):
        super().__init__(sel, reference)
        self._lists: dict = {}
        self.queried = 0

    def choose(self, problem, max_workspace_bytes=None, deterministic=False, top_k=1, live=False):
        from algosel.learn.selector import offline_rows

        catalogue = self._reference or self._sel.catalogue
        key = catalogue.nearest(problem)
        listed = [] if key is None else [dict(r, workspace_bytes=-1) for r in catalogue.rows(key)
                                         if r["space"] in self._sel._listed]  # fmt: skip
        return self._ranked(problem, listed + offline_rows(problem, self._sel.spaces), max_workspace_bytes, top_k)

    def own_choices(self, problem, k, max_workspace_bytes=None):
        self.queried += 1
        return self._ranked(problem, self._sel.candidates_for(problem)[0], max_workspace_bytes, k)

    def _ranked(self, problem, rows, max_workspace_bytes, k):
        self._lists[problem] = rows
        return self._sel.rank_rows(problem, rows, max_workspace_bytes)[:k]

    def predicted_time_ms(self, problem, candidate_ids):
        return self._sel.predicted_time_ms(problem, candidate_ids, rows=self._lists[problem])


class Predicting(Unrecorded):
    """... with stand-in predicted times: the candidates of space ``faster`` (e.g. ``"cudnn"``, or a prefix of their
    ids such as ``"cudnn:eng45"``) ten times faster
    than PyTorch's default, everything else as fast as it (``faster=None``: nothing pays for leaving PyTorch's path,
    so every convolution passes through)."""

    def __init__(self, sel, faster: str | None = None):
        super().__init__(sel)
        self._faster = faster

    def predicted_time_ms(self, problem, candidate_ids):
        # a space ("cudnn") or a prefix of candidate ids within one ("cudnn:eng45": that engine's configs)
        prefix = None if not self._faster else self._faster if ":" in self._faster else self._faster + ":"
        return {c: 0.1 if prefix and c.startswith(prefix) else 1.0 for c in candidate_ids}

    def host_us(self, problem, candidate_ids):
        return {}  # the route measured is the one asked for, whatever the records say of its host cost
