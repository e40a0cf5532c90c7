"""The softmax-leak error budget of the N×2 multiplication construction (docs/multiplication.md),
carried over from Theorem 5.1's argument: a hypercube code makes every unwanted key score at
least 2M below the wanted ones, so softmax leaks at most N·e^{−2M}; here the leak is followed
through the segment flags, the operand heads, the product units and the digit steps.

Exact-real-arithmetic bound; float rounding is not covered (as for the addition certificate).
"""
from __future__ import annotations

import math

from .heads import MUL_SCALE, STEP_EDGES

T_MARGIN = STEP_EDGES[0] - 9  # T − 100K ∈ [−17, 9]; the step edges sit at 100K + 45 .. + 47
EOS_MARGIN = 0.2  # EOS_PRE ∈ {−1/2, 0, 1/2}; the ramp runs over 0.2 .. 0.3


def error_budget(M: float, n_tokens: int) -> dict[str, float]:
    """Worst-case deviations for a sequence of ``n_tokens`` tokens at sharpness ``M``.

    * layer 1: each flag (values in [0, 1]; all scores exact) is off by at most δ₁ = N·e^{−2M};
    * layer 2: a key's type feature is off by ≤ 4δ₁ (b-heads: SEEN_STAR + NEXT_SEP − 2·SEEN_EQ),
      times 4M: every score moves by ≤ s = 16Mδ₁. Unwanted keys then score ≤ 2M − 2s below the
      wanted ones (leak δ₂ ≤ N·e^{−2M+2s}) and the wanted ones differ by ≤ 2s, so the weights are
      within total variation η ≤ 2δ₂ + 2(e^{2s} − 1) of the ideal uniform ones;
    * values: |ΔB| ≤ 9η; |ΔA| ≤ 2·(100 + 10 + 1)·9η; |ΔEOS_PRE| ≤ 2η;
    * products: each of the 9 unit pairs is 1-Lipschitz in A and 2·1000-Lipschitz in b, so
      |ΔPROD| ≤ Σ_{both products} 9·(|ΔA| + 2000·|ΔB|) = |ΔT|.
    The answer is exact when |ΔT| < 36 and |ΔEOS_PRE| < 0.2 (``certified``)."""
    delta1 = n_tokens * math.exp(-2 * M)
    s = 16 * M * delta1
    delta2 = n_tokens * math.exp(-2 * M + 2 * s)
    eta = 2 * delta2 + 2 * math.expm1(2 * s)
    dB, dA, dEOS = 9 * eta, 2 * 111 * 9 * eta, 2 * eta
    dT = 2 * 9 * (dA + 2 * MUL_SCALE * dB)
    return {"delta1": delta1, "score_shift": s, "delta2": delta2, "eta": eta, "dT": dT, "dEOS": dEOS,
            "certified": float(dT < T_MARGIN and dEOS < EOS_MARGIN)}
