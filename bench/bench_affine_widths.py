"""Width of the enclosures stage by stage: plain intervals against the affine tail (docs/certificate.md,
"Trained models": the paragraph on what stands in the way).

    nice -n 10 python bench/bench_affine_widths.py --checkpoint addition_coupled_1l2h_packed --digits 5 --positions 2 3

Per answer position, on up to ``--configs`` local configurations (every ``len/configs``-th): the
largest λ⁺ and the median over configurations of the mean radius per coordinate after attention,
after LN2, of the MLP's hidden units, after the MLP (residual added), after the final LN, and of
the logit differences, for the plain interval pass and for the affine tail; then how many of those
configurations each proves and the seconds per configuration.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from lengthgen.proof import affine as A
from lengthgen.proof.interval import Iv
from lengthgen.proof.layers import affine_exact, gelu
from lengthgen.proof.trained import Layout, PositionCertifier
from lengthgen.proof.trained_affine import attention_form, tail_forms
from lengthgen.proof.trained_tables import LN_EPS, OneLayer, Tables
from lengthgen.runs import RunError, load_checkpoint
from lengthgen.tasks import ADDITION

STAGES = ("attention", "ln2", "hidden", "mlp", "ln_final", "logit diff")


def rad(x: Iv) -> float:
    return float(np.median(np.mean((x.hi - x.lo) / 2, axis=-1)))


def position(cert: PositionCertifier, r: int, configs: int) -> dict:
    w = cert.w
    p = cert.inputs(r, sample=configs)
    qid, a, tq, target, slots, heads = p.qid, p.a, p.query_tok, p.target, p.slots, p.heads
    resid = cert.t.resid[:, qid][tq]
    t0 = time.perf_counter()
    x = resid + w.b_O
    lam = 0.0
    for k in heads:
        out, share = cert._head(k, slots, tq)
        x, lam = x + out, max(lam, float(share.max()))
    y = w.norm("ln2", x)
    hidden = affine_exact(y, w.W_in, w.b_in)
    hidden = gelu(hidden) if w.act == "gelu" else hidden.relu()
    post = x + affine_exact(hidden, w.W_out, w.b_out)
    fin = w.norm("ln_final", post)
    diff = cert._differences(fin, target)
    plain = [rad(s) for s in (x, y, hidden, post, fin, diff)]
    t1 = time.perf_counter()
    aff, adiff = [], []
    for s in range(0, len(a), 64):
        g = slice(s, s + 64)
        form = attention_form(cert, heads, [(tok[g], pid) for tok, pid in slots], tq[g], resid[g])
        forms = [form] + [f for _, f in tail_forms(w, form)]
        fin_form = A.apply_ln(forms[-1], w.ln_final, LN_EPS)
        aff.append([[np.mean(f.radius(), axis=-1)] for f in forms + [fin_form]])
        adiff.append(A.differences(forms[-1], w.ln_final, LN_EPS, w.W_U, w.b_U, target[g]))
    t2 = time.perf_counter()
    affine = [float(np.median(np.concatenate([row[i][0] for row in aff]))) for i in range(5)]
    adiff = Iv(np.concatenate([d.lo for d in adiff]), np.concatenate([d.hi for d in adiff]))
    affine.append(rad(adiff))

    def proven(d: Iv) -> int:
        low = d.lo.copy()
        low[np.arange(len(low)), target] = np.inf
        return int(np.sum(low.min(axis=1) > cert.margin))

    return {"r": r, "window": p.window, "lam": lam, "plain": plain, "affine": affine, "n": len(a),
            "proven_plain": proven(diff), "proven_affine": proven(adiff),
            "s_plain": (t1 - t0) / len(a), "s_affine": (t2 - t1) / len(a)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default="addition_coupled_1l2h_packed",
                   help="a name under checkpoints/, or a run directory or weight file")
    p.add_argument("--digits", type=int, default=5)
    p.add_argument("--positions", type=int, nargs="*")
    p.add_argument("--configs", type=int, default=256)
    args = p.parse_args()
    torch.set_num_threads(1)
    spec = args.checkpoint if Path(args.checkpoint).exists() else f"checkpoints/{args.checkpoint}"
    try:
        model, _, _ = load_checkpoint(spec, args.digits)
    except RunError as exc:
        raise SystemExit(f"bench_affine_widths.py: {exc}") from None
    w = OneLayer.from_model(model)
    lay = Layout(args.digits, 2, ADDITION.EOS, ADDITION.PLUS, ADDITION.EQUALS)
    cert = PositionCertifier(w, Tables.build(w), lay)
    print(f"{args.checkpoint}, N = {args.digits}: median over configurations of the mean radius per coordinate")
    print("| position | λ⁺ | pass | " + " | ".join(STAGES) + " | proven | s/config |")
    for r in args.positions if args.positions else range(args.digits + 2):
        out = position(cert, r, args.configs)
        for kind in ("plain", "affine"):
            cells = " | ".join(f"{v:.3g}" for v in out[kind])
            print(f"| {r} | {out['lam']:.3g} | {kind} | {cells} | {out['proven_' + kind]}/{out['n']} | "
                  f"{out['s_' + kind]:.3g} |", flush=True)


if __name__ == "__main__":
    main()
