"""Certificates for compiled RASP programs: proofs, from the weights, that a compiled transformer
computes its program on every input up to ``max_seq_len`` (docs/turing-programs.md,
"Certifying a compiled program").

``certify(compile_to_transformer(program, vocab, n))`` returns a :class:`Certificate`;
``python -m rasp.certify --program lib:NAME --max-seq-len N`` prints one.
"""
from rasp.certify.run import PREMISE, Certificate, CertifyError, certify

__all__ = ["Certificate", "CertifyError", "PREMISE", "certify"]
