"""Proofs, not samples, about Theorem 5.1's addition transformer (docs/certificate.md).

* :mod:`.bound`: n_max(d) derived from the construction's layout.
* :mod:`.margins`: the all-inputs certificate at operand length N (with :mod:`.ffn`,
  :mod:`.interval`, :mod:`.rounding`), its report (:mod:`.report`) and the smallest-M search (:mod:`.search`).
* :mod:`.exact`: the construction in exact rational arithmetic with hard-max attention.
* :mod:`.precision`: the largest exact operand length per float format and width, and its figure.
* :mod:`.cli`: ``python -m constructions.addition.certify {bound,margins,exact,precision}``.
"""
