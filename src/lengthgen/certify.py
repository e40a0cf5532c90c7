"""A certificate for any 1-layer coupled addition checkpoint: a proven lower bound on exact match.

    python -m lengthgen.certify --checkpoint checkpoints/addition_coupled_1l2h_packed --digits 15 [--json] [--samples 1000]
    python -m lengthgen.certify --checkpoint construction --digits 1000
    python -m lengthgen.certify --checkpoint checkpoints/addition_coupled_1l2h_packed --digits 3 --widen-to 3

Statement (docs/certificate.md, "Trained models"): over the N-digit operand pairs that
``python -m lengthgen.evaluate`` samples (uniform, leading digits non-zero when N > 1, the
checkpoint's coupled IDs, the paper's rule or ``coupled-sink``, from the evaluation start s = 2), teacher-forced exact match with the decision margin
(:data:`lengthgen.decode.DECISION_MARGIN`) is at least ``accuracy_lower_bound``, in exact real
arithmetic on the checkpoint's weights (``--dtype real``), or, with ``--dtype float32``, for the
model's own float32 forward pass under the rounding model (:mod:`lengthgen.proof.trained_float`:
(F1), (F3) and two kernel assumptions, LayerNorm and GELU). The bound is 1 − the summed probability
of the local configurations left unproven at each answer position (a union bound over the N + 2
answer positions); PROVEN_EXACT when nothing is left. Unproven configurations are tried on the real
model (float64 forward passes on operand pairs that realize them, float32 ones for the float32
statement); the ones it really gets wrong are
printed as counterexamples. How: :mod:`lengthgen.proof.trained`. ``--attack K`` adds the adversarial
search of :mod:`lengthgen.proof.attack` (and holds the starts and end points of its descents that lie in
proven configurations to the proof); ``--no-proof --attack K`` runs only that search, over whole answers.
"""
from __future__ import annotations

import json
import math
import sys
import time
from fractions import Fraction
from typing import Any

import numpy as np
import torch

from . import task_batches
from .cli import run_cli, torch_device
from .data import COUPLED, DataError
from .decode import DECISION_MARGIN
from .evaluate import evaluate, load_for_eval
from .positions import addition_ids
from .proof.attack import AttackResult, UnsoundProof, attack, attack_answer, configuration_of, digits_of
from .proof.counterexamples import realize, wrong_positions
from .proof.trained import Layout, PositionCertifier, PositionResult
from .proof.trained_float import FloatFormat
from .proof.trained_tables import OneLayer, Tables
from .proof.weights import StructureError
from .runs import OneLineParser, RunError, fail
from .tasks import ADDITION

PROG = "python -m lengthgen.certify"
TRIES = 3  # operand pairs tried per unproven configuration
DTYPES = ("real", "float32", "float64")


def forward_dtype(dtype: str) -> torch.dtype:
    """The format of the forward passes that check a statement about ``dtype`` ("real", "float32",
    "float64"): float64, the closest to the real-number function, for "real"; else its own."""
    return torch.float64 if dtype == "real" else getattr(torch, dtype)


def float_below(x: Fraction) -> float:
    """The largest float ≤ x (the printed bound never exceeds the proven one)."""
    f = float(x)
    return float(np.nextafter(f, -np.inf)) if Fraction(f) > x else f


def addition_layout(n: int, start: int, scheme: str = "coupled") -> Layout:
    """The certificate's layout of n-digit addition under ``scheme`` (``coupled``: ``$`` at ID 0;
    ``coupled-sink``: ``$`` at the top carry's ID s − 1)."""
    if scheme not in COUPLED:
        raise DataError(f"the certificate covers coupled addition IDs ({', '.join(COUPLED)}), not {scheme}")
    dollar_id = int(addition_ids(scheme, n, start)[0])  # the opening $'s ID, from the rule itself
    return Layout(n, start, ADDITION.EOS, ADDITION.PLUS, ADDITION.EQUALS, dollar_id)


