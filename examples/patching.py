"""Head ablation and activation patching with TransformerLens-style hooks, on the Theorem 5.1
construction and on a trained model side by side.

    python examples/patching.py                 # prints the numbers, writes figures/patching.{png,pdf}
    python examples/patching.py --samples 100 --out /tmp/patching.png

Both models are 1-layer, 2-head addition transformers with coupled position IDs (Cho et al. 2024,
§3). The construction names its heads (Theorem 5.1, docs/theorem-5-1.md): head 1 gathers the
next-more-significant operand digits (sum without carry), head 2 gathers the digits of equal
significance and the answer digit, from which the MLP derives the carry (and the end of the answer).
The trained model is ``checkpoints/addition_coupled_1l2h_packed`` (trained on 1–5 digits).

The hooks are the models' own (TransformerLens's names, ``model.run_with_hooks(tokens, pos_ids,
fwd_hooks=...)``, :mod:`lengthgen.hooks`): no conversion, and TransformerLens need not be installed.

1. **Zero ablation.** Each head's output (``blocks.0.attn.hook_z[:, :, h]``) is set to 0; exact
   match (every answer digit and the final ``$`` predicted with a margin, teacher forced) is
   measured per operand length on the same test additions for every condition.
2. **Activation patching.** A *carry run* adds two n-digit numbers with exactly one carry, out of
   column i (no carry chain). Its *carry-free partner* differs only in column i, with another digit
   pair whose sum is the same mod 10 but below 10, so both answers share c_0..c_i and differ from
   c_{i+1} on only by the missing carry. A head's output from the carry-free run is patched into the
   carry run at every position, and we count which answer digits' predictions flip, by their
   offset from column i (offset +1 is c_{i+1}, the digit that receives the carry).
3. **Which column each head reads.** Mean attention from answer token c_i (which predicts
   c_{i+1}) to the operand digits of column i and of column i + 1 (``hook_pattern``). Training
   numbers heads arbitrarily, so this is how the trained heads are matched to the construction's.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from constructions.cli_support import apply_threads
from lengthgen.cli import ArgumentParser, UsageError, run_cli
from lengthgen.data import eval_batch, layout
from lengthgen.decode import decided_argmax

PROG = "python examples/patching.py"
ROOT = Path(__file__).resolve().parents[1]
TRAINED = ROOT / "checkpoints" / "addition_coupled_1l2h_packed"
HOOK_Z = "blocks.0.attn.hook_z"
OFFSETS = range(-2, 4)  # answer digit c_{i+d} relative to the carry column i


def answer_predictions(model, tokens: torch.Tensor, pos: torch.Tensor, n: int, hooks: list) -> torch.Tensor:
    """Teacher-forced predictions of c_0 .. c_n and the final ``$`` ([B, n + 2]; -1 = no margin)."""
    first = 2 * n + 2  # '=' predicts c_0
    with torch.inference_mode():
        logits = model.run_with_hooks(tokens[:, :-1], pos[:, :-1], fwd_hooks=hooks)
    return decided_argmax(logits[:, first:])


def zero_head(head: int) -> tuple[str, Callable]:
    def fn(z: torch.Tensor, hook) -> torch.Tensor:
        z = z.clone()
        z[:, :, head] = 0.0
        return z

    return HOOK_Z, fn


def ablation_table(model, lengths: list[int], samples: int) -> dict[str, list[float]]:
    """Exact match per length with no ablation and with each head zero-ablated."""
    table: dict[str, list[float]] = {"none": [], "head 1": [], "head 2": []}
    for n in lengths:
        tokens, pos, _ = eval_batch(np.random.default_rng([7, n]), samples, n, "coupled").to_torch()
        targets = tokens[:, 2 * n + 3 :]
        for label, hooks in (("none", []), ("head 1", [zero_head(0)]), ("head 2", [zero_head(1)])):
            right = answer_predictions(model, tokens, pos, n, hooks) == targets
            table[label].append(float(right.all(dim=1).double().mean()))
    return table


def split_sum(rng: np.random.Generator, total: int, leading: bool) -> tuple[int, int] | None:
    """Two digits summing to ``total`` (each ≥ 1 for a leading column), or None if impossible."""
    lo, hi = max(1 if leading else 0, total - 9), min(9, total - (1 if leading else 0))
    if lo > hi:
        return None
    x = int(rng.integers(lo, hi + 1))
    return x, total - x


def single_carry_pairs(rng: np.random.Generator, n: int, samples: int) -> tuple[np.ndarray, ...]:
    """Operands (LSB first) whose only carry leaves column i (column i + 1 sums to at most 8, so
    it stops there), and carry-free partners equal but for column i, which sums to 10 less."""
    a, b, a2, b2 = (np.zeros((samples, n), dtype=np.int64) for _ in range(4))
    carry_col = rng.integers(0, n, size=samples)
    for r, i in enumerate(carry_col):
        while True:
            sums = rng.integers(0, 10, size=n)
            sums[i] = rng.integers(10, 19)
            if i + 1 < n:
                sums[i + 1] = rng.integers(0, 9)
            digits = [split_sum(rng, int(t), leading=(j == n - 1 and n > 1)) for j, t in enumerate(sums)]
            partner = split_sum(rng, int(sums[i]) - 10, leading=(i == n - 1 and n > 1))
            if partner is not None and all(d is not None for d in digits):
                break
        a[r], b[r] = np.array(digits).T
        a2[r], b2[r] = a[r], b[r]
        a2[r, i], b2[r, i] = partner
    return a, b, a2, b2, carry_col


def carry_runs(n: int, samples: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
    """``(carry_tokens, free_tokens, pos_ids, carry_column)`` of :func:`single_carry_pairs`, laid
    out with coupled position IDs (the same IDs for both runs of a pair)."""
    rng = np.random.default_rng([seed, n])
    a, b, a2, b2, col = single_carry_pairs(rng, n, samples)
    lengths = np.full(samples, n)
    carry_tok, pos, _ = layout(a, b, lengths, "coupled").to_torch()
    free_tok, pos2, _ = layout(a2, b2, lengths, "coupled").to_torch()
    assert torch.equal(pos, pos2)
    return carry_tok, free_tok, pos, col


def flip_rates(base: torch.Tensor, patched: torch.Tensor, col: np.ndarray, free_tok: torch.Tensor, n: int) -> np.ndarray:
    """Flip rate of each answer offset (OFFSETS) between two prediction tables ``[B, n + 2]``, and
    the fraction of c_{i+1} flips that land on the carry-free digit."""
    samples = len(col)
    flipped = (patched != base).numpy()
    rates = []
    for d in OFFSETS:
        j = col + d  # answer index j: c_j (j = n + 1 is the final '$')
        ok = (j >= 0) & (j <= n + 1)
        rates.append(flipped[np.nonzero(ok)[0], j[ok]].mean() if ok.any() else np.nan)
    j1 = col + 1
    free_digit = free_tok[:, 2 * n + 3 :].numpy()[np.arange(samples), j1]
    hits = flipped[np.arange(samples), j1]
    to_free = (patched.numpy()[np.arange(samples), j1] == free_digit)[hits].mean() if hits.any() else np.nan
    return np.array(rates + [to_free])


def patch_flips(model, n: int, samples: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Per patched head: :func:`flip_rates` of the carry run with that head's ``hook_z`` taken
    from the carry-free run."""
    carry_tok, free_tok, pos, col = carry_runs(n, samples, seed)
    with torch.inference_mode():
        _, free_cache = model.run_with_cache(free_tok[:, :-1], pos[:, :-1], names_filter=HOOK_Z, return_cache_object=False)
    base = answer_predictions(model, carry_tok, pos, n, [])
    out = {}
    for head in (0, 1):
        def patch(z: torch.Tensor, hook, head=head) -> torch.Tensor:
            z = z.clone()
            z[:, :, head] = free_cache[HOOK_Z][:, :, head]
            return z

        patched = answer_predictions(model, carry_tok, pos, n, [(HOOK_Z, patch)])
        out[f"head {head + 1}"] = flip_rates(base, patched, col, free_tok, n)
    return out


