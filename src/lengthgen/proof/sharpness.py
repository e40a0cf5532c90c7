"""The smallest attention sharpness M at which a certificate still holds (docs/certificate.md, "Searches").

A construction's attention is as sharp as its query/key scale M; the leak falls like e^{−2M}, so a
certificate passes above some M* and fails below. :func:`bracket_smallest` brackets M* for any
certificate function (one per construction: Theorem 5.1's addition, copy/reverse, N×2
multiplication). The M it returns is one that was *certified*, never an interpolated value.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["SharpnessSearch", "bracket_smallest"]


@dataclass
class SharpnessSearch:
    """Result of :func:`smallest_sharpness`: the certificate holds at ``M`` and fails at ``M_fail``
    (``M − M_fail ≤ rel_tol·M``); ``fail_reason`` is the failing certificate's reason."""

    M: float | None
    M_fail: float
    fail_reason: str
    certificate: Certificate | Any | None
    steps: int
    rel_tol: float

    def summary(self, n: int, arithmetic: str) -> str:
        """The report line of every construction's ``certify margins``: M*, the failing M and the cost."""
        if self.M is None:
            return f"smallest M: none found up to M = {self.M_fail:.4g}"
        fail = f"M = {self.M_fail:.5g} fails ({self.fail_reason})" if self.fail_reason else "no failing M found"
        return (f"smallest M certified at N = {n} ({arithmetic}): M* = {self.M:.5g} ({fail}; {self.steps} certificates, "
                f"bracket {100 * self.rel_tol:.2g}%)")


def bracket_smallest(certify_at: Callable[[float], Any], M_start: float, rel_tol: float = 5e-3,
                     max_steps: int = 24) -> SharpnessSearch:
    """Bracket the smallest M at which ``certify_at(M)`` (a certificate with ``passed``, ``slack`` =
    margin / requirement of the binding check, and ``reason``) passes: [M_fail, M] with M certified.

    Steps use the secant root of ln(slack) in M (≈ linear in ln because the leak falls like
    e^{−2M}) and probe just above and below it; when that fails to shrink the bracket they fall
    back to bisection. Any certificate with that interface can use it (constructions.copying.certify)."""
    steps = 0

    def run(M: float) -> Any:
        nonlocal steps
        steps += 1
        return certify_at(M)

    hi, c_hi = float(M_start), run(float(M_start))
    while not c_hi.passed:
        if steps >= 6:
            return SharpnessSearch(None, hi, c_hi.reason, None, steps, rel_tol)
        hi *= 2
        c_hi = run(hi)
    lo, c_lo = 0.0, None
    guess = hi - 0.6 * math.log(max(c_hi.slack, 1.0)) if math.isfinite(c_hi.slack) else 0.5 * hi
    while c_lo is None and steps < max_steps:  # find a failing M below hi
        guess = min(max(guess, 0.05 * hi), 0.999 * hi)
        c = run(guess)
        if c.passed:
            hi, c_hi = guess, c
            guess = hi - max(0.6 * math.log(max(c.slack, 1.0)), 0.1 * hi)
        else:
            lo, c_lo = guess, c
    while hi - lo > rel_tol * hi and steps < max_steps:
        x = 0.5 * (lo + hi)
        f_lo = math.log(c_lo.slack) if c_lo is not None and c_lo.slack > 0 else -math.inf
        f_hi = math.log(c_hi.slack) if math.isfinite(c_hi.slack) else math.inf
        if math.isfinite(f_lo) and math.isfinite(f_hi) and f_hi > f_lo:
            x = lo + (hi - lo) * (0 - f_lo) / (f_hi - f_lo)
        probes = [x * (1 + rel_tol / 3), x * (1 - rel_tol / 3)] if hi - lo > 4 * rel_tol * hi else [0.5 * (lo + hi)]
        shrunk = False
        for p in probes:
            if not lo < p < hi:
                continue
            c = run(p)
            shrunk = True
            if c.passed:
                hi, c_hi = p, c
            else:
                lo, c_lo = p, c
                break
        if not shrunk:
            c = run(0.5 * (lo + hi))
            if c.passed:
                hi, c_hi = 0.5 * (lo + hi), c
            else:
                lo, c_lo = 0.5 * (lo + hi), c
    return SharpnessSearch(hi, lo, c_lo.reason if c_lo is not None else "", c_hi, steps, rel_tol)
