"""Proof machinery shared by every certificate in the project.

* :mod:`.interval`: sound interval arithmetic over float64 arrays (:class:`~.interval.Iv`);
* :mod:`.rounding`: the floating-point rounding model and its bounds for a 1-layer forward pass;
* :mod:`.keys`: position keys and position scores of one attention head, with the bound on the
  softmax mass of every ID but the attended one;
* :mod:`.attention`: per answer position of a coupled format, the leak and the spread of one head;
* :mod:`.weights`: exact float64 copies of a model's parameters and :class:`~.weights.StructureError`;
* :mod:`.sharpness`: the smallest attention sharpness at which a certificate still holds;
* :mod:`.layers`: interval exp, reciprocal, LayerNorm, GELU and exact-matrix affine maps;
* :mod:`.trained_tables`, :mod:`.trained`, :mod:`.counterexamples`: the certificate for any 1-layer
  coupled addition checkpoint (``python -m lengthgen.certify``; docs/certificate.md, "Trained models").

Nothing here knows any one construction; the constructions' certificates (``constructions.*.certify``)
build on it (docs/certificate.md).
"""