def attention_roles(model, n: int, samples: int) -> dict[str, tuple[float, float]]:
    """Per head: mean attention from answer token c_i (which predicts c_{i+1}) to the operand
    digits of column i (a_i, b_i) and of column i + 1 (a_{i+1}, b_{i+1}), i = 0 .. n-2; empty for
    n = 1, which has no column i + 1."""
    if n < 2:
        return {}
    tokens, pos, _ = eval_batch(np.random.default_rng([8, n]), samples, n, "coupled").to_torch()
    name = "blocks.0.attn.hook_pattern"
    with torch.inference_mode():
        _, cache = model.run_with_cache(tokens[:, :-1], pos[:, :-1], names_filter=name, return_cache_object=False)
    pattern = cache[name].double().mean(0)  # [head, query, key]
    i = torch.arange(n - 1)
    query = 2 * n + 3 + i  # c_i; a_j sits at index n - j, b_j at 2n + 1 - j
    roles = {}
    for h in range(pattern.shape[0]):
        col_i = pattern[h, query, n - i] + pattern[h, query, 2 * n + 1 - i]
        col_next = pattern[h, query, n - i - 1] + pattern[h, query, 2 * n - i]
        roles[f"head {h + 1}"] = (float(col_i.mean()), float(col_next.mean()))
    return roles


def load_models(max_digits: int) -> dict[str, object]:
    from constructions.addition import build_model
    from lengthgen.runs import load_trained

    construction, _ = build_model(n_digits=max_digits, dtype="float64")
    trained, _, _ = load_trained(TRAINED)
    return {"Theorem 5.1 construction": construction, "trained (coupled, packed, 1-5 digits)": trained}


