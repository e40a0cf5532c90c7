"""The constants the certificate docs promise (docs/certificate.md, "What the tests pin";
docs/copying.md, "The argument"), asserted as literals, with the docs' wording checked to match."""
from __future__ import annotations

from pathlib import Path

import pytest

from constructions.addition.certify import ffn
from constructions.copying.certify import margins as copying_margins
from lengthgen import decode
from lengthgen.proof import interval, keys, rounding

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _text(name: str) -> str:
    return " ".join((DOCS / name).read_text().split())  # line breaks as spaces


def test_rounding_model_constants() -> None:
    assert rounding.FLOAT_TERM_INFLATION == 1 + 2.0**-20
    assert rounding.EXP_ULPS == 2.0 and rounding.RESCALES == 4 and rounding.MAX_CHAIN == 2**31
    assert rounding.UNIT_ROUNDOFF == {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
    doc = _text("certificate.md")
    for phrase in ("`FLOAT_TERM_INFLATION = 1 + 2^-20`", "exp is accurate to 2 ulp", "at most 4 times, each within 3u",
                   "For K < 2^31", "(2^-53 float64, 2^-24 float32, 2^-11 float16, 2^-8 bfloat16)"):
        assert phrase in doc, phrase


def test_the_softmax_term_uses_the_promised_constants() -> None:
    """(F3) + (F2): each attention weight is within (EXP_ULPS + 1 division + 3u per rescale·RESCALES
    + (k + 1) for the normalizer)·u, i.e. 18u for |S| ≤ 2, times the inflation."""
    from constructions.copying import build_model
    from constructions.copying.certify.margins import certify

    model, _ = build_model("copy", n_digits=6, dtype="float32")
    cert = certify(model, "copy", 6, "float32")
    assert max(max(h["sizes"]) for h in cert.heads) == 2
    assert cert.float_terms.softmax_rel == pytest.approx(18 * 2.0**-24, rel=2.0**-19)


def test_interval_and_key_constants() -> None:
    assert interval.U64 == 2.0**-53 and interval.TINY == 2.0**-1074 and interval.MP_BITS == 113
    assert keys.MAX_CODE_VALUES == 16
    doc = _text("certificate.md")
    assert "at 113 bits" in doc and "u = 2^-53" in doc and "at most 16 values" in doc


def test_enumeration_limits() -> None:
    assert ffn.MAX_LOCAL_SIGNIFICANCES == 2 and copying_margins.MAX_FREE_DIGITS == 3
    assert 100**ffn.MAX_LOCAL_SIGNIFICANCES * 2 == 20_000  # two significances of a and b, and a carry bit
    assert "up to 20 000" in _text("certificate.md")
    assert "at most 3 free digits (1000 assignments)" in _text("copying.md")


def test_decision_margin() -> None:
    assert decode.DECISION_MARGIN == 1e-3
    assert "`DECISION_MARGIN` (10⁻³)" in _text("training.md")
    assert "`lengthgen.decode.DECISION_MARGIN` (10⁻³" in _text("certificate.md")
