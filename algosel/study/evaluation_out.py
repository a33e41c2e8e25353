"""The old name of :mod:`algosel.study.evaluation_files`; ``algosel evaluate``'s command line still imports
:func:`check_out` from here (it moves to the new name with the command line's own split)."""

from algosel.study.evaluation_files import check_out

__all__ = ["check_out"]
