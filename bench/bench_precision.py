"""Timings of the Theorem 5.1 certificates (prints figures; no assertions).

    python bench/bench_precision.py                      # certify at 10^3, 10^4, 10^5 digits
    python bench/bench_precision.py --digits 1000 30000 --dtype float64

For each N: time to build the model, one margins certificate (with the mpmath interval
re-derivation), and the smallest-M search; the certificate's slack and M*.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO)]

from constructions.addition import build_model  # noqa: E402
from constructions.addition.certify.margins import certify  # noqa: E402
from constructions.addition.certify.search import smallest_sharpness  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--digits", type=int, nargs="+", default=[1000, 10_000, 100_000])
    p.add_argument("--dtype", default="float32")
    args = p.parse_args()
    print(f"{'N':>8} {'build s':>8} {'certify s':>10} {'search s':>9} {'slack':>7} {'M':>7} {'M*':>7}")
    for n in args.digits:
        t0 = time.perf_counter()
        model, meta = build_model(n_digits=n, dtype=args.dtype)
        t1 = time.perf_counter()
        cache: dict = {}
        cert = certify(model, n, args.dtype, cache=cache)
        t2 = time.perf_counter()
        search = smallest_sharpness(model, n, meta["M"], args.dtype, cache=cache)
        t3 = time.perf_counter()
        m_star = f"{search.M:.4g}" if search.M else "-"
        print(f"{n:>8} {t1 - t0:>8.2f} {t2 - t1:>10.2f} {t3 - t2:>9.2f} {cert.slack:>7.3g} {meta['M']:>7.4g} {m_star:>7}")


if __name__ == "__main__":
    main()
