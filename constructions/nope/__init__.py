"""Proposition 5.2 of *Position Coupling*: no 1-layer transformer without positional information
adds (docs/proposition-5-2.md). For any model handed in, a search returns a concrete, re-checkable
counterexample: two prompts that the model cannot tell apart but whose answers differ.

* :mod:`.search`: ``find_counterexample`` and ``search``.
* :mod:`.certificate`: the certificate, and its check from scratch.
* :mod:`.symbolic`: the argument in sympy on a tiny model (``python -m constructions.nope.symbolic``).
* :mod:`.cli`: ``python -m constructions.nope``.
"""
from .search import *  # noqa: F401,F403
from .search import __all__  # noqa: F401
