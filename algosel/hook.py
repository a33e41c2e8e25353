"""``import algosel.hook``: the runtime hook's public switches (the implementation is :mod:`algosel.runtime.hook`)."""

from algosel.runtime.hook import Executor, conv2d, disable, enable, enabled, patch_model, reset_stats, stats

__all__ = ["Executor", "conv2d", "disable", "enable", "enabled", "patch_model", "reset_stats", "stats"]
