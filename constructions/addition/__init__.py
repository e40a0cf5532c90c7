"""Theorem 5.1 of *Position Coupling*: a 1-layer, 2-head transformer with coupled position IDs
that adds operands of up to 2^⌊(d−17)/2⌋ − 2 digits (docs/theorem-5-1.md).

* :mod:`constructions.addition.model`: the hand-set weights from a named residual basis,
  ``build_model`` and ``add``.
* :mod:`constructions.addition.cli`: ``python -m constructions.addition``.
* :mod:`constructions.addition.certify`: proofs about the weights (``python -m constructions.addition.certify``).
"""
from .model import *  # noqa: F401,F403
from .model import __all__  # noqa: F401
