"""Data shipped inside the package: the trained selectors and the network suites.

They are found through the installed package (:mod:`importlib.resources`), so a plain ``pip install`` (not
editable) runs ``algosel predict`` and the hook. In a source checkout, ``models/`` and ``data/suites/`` link to
``algosel/shipped/``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def shipped_path(*parts: str) -> Path:
    """A path under the package's ``shipped/`` folder (``shipped_path("models")``, ``shipped_path("suites")``)."""
    return Path(str(resources.files("algosel").joinpath("shipped", *parts)))
