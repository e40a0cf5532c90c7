"""Timings of the Theorem 5.1 certificates (prints figures; no assertions).

    python bench/bench_precision.py                      # certify at 10^3, 10^4, 10^5 digits
    python bench/bench_precision.py --digits 1000 30000 --dtype float64

For each N: time to build the model, one margins certificate (every bound an interval enclosure,
docs/certificate.md), and the smallest-M search; wall-clock and process CPU seconds (on a shared
machine the CPU seconds are the comparable number); the certificate's slack and M*.
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
    print(f"{'N':>8} {'build s':>8} {'certify s':>10} {'cpu s':>7} {'search s':>9} {'cpu s':>7} {'slack':>7} {'M':>7} {'M*':>7}")
    for n in args.digits:
        t0 = time.perf_counter()
        model, meta = build_model(n_digits=n, dtype=args.dtype)
        t1, c1 = time.perf_counter(), time.process_time()
        cache: dict = {}
        cert = certify(model, n, args.dtype, cache=cache)
        t2, c2 = time.perf_counter(), time.process_time()
        search = smallest_sharpness(model, n, meta["M"], args.dtype, cache=cache)
        t3, c3 = time.perf_counter(), time.process_time()
        m_star = f"{search.M:.4g}" if search.M else "-"
        print(f"{n:>8} {t1 - t0:>8.2f} {t2 - t1:>10.2f} {c2 - c1:>7.2f} {t3 - t2:>9.2f} {c3 - c2:>7.2f} {cert.slack:>7.3g} "
              f"{meta['M']:>7.4g} {m_star:>7}")


if __name__ == "__main__":
    main()