def head_label(res: dict, label: str) -> str:
    """``head 1 (reads col. i 3%, i+1 95%)``; just ``head 1`` where the roles were not measured (n = 1)."""
    if label not in res["roles"]:
        return label
    same, nxt = res["roles"][label]
    return f"{label} (reads col. i {100 * same:.0f}%, i+1 {100 * nxt:.0f}%)"


def percent(rate: float) -> str:
    """A rate as a 6-wide percentage; ``-`` where the answer digit does not exist (NaN)."""
    return f"{'-':>6}" if np.isnan(rate) else f"{100 * rate:6.1f}"


def plot(results: dict, lengths: list[int], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lengthgen.plot import save_figure

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    styles = {"none": ("k", "o"), "head 1": ("tab:blue", "s"), "head 2": ("tab:red", "^")}
    for col, (name, res) in enumerate(results.items()):
        ax = axes[0, col]
        for label, em in res["ablation"].items():
            color, marker = styles[label]
            ax.plot(lengths, [100 * e for e in em], color=color, marker=marker, ms=4,
                    label="no ablation" if label == "none" else f"{head_label(res, label)} zero-ablated")
        ax.set(title=f"{name}: zero ablation", xlabel="operand digits n", ylabel="exact match (%)", ylim=(-3, 103))
        ax.legend(fontsize=8, loc="center right")
        ax = axes[1, col]
        width = 0.38
        x = np.arange(len(OFFSETS))
        for k, (label, rates) in enumerate(res["patching"].items()):
            bars = ax.bar(x + (k - 0.5) * width, 100 * rates[:-1], width, color=styles[label][0],
                          label=f"{head_label(res, label)} patched")
            ax.bar_label(bars, labels=[f"{100 * r:.0f}" if r > 0 else "" for r in rates[:-1]], fontsize=7)
        ax.set_xticks(x, [f"c_(i{d:+d})" if d else "c_i" for d in OFFSETS])
        ax.set(xlabel="answer digit (carry out of column i)", ylabel="predictions flipped (%)", ylim=(0, 135),
               yticks=range(0, 101, 20), title=f"patching: carry-free -> carry run, n = {res['patch_n']}")
        ax.legend(fontsize=8, loc="upper center")
    paths = [out.with_suffix(".png"), out.with_suffix(".pdf")]
    save_figure(fig, paths)
    return paths


def parser() -> ArgumentParser:
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=100, help="additions per length (ablation)")
    p.add_argument("--patch-samples", type=int, default=300, help="carry/carry-free pairs (patching)")
    p.add_argument("--max-digits", type=int, default=15, help="longest operands (the trained table holds 15)")
    p.add_argument("--patch-digits", type=int, default=10, help="operand length of the patching set")
    p.add_argument("--out", default=str(ROOT / "figures" / "patching.png"), help="figure path (.png and .pdf written)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (at least 1)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    if min(args.samples, args.patch_samples) < 1 or not 1 <= args.patch_digits <= args.max_digits <= 15:
        raise UsageError("need --samples >= 1 and 1 <= --patch-digits <= --max-digits <= 15")
    apply_threads(args.threads)
    t0 = time.perf_counter()
    lengths = list(range(1, args.max_digits + 1))
    results = {}
    for name, model in load_models(args.max_digits).items():
        results[name] = {"ablation": ablation_table(model, lengths, args.samples),
                         "patching": patch_flips(model, args.patch_digits, args.patch_samples),
                         "roles": attention_roles(model, args.patch_digits, args.patch_samples), "patch_n": args.patch_digits}
    for name, res in results.items():
        print(f"\n{name}")
        print(f"  attention from answer digit c_i (predicts c_(i+1)), n = {args.patch_digits}:"
              + ("" if res["roles"] else " not measured (n = 1 has no column i+1)"))
        for label, (same, nxt) in res["roles"].items():
            print(f"    {label}: {100 * same:5.1f}% on column i (a_i, b_i), {100 * nxt:5.1f}% on column i+1")
        print(f"  exact match (%) per operand length, {args.samples} additions each")
        print("  n            " + " ".join(f"{n:>5}" for n in lengths))
        for label, em in res["ablation"].items():
            print(f"  {'ablate ' + label if label != 'none' else 'no ablation':<12} " + " ".join(f"{100 * e:5.1f}" for e in em))
        print(f"  patching carry-free -> carry run ({args.patch_samples} pairs, n = {args.patch_digits}): "
              "predictions flipped (%) by answer digit")
        print("  patched       " + " ".join(f"{f'c_i{d:+d}' if d else 'c_i':>6}" for d in OFFSETS) + "   c_(i+1)->carry-free")
        for label, rates in res["patching"].items():
            print(f"  {label:<12}  " + " ".join(percent(r) for r in rates[:-1]) + f"   {percent(rates[-1])}")
        print("  (- : no such answer digit, or no flip of c_(i+1) to count)")
    paths = plot(results, lengths, Path(args.out))
    print(f"\nwrote {', '.join(str(p) for p in paths)} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
