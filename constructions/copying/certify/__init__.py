"""Proofs, not samples, about the copy/reverse construction (docs/copying.md, "Certificate").

* :mod:`.bound`: n_max(d) derived from the construction's layout.
* :mod:`.margins`: the all-inputs certificate at input length N (with :mod:`.layout`), and the
  smallest-M search (:mod:`.search`); both reuse the addition certificate's attention bounds,
  interval arithmetic and rounding model (constructions.addition.certify, docs/certificate.md).
* :mod:`.cli`: ``python -m constructions.copying.certify {bound,margins}``.
"""
