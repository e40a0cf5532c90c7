"""Proofs, not samples, about the N×2 multiplication transformer (docs/multiplication.md, "Certificate").

* :mod:`.bound`: n_max(d) = 2^⌊(d−25)/4⌋ − 6 derived from the construction's layout.
* :mod:`.margins`: the all-inputs certificate at operand length N in exact real arithmetic, built from
  :mod:`.weights` (the weights and the format), :mod:`.attention` (layers 1 and 2, one head at a time)
  and :mod:`.mlp` (the product MLP and the digit MLP over their finite domains); :mod:`.search` finds
  the smallest certified sharpness M; :mod:`.cli` is ``python -m constructions.multiplication.certify``.
"""
