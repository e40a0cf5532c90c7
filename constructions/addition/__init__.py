"""Theorem 5.1 of *Position Coupling*: a 1-layer, 2-head transformer with coupled position IDs
that adds operands of up to 2^⌊(d−17)/2⌋ − 2 digits (docs/theorem-5-1.md).

* :mod:`constructions.addition.layout`: the named residual basis and the hypercube position code;
* :mod:`constructions.addition.weights`: every weight, one function per part (embedding, head 1
  "addition without carries", head 2 "carry detection", feed-forward network, readout);
* :mod:`constructions.addition.model`: ``build_model`` (``build_model()`` is the smallest model for
  10-digit operands, as AdderBoard calls it) and ``add``.
* :mod:`constructions.addition.cli`: ``python -m constructions.addition``.
* :mod:`constructions.addition.certify`: proofs about the weights (``python -m constructions.addition.certify``).
"""
from .model import *  # noqa: F401,F403
from .model import __all__  # noqa: F401