def certify(model: torch.nn.Module, n: int, start: int, *, max_width: int = 2, margin: float = DECISION_MARGIN,
            progress: bool = False, keep_enclosures: bool = False, tail: str = "both",
            positions: list[int] | None = None, widen_to: int | None = None, dtype: str = "real",
            scheme: str = "coupled") -> list[PositionResult]:
    """Certificate results of every answer position r = 0 … N + 1 of N-digit coupled addition
    (``keep_enclosures``: each also keeps its configurations' logit-difference enclosures;
    ``tail``: "both" runs the affine tail on what the plain interval pass leaves unproven,
    "interval" the plain pass only, "affine" the affine tail only; ``positions``: only these answer
    positions, for tests and figures — the bound needs them all; ``widen_to``: the configurations an
    answer position leaves unproven are split into those of a window one significance wider and
    certified again, up to this width: a branch and bound whose proven parts each stand on a proof
    of their own; ``dtype``: "real" for the exact real-number function of the weights, or the
    float format of the forward pass the bound is about, "float32" or "float64", under the rounding
    model (lengthgen.proof.trained_float)); ``scheme``: the checkpoint's position rule, ``coupled`` or
    ``coupled-sink`` (:func:`addition_layout`)."""
    w = OneLayer.from_model(model, None if dtype == "real" else FloatFormat(dtype))
    lay = addition_layout(n, start, scheme)
    tables = Tables.build(w, n_keys=ADDITION.instance("0" * n, "0" * n, start=start).tokens.shape[0])
    certifiers = {width: PositionCertifier(w, tables, lay, max_width=width, margin=margin,
                                           keep_enclosures=keep_enclosures, tail=tail)
                  for width in range(max_width, max(max_width, widen_to or 0) + 1)}
    positions = range(n + 2) if positions is None else positions
    if progress:
        from tqdm import tqdm

        positions = tqdm(positions, desc="certifying", unit="position", file=sys.stderr, dynamic_ncols=True)
    results = []
    for r in positions:
        best = certifiers[max_width].certify(r)
        for width in range(max_width + 1, max(certifiers) + 1):
            if best.unproven_mass == 0 or width > n:
                break
            best = certifiers[width].certify(r, refine=best)
        results.append(best)
    return results


def find_counterexamples(model: torch.nn.Module, n: int, start: int, results: list[PositionResult], limit: int,
                         seed: int = 0, dtype: str = "real", scheme: str = "coupled",
                         attacks: list[AttackResult] = ()) -> list[dict[str, Any]]:
    """Up to ``limit`` operand pairs realizing unproven configurations that the model really gets
    wrong at that configuration's answer position (decided argmax; a float64 forward pass for the
    real-arithmetic statement, else one in ``dtype``): random realizations of each, then the pairs
    that an adversarial search (``attacks``, :func:`lengthgen.proof.attack.attack`) found, each
    checked by the same forward pass."""
    lay = addition_layout(n, start, scheme)
    rng = np.random.default_rng(seed)
    searched = {x.r: x.wrong_pairs for x in attacks}
    found: list[dict[str, Any]] = []
    seen: set = set()
    for res in results:
        budget = 4 * limit  # configurations tried per position
        pairs = [realize(lay, res.window[0], *cfg, rng) for cfg in res.failed[:budget] for _ in range(TRIES)]
        pairs += searched.get(res.r, [])[:budget]
        if not pairs:
            continue
        verdicts = wrong_positions(model, pairs, start, dtype=forward_dtype(dtype), scheme=scheme)
        for (a, b), wrong in zip(pairs, verdicts):
            key = (res.r, configuration_of(digits_of(a), digits_of(b), *res.window))  # one per configuration
            if res.r in wrong and key not in seen and len(found) < limit:
                seen.add(key)
                expected, predicted = wrong[res.r]
                found.append({"a": a, "b": b, "answer_position": res.r, "expected": expected, "predicted": predicted})
    return found


