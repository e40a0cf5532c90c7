"""Text report of the multiplication margins certificate (``python -m constructions.multiplication.certify margins``)."""
from __future__ import annotations

from .margins import Certificate
from .search import SharpnessSearch

NOT_COVERED = ("exact real arithmetic on the weights the model holds; float rounding of a forward pass is NOT "
               "covered (no rounding certificate exists for this construction)")


def _fmt(x: float) -> str:
    return f"{x:.3g}" if x != 0 else "0"


def _var(v: tuple[str, int]) -> str:
    return f"b_{v[1]}" if v[0] == "b" else f"{v[0]}_i" if v[1] == 0 else f"{v[0]}_(i{v[1]:+d})"


def margins_lines(cert: Certificate, meta: dict, search: SharpnessSearch | None, elapsed: float) -> list[str]:
    """Every bound and margin of ``cert`` (and the smallest-M search), one fact per line."""
    n = cert.n
    out = [f"N×2 multiplication construction: N = {n} digits, d_model = {meta['d_model']} (P = {meta['P']}), "
           f"M = {meta['M']:.6g}, {meta['dtype']} weights, position IDs from s = 2",
           f"arithmetic: {NOT_COVERED}"]
    if cert.reason in ("structure", "hardmax") or not cert.classes:
        out.append(f"FAIL ({cert.reason}): {cert.message}   [{elapsed:.1f} s]")
        return out
    positions = sum(c[1] for c in cert.classes)
    configs = sum(c[2] for c in cert.classes)
    out += [
        f"covers every input with an N-digit a and b ≤ 99 (10^{n}·100 pairs, leading zeros included) at all {positions} "
        f"answer positions: {len(cert.classes)} classes, {configs} local configurations (carries κ ∈ "
        f"[{cert.carries[0]}, {cert.carries[1]}], the closure reachable in N×2 multiplication)",
        "attention (scores from W_E, W_pos, W_Q, W_K, biases and what layer 1 wrote; IDs other than the attended one "
        "bounded by ∏_e (1 + G_e) − 1; worst query per head):",
    ]
    for info in cert.heads:
        kind = "content only" if info["position_free"] else "selects an ID"
        out.append(f"  {info['name']} ({kind}): |S| ∈ {{{', '.join(map(str, info['sizes']))}}}; score gap to other keys "
                   f"≥ {info['gap']:.4g}; leak λ ≤ {_fmt(info['leak'])}; spread η ≤ {_fmt(info['eta'])}; "
                   f"TV to uniform on S ≤ {_fmt(info['tv'])}")
    out.append("deviations from the hard-max limit, |residual − hard-max residual| (Δ₁ = Σ TV₁·range of each flag; "
               "layer 2: key classes widened by Δ₁, then TV₂·(range + 2·shift) + shift; ρ adds |W_out|ᵀ|W_in|ᵀ(Δ₁ + Δ₂) "
               "for the product MLP):")
    for title, bounds in (("after layer 1, every position (Δ₁)", cert.delta1),
                          ("after layer-2 attention, answer positions (Δ₁ + Δ₂)", cert.deltas),
                          ("after the layer-2 MLP, what layer 3 and the readout read (ρ)", cert.rho)):
        shown = {name: value for name, value in bounds.items() if value > 0}
        out.append(f"  {title}: " + ("; ".join(f"|Δ {name}| ≤ {_fmt(v)}" for name, v in shown.items()) or "0"))
    units = "; ".join(f"{k} units read {', '.join(_var(v) for v in key) or 'no digit'}" for key, k in cert.mlp2)
    out.append(f"layer-2 MLP, evaluated at every assignment of the digits each group of units reads (class with the most "
               f"digits: {units})")
    out.append("layer-3 MLP and readout (per class: the binding check; slack = margin / what the deviations need):")
    for desc, count, n_cfg, n_groups, res in cert.classes:
        out.append(f"  class {desc}  [{count} positions, {n_cfg} configurations in {n_groups} boxes]")
        out.append(f"      logit margin {_fmt(res.margin)} vs ≤ {_fmt(res.need)} lost; layer-3 units stay "
                   f"≥ {_fmt(res.reserve)} from 0 vs ≤ {_fmt(res.deviation)} moved -> slack ×{res.slack:.3g}")
    out.append("  every bound is the upper end of an interval enclosure (outward-rounded float64, mpmath for exp/log)")
    if search is not None:
        out.append(search.summary(n, "real"))
    verdict = "PASS" if cert.passed else f"FAIL ({cert.reason})"
    out.append(f"{verdict} (real arithmetic): " + (f"every product of a {n}-digit a with b ≤ 99 is predicted correctly at "
                                                   "every answer position" if cert.passed else cert.message)
               + f"   [{elapsed:.1f} s]")
    return out
