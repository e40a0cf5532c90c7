"""The carry-patching experiment of examples/patching.py, through nnsight's tracing API.

    pip install nnsight
    python examples/nnsight_patching.py            # prints the flip table for both models

nnsight wraps any ``torch.nn.Module``; a lengthgen model's hook points are modules, so
``model.blocks[0].attn.hook_z.output`` is head outputs in TransformerLens's layout
``[batch, pos, head, d_head]``, readable and writable inside ``model.trace(tokens, pos_ids)``.
Positions are passed as in ``model(tokens, pos_ids)``. The pairs, the patch (one head's
``hook_z`` from the carry-free run, at every position) and the flip statistics are those of
examples/patching.py, so the numbers are the same (docs/interop.md).

``NNsight(model)`` replaces the ``forward`` of every module it wraps, hook points included, so a
model wrapped once takes the hooked branches (LayerNorm's explicit form, per-head results) from then
on; the numbers stay the same.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

from lengthgen.cli import ArgumentParser, UsageError, fail, run_cli
from lengthgen.decode import decided_argmax

PROG = "python examples/nnsight_patching.py"


def _patching():
    """examples/patching.py as a module (the pairs, the models and the flip statistics)."""
    spec = importlib.util.spec_from_file_location("patching_example", Path(__file__).with_name("patching.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nnsight_patch_flips(model, n: int, samples: int, seed: int = 0) -> dict:
    """:func:`patching.patch_flips` with every run traced by nnsight instead of run_with_hooks."""
    from nnsight import NNsight

    patching = _patching()
    traced = NNsight(model)
    carry_tok, free_tok, pos, col = patching.carry_runs(n, samples, seed)
    first = 2 * n + 2  # '=' predicts c_0
    with torch.inference_mode():
        with traced.trace(free_tok[:, :-1], pos[:, :-1]):
            free_z = traced.blocks[0].attn.hook_z.output.save()
        with traced.trace(carry_tok[:, :-1], pos[:, :-1]):
            base_logits = traced.output.save()
        base = decided_argmax(base_logits[:, first:])
        out = {}
        for head in (0, 1):
            with traced.trace(carry_tok[:, :-1], pos[:, :-1]):
                traced.blocks[0].attn.hook_z.output[:, :, head] = free_z[:, :, head]
                logits = traced.output.save()
            out[f"head {head + 1}"] = patching.flip_rates(base, decided_argmax(logits[:, first:]), col, free_tok, n)
    return out


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--patch-samples", type=int, default=300, help="carry/carry-free pairs")
    p.add_argument("--patch-digits", type=int, default=10, help="operand length (at most 15)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.patch_samples < 1 or not 1 <= args.patch_digits <= 15:
        raise UsageError("need --patch-samples >= 1 and 1 <= --patch-digits <= 15")
    try:
        import nnsight  # noqa: F401
    except ImportError:
        return fail(PROG, "nnsight is not installed: pip install nnsight")
    torch.set_num_threads(args.threads)
    patching = _patching()
    for name, model in patching.load_models(15).items():
        flips = nnsight_patch_flips(model, args.patch_digits, args.patch_samples)
        print(f"\n{name}: patching carry-free -> carry run through nnsight "
              f"({args.patch_samples} pairs, n = {args.patch_digits}): predictions flipped (%) by answer digit")
        print("  patched       " + " ".join(f"{f'c_i{d:+d}' if d else 'c_i':>6}" for d in patching.OFFSETS)
              + "   c_(i+1)->carry-free")
        for label, rates in flips.items():
            print(f"  {label:<12}  " + " ".join(f"{100 * r:6.1f}" for r in rates[:-1]) + f"   {100 * rates[-1]:6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