def attack_positions(model: torch.nn.Module, n: int, start: int, results: list[PositionResult], configurations: int,
                     dtype: str = "real", scheme: str = "coupled", progress: bool = False) -> list[AttackResult]:
    """The adversarial search of :mod:`lengthgen.proof.attack` at every answer position: inside its
    first ``configurations`` unproven configurations (worst first), and from as many random pairs
    with every digit free, each of whose end points is held to the proof (``UnsoundProof`` if a
    proven configuration holds a smaller margin than was proven)."""
    if configurations <= 0:
        return []
    lay = addition_layout(n, start, scheme)
    if progress:
        from tqdm import tqdm

        results = tqdm(results, desc="adversarial search", unit="position", file=sys.stderr, dynamic_ncols=True)
    return [attack(model, lay, res, scheme, configurations, seed=res.r, margin_limit=DECISION_MARGIN,
                   dtype=forward_dtype(dtype)) for res in results]


def summarize(n: int, results: list[PositionResult], counterexamples: list[dict[str, Any]],
              attacks: list[AttackResult] = ()) -> dict[str, Any]:
    unproven = sum((r.unproven_mass for r in results), Fraction(0))
    bound = max(Fraction(0), 1 - unproven)
    verdict = "PROVEN_EXACT" if unproven == 0 else ("VACUOUS" if bound == 0 else "LOWER_BOUND")
    searched = {x.r: {"configurations": x.searched, "min_margin": None if math.isinf(x.min_margin) else x.min_margin,
                      "worst_pair": x.worst_pair and list(x.worst_pair), "global_min_margin": x.global_min_margin,
                      "global_worst_pair": list(x.global_worst_pair)} for x in attacks}
    return {
        "digits": n, "verdict": verdict, "accuracy_lower_bound": float_below(bound),
        "configurations_proven": sum(r.proven for r in results),
        "configurations_failed": sum(r.configurations - r.proven for r in results),
        "counterexamples": counterexamples,
        "positions": [{"answer_position": r.r, "window": list(r.window), "configurations": r.configurations,
                       "proven": r.proven, "unproven_mass": float(r.unproven_mass),
                       "max_free_share": r.max_free_share,
                       "min_margin": None if math.isinf(r.min_margin) else r.min_margin,
                       "attack": searched.get(r.r)} for r in results],
    }


def format_report(desc: dict[str, Any], out: dict[str, Any]) -> str:
    about = ("exact real arithmetic" if out["dtype"] == "real" else
             f"the {out['dtype']} forward pass under the rounding model")
    lines = [f"{desc['name']} (addition, {out['scheme']} positions, start {out['start']}), {out['digits']}-digit operands, "
             + about,
             f"verdict: {out['verdict']}   accuracy lower bound {out['accuracy_lower_bound']:.6f} "
             f"(1 − unproven mass, union bound over {out['digits'] + 2} answer positions)",
             f"local configurations: {out['configurations_proven']} proven, {out['configurations_failed']} not proven"]
    for p in out["positions"]:
        if p["proven"] < p["configurations"]:
            lines.append(f"  answer position {p['answer_position']} (window significances {p['window'][0]}..{p['window'][1]}): "
                         f"{p['configurations'] - p['proven']}/{p['configurations']} unproven, mass {p['unproven_mass']:.3g}, "
                         f"attention share outside the window ≤ {p['max_free_share']:.3g}")
            if p.get("attack") and p["attack"]["configurations"]:
                x = p["attack"]
                lines.append(f"    adversarial search inside {x['configurations']} of them: smallest answer margin "
                             f"{x['min_margin']:.3g}, at {x['worst_pair'][0]} + {x['worst_pair'][1]}")
    attacked = [p for p in out["positions"] if p.get("attack")]
    if attacked:
        low = min(attacked, key=lambda p: p["attack"]["global_min_margin"])
        x = low["attack"]
        lines.append(f"adversarial search from random pairs, every digit free: smallest answer margin "
                     f"{x['global_min_margin']:.3g} (answer position {low['answer_position']}, "
                     f"{x['global_worst_pair'][0]} + {x['global_worst_pair'][1]}); a margin at most {DECISION_MARGIN:g} "
                     "is a wrong answer, and every proven configuration reached kept its proven margin")
    for c in out["counterexamples"]:
        lines.append(f"  counterexample: {c['a']} + {c['b']}, answer position {c['answer_position']}: "
                     f"expected {c['expected']}, predicted {c['predicted']}")
    if out.get("reproduce"):
        lines.append(f"  greedy check of the first: {out['reproduce']}")
    if out.get("sampled_accuracy") is not None:
        lines.append(f"sampled exact match ({out['samples']} samples, lengthgen.evaluate): {out['sampled_accuracy']:.4f}")
    lines.append(f"seconds: {out['seconds']:.1f}")
    return "\n".join(lines)


