"""Text report of the margins certificate (``python -m constructions.addition.certify margins``)."""
from __future__ import annotations

from .margins import Certificate
from .search import SharpnessSearch


def _fmt(x: float) -> str:
    return f"{x:.3g}" if x != 0 else "0"


def margins_lines(cert: Certificate, meta: dict, search: SharpnessSearch | None, elapsed: float) -> list[str]:
    """Every bound and margin of ``cert`` (and the smallest-M search), one fact per line."""
    n, dt = cert.n, cert.dtype
    out = [
        f"Theorem 5.1 construction: N = {n} digits, d_model = {cert.d_model} (P = {cert.P}), M = {meta['M']:.6g}, "
        f"{'real arithmetic (float64 weights)' if dt == 'real' else dt}, position IDs from s = 2",
    ]
    if cert.reason in ("structure", "hardmax") or not cert.classes:
        out.append(f"FAIL ({cert.reason}): {cert.message}")
        return out
    configs = sum(c[2] for c in cert.classes)
    positions = sum(c[1] for c in cert.classes)
    out += [
        f"covers every input of length N (10^{2 * n} operand pairs) at all {positions} answer positions: "
        f"{len(cert.classes)} classes, {configs} local configurations",
        "attention (scores α·κ read from W_E, W_pos, W_Q, W_K, biases; keys at other IDs bounded by ∏_e (1 + G_e) − 1, "
        "for the hypercube code Σ_h C(P,h)·e^(−2M·h) over Hamming distance h; worst query per head):",
    ]
    for h, info in enumerate(cert.heads):
        sizes = ", ".join(map(str, info["sizes"]))
        out.append(
            f"  head {h + 1}: |S| ∈ {{{sizes}}}; score gap to other keys ≥ {info['gap']:.4g}; "
            f"leak λ ≤ {_fmt(info['leak'])}; score spread in S η ≤ {_fmt(info['eta'])}; "
            f"TV to uniform on S ≤ {_fmt(info['tv'])}")
    out.append(f"  every bound above and below is the upper end of an interval enclosure (outward-rounded float64, "
               f"mpmath for exp/log), computed for all {positions} answer positions, not a float64 estimate")
    if cert.float_terms is not None and dt != "real":
        out.append(f"{dt} term:")
        out += [f"  {line}" for line in cert.float_terms.describe()]
    out.append("feed-forward inputs, |Δ| ≤ leak + spread + float (worst class), through W_V, W_O:")
    for name, parts in cert.deltas.items():
        total = sum(parts.values())
        detail = ", ".join(f"{k} {_fmt(v)}" for k, v in parts.items())
        out.append(f"  {name:<10} ≤ {_fmt(total):<9} ({detail})")
    out.append("FFN decision margins (from W_in, b_in, W_out, b_out, W_U; hard-max limit right in every configuration):")
    for desc, count, n_cfg, check in cert.classes:
        out.append(f"  class of {desc}  [{count} positions, {n_cfg} configurations]")
        out.append(f"      binding: {check.where}; needs {_fmt(sum(check.parts.values()))} -> slack ×{check.slack:.3g}")
    if search is not None:
        out.append(search.summary(n, dt))
    verdict = "PASS" if cert.passed else f"FAIL ({cert.reason})"
    out.append(f"{verdict} ({'real arithmetic' if dt == 'real' else dt}): "
               + ("every " + f"{n}-digit addition is predicted correctly at every answer position" if cert.passed
                  else cert.message) + f"   [{elapsed:.1f} s]")
    return out
