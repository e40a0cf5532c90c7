"""N×2 multiplication with coupled position IDs (docs/multiplication.md): a hand-set 3-layer
transformer that multiplies an N-digit number by a number below 100, N ≤ 2^⌊(d−25)/4⌋ − 6.

* :mod:`.layout`: residual basis, position code, capacity; :mod:`.heads`: one function per head/MLP;
* :mod:`.model`: ``build_model``, ``multiply``; :mod:`.cli`: ``python -m constructions.multiplication``;
* :mod:`.certify`: ``python -m constructions.multiplication.certify {bound,margins}``, the length bound
  derived from the layout and the all-inputs certificate in exact real arithmetic.
"""
from .model import *  # noqa: F401,F403
from .model import __all__  # noqa: F401