def search_only(model: torch.nn.Module, args, name: str, scheme: str, start: int, progress: bool) -> dict[str, Any]:
    """``--no-proof``: :func:`lengthgen.proof.attack.attack_answer` from ``--attack`` random pairs,
    its wrong pairs confirmed by the forward pass of :func:`wrong_positions`."""
    lay = addition_layout(args.digits, start, scheme)
    found = attack_answer(model, lay, scheme, args.attack, margin_limit=DECISION_MARGIN,
                          dtype=forward_dtype(args.dtype), progress=progress)
    examples = []
    pairs = found.wrong_pairs[:args.counterexamples]
    for (a, b), wrong in zip(pairs, wrong_positions(model, pairs, start, dtype=forward_dtype(args.dtype),
                                                    scheme=scheme) if pairs else []):
        for r, (expected, predicted) in sorted(wrong.items())[:1]:
            examples.append({"a": a, "b": b, "answer_position": r, "expected": expected, "predicted": predicted})
    out = {"checkpoint": name, "scheme": scheme, "start": start, "dtype": args.dtype, "digits": args.digits,
           "verdict": None, "attack": {"starts": found.starts, "min_margin": found.min_margin,
                                        "worst_pair": list(found.worst_pair), "worst_position": found.worst_position,
                                        "wrong_pairs": len(found.wrong_pairs)},
           "counterexamples": examples}
    if examples:
        out["reproduce"] = (f"python -m lengthgen.evaluate --checkpoint {args.checkpoint} --a {examples[0]['a']} "
                            f"--b {examples[0]['b']}")
    return out


def format_search(out: dict[str, Any]) -> str:
    x = out["attack"]
    lines = [f"{out['checkpoint']} (addition, {out['scheme']} positions, start {out['start']}), {out['digits']}-digit "
             "operands: adversarial search only, no proof",
             f"{x['starts']} random pairs descended on the smallest answer margin over every answer position: "
             f"smallest {x['min_margin']:.4g} at answer position {x['worst_position']} "
             f"({x['worst_pair'][0]} + {x['worst_pair'][1]}); {x['wrong_pairs']} of them end answered wrong "
             f"(margin at most {DECISION_MARGIN:g})"]
    for c in out["counterexamples"]:
        lines.append(f"  counterexample: {c['a']} + {c['b']}, answer position {c['answer_position']}: "
                     f"expected {c['expected']}, predicted {c['predicted']}")
    if out.get("reproduce"):
        lines.append(f"  greedy check of the first: {out['reproduce']}")
    lines.append(f"seconds: {out['seconds']:.1f}")
    return "\n".join(lines)


def parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="Proven lower bound on the exact match of a 1-layer coupled addition "
                      "checkpoint, for every N-digit input (docs/certificate.md, \"Trained models\").")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory, run directory, weight file, or a "
                   "registered name such as 'construction'")
    p.add_argument("--digits", type=int, required=True, help="operand length N")
    p.add_argument("--dtype", default="real", choices=DTYPES,
                   help="what the bound is about: the exact real-number function of the stored weights (real, the "
                   "default), or the model's own float32 (or float64) forward pass under the rounding model of "
                   "docs/certificate.md; a float format must be the checkpoint's")
    p.add_argument("--samples", type=int, default=0, help="also report lengthgen.evaluate's sampled exact match")
    p.add_argument("--max-width", type=int, default=2, help="significances per local configuration window "
                   "(cost grows 55× per extra one)")
    p.add_argument("--widen-to", type=int, default=None, metavar="W",
                   help="split the configurations an answer position leaves unproven into those of a window one "
                   "significance wider and certify those again, up to W significances (55× per unproven "
                   "configuration per step; off by default)")
    p.add_argument("--tail", default="both", choices=["both", "interval", "affine"],
                   help="after attention: plain intervals, then affine forms on what they leave unproven (both, "
                   "the default); or only one of the two")
    p.add_argument("--counterexamples", type=int, default=10, help="most counterexamples to print")
    p.add_argument("--attack", type=int, default=0, metavar="K",
                   help="also search for pairs the model gets wrong: at each answer position, a greedy descent "
                   "of the answer's logit margin from K random pairs (every digit free) and inside its K worst "
                   "unproven configurations (the digits outside the window free); every start and end point in a "
                   "proven configuration is checked against the proof (a few seconds per position at 10 digits; off by "
                   "default)")
    p.add_argument("--no-proof", action="store_true",
                   help="skip the proof and only search (with --attack K): K random pairs, each descended on the "
                   "smallest margin over the whole answer; finds counterexamples at lengths the proof is too slow "
                   "for, and proves nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object (verdict, bound, counterexamples, ...)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--device", type=torch_device, default="cpu",
                   help="where the forward passes run (counterexample checks, --samples); the bounds "
                   "themselves are computed on the CPU in float64 interval arithmetic")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (none is drawn when stderr is not a terminal)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    t0 = time.perf_counter()
    try:
        if args.digits < 1 or args.samples < 0 or args.max_width < 1 or args.threads < 1 or args.counterexamples < 0 \
                or args.attack < 0:
            raise DataError("--digits, --max-width and --threads must be at least 1; --samples, "
                            "--counterexamples and --attack at least 0")
        if args.widen_to is not None and args.widen_to < args.max_width:
            raise DataError(f"--widen-to {args.widen_to} is below --max-width {args.max_width}: it is the widest "
                            "window to try, so at least the starting one")
        torch.set_num_threads(args.threads)
        model, desc = load_for_eval(args.checkpoint, args.digits, device=args.device)
        scheme = desc["positions"]
        if desc["task"] != "addition" or scheme not in COUPLED:
            raise DataError(f"{args.checkpoint}: the certificate covers addition with coupled positions (the "
                            f"paper's rule or coupled-sink), not {desc['task']} with {scheme} positions")
        task_batches.check_digits("addition", scheme, model.cfg.n_ctx, args.digits, str(args.checkpoint))
        if args.dtype != "real" and model.cfg.dtype != args.dtype:
            raise DataError(f"--dtype {args.dtype}: {args.checkpoint} holds {model.cfg.dtype} weights, and a float "
                            f"statement is about the checkpoint's own forward pass; use --dtype {model.cfg.dtype} "
                            "or --dtype real")
        start = task_batches.EVAL_STARTS["addition"]
        progress = sys.stderr.isatty() and not args.no_progress
        if args.no_proof:
            if args.attack < 1:
                raise DataError("--no-proof runs only the adversarial search: give --attack K with K at least 1")
            out = search_only(model, args, desc["name"], scheme, start, progress)
            out["seconds"] = round(time.perf_counter() - t0, 2)
            print(json.dumps(out, indent=1) if args.json else format_search(out))
            return 0
        results = certify(model, args.digits, start, max_width=args.max_width, progress=progress, tail=args.tail,
                          widen_to=args.widen_to, dtype=args.dtype, scheme=scheme)
        attacks = attack_positions(model, args.digits, start, results, args.attack, dtype=args.dtype, scheme=scheme,
                                   progress=progress)
        examples = find_counterexamples(model, args.digits, start, results, args.counterexamples, dtype=args.dtype,
                                        scheme=scheme, attacks=attacks)
        out = {"checkpoint": desc["name"], "scheme": scheme, "start": start, "dtype": args.dtype,
               **summarize(args.digits, results, examples, attacks)}
        if examples:
            out["reproduce"] = (f"python -m lengthgen.evaluate --checkpoint {args.checkpoint} --a {examples[0]['a']} "
                                f"--b {examples[0]['b']}")
        if args.samples:
            row = evaluate(model, scheme, [args.digits], args.samples, task="addition")[0]
            out.update(sampled_accuracy=row["exact_match"], samples=args.samples)
        else:
            out["sampled_accuracy"] = None
    except (DataError, RunError, StructureError, ValueError, UnsoundProof) as exc:
        return fail(PROG, str(exc))
    out["seconds"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(out, indent=1) if args.json else format_report(desc, out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
