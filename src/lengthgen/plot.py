"""Figures: attention maps (a construction vs a trained model) and length generalization.

    python -m lengthgen.plot attention --construction construction --checkpoint runs/NAME --digits 6 \\
        --samples 1000 --out figures/attention_addition.png
    python -m lengthgen.plot attention --construction DIR --checkpoint checkpoints/multiplication_nx2_coupled_2l4h \\
        --digits 5 --samples 1 --out figures/attention_multiplication_trained.png   # DIR: constructions.multiplication export
    python -m lengthgen.plot length --checkpoint coupled=runs/A --checkpoint ape=runs/B \\
        --checkpoint nope=runs/C --construction construction --digits 1-15 --out figures/length_generalization.png
    python -m lengthgen.plot length --checkpoint coupled=runs/S0 --checkpoint coupled=runs/S1 \\
        --digits 1-10,15-100:5 --out figures/long.png      # one label, two seeds: their mean and range
    python -m lengthgen.plot all [--construction DIR] [--force]   # every figure from the committed checkpoints/

Every model is a checkpoint (a path, or a name registered in the entry-point group
``lengthgen.checkpoints``; ``construction`` is Theorem 5.1's model, and
``python -m constructions.addition export DIR`` writes it as a directory). Each figure is written
as PNG and PDF (same stem). Existing outputs are never overwritten without ``--force``. The
figures and their captions are described in docs/training.md.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .data import DataError, parse_digit_list
from .decode import DECISION_MARGIN
from .evaluate import DEFAULT_SEED, evaluate, load_for_eval, mean_attention
from .figure_files import check_free, outputs, save_figure, train_info
from .plot_attention import match_heads, attention_figure
from .plot_length import length_command, parse_models
from .cli import non_negative_integer, run_cli
from .runs import OneLineParser, RunError, fail, write_json

PROG = "python -m lengthgen.plot"
ROOT = Path(__file__).resolve().parents[2]
CONSTRUCTION = "construction"  # the registered name of Theorem 5.1's model (pyproject entry points)
DEFAULT_CHECKPOINTS = {  # label -> committed checkpoint (all 1 layer, 2 heads, d_model 128, trained on 1-5 digits)
    "coupling, packed rows": "checkpoints/addition_coupled_1l2h_packed",
    "coupling, packed rows, q·k/√d": "checkpoints/addition_coupled_1l2h_packed_scaled",
    "coupling, one problem per row": "checkpoints/addition_coupled_1l2h_unscaled",
    "coupling, one problem per row, q·k/√d": "checkpoints/addition_coupled_1l2h",
    "plain APE": "checkpoints/addition_ape_1l2h",
    "NoPE": "checkpoints/addition_nope_1l2h",
}
#: the figure out to 100 digits: models trained on 1-10 digits with a position table for 100; a label given
#: more than once is one curve, the mean of its seeds with a lowest-highest band (lengthgen.plot_length)
LONG_CHECKPOINTS = [
    *[("coupling, late entropy penalty", f"checkpoints/addition_coupled_1l2h_packed_entropy_001_late{s}")
      for s in ("", "_seed1", "_seed2")],
    *[("coupling, six problems per row", f"checkpoints/addition_coupled_1l2h_pack6_100{s}")
      for s in ("", "_seed1", "_seed2")],
    *[("coupled-sink, six problems per row", f"checkpoints/addition_coupled_sink_1l2h_pack6_100{s}")
      for s in ("", "_seed1", "_seed2")],
    ("plain APE", "checkpoints/addition_ape_1l2h_100"),
    ("NoPE", "checkpoints/addition_nope_1l2h_100"),
]
LONG_DIGITS = "1-10,15-100:5"


def attention_command(construction: str, checkpoint: str, n: int, samples: int, out: str | Path, force: bool,
                      seed: int = DEFAULT_SEED, log=print) -> dict[str, Any]:
    """Build the attention figure of ``construction`` beside ``checkpoint`` (two checkpoints of one
    task); returns the head matching (also printed through ``log``). A 1-layer addition reference
    gets paired maps (:mod:`.plot_attention`), any other every layer and head (:mod:`.plot_layers`)."""
    paths = outputs(out)
    cons, cons_desc = load_for_eval(construction, n)  # bad models first: their message is the one that helps
    trained, desc = load_for_eval(checkpoint, n)
    check_free(paths, force)
    if cons_desc["task"] != desc["task"]:
        raise RunError(f"{checkpoint} is a {desc['task']} model, {construction} a {cons_desc['task']} model; "
                       f"pass --construction with a {desc['task']} reference (a directory written by a "
                       f"construction's export command, e.g. python -m constructions.multiplication export DIR)")
    if cons_desc["task"] != "addition" or cons.cfg.n_layers > 1:
        return layered_attention_command(cons, cons_desc, trained, desc, n, samples, paths, seed, log)
    head_names = tuple(cons.annotations.head_names or [f"head {h + 1}" for h in range(cons.cfg.n_heads)])
    if cons.cfg.n_layers != 1:
        raise RunError(f"{construction}: the reference model must have 1 layer, it has {cons.cfg.n_layers}")
    if trained.cfg.n_layers * trained.cfg.n_heads < cons.cfg.n_heads:
        raise RunError(f"{checkpoint}: the trained model has fewer heads than the reference ({cons.cfg.n_heads})")
    cons_att, example = mean_attention(cons, cons_desc["positions"], n, samples, seed=seed)
    tr_att, example2 = mean_attention(trained, desc["positions"], n, samples, seed=seed)
    if not (example == example2).all():
        raise RunError("the two models were probed on different inputs")
    matches = match_heads(cons_att[0], tr_att, n)
    for m in matches:
        log(m.describe(head_names))
    pack = train_info(checkpoint).get("pack")
    rows = "" if pack is None else ", packed rows" if pack else ", one problem per row"
    title = (f"Mean attention over {samples} {n}-digit additions: {cons_desc['name']} vs "
             f"trained {trained.cfg.n_layers}-layer {trained.cfg.n_heads}-head model{rows}")
    fig = attention_figure(cons_att[0], tr_att, n, matches, head_names, title)
    save_figure(fig, paths)
    log(f"wrote {', '.join(map(str, paths))}")
    scale = ("q·k/√d_head" if trained.cfg.attn_scale is None else "unscaled q·k" if trained.cfg.attn_scale == 1
             else f"q·k/{trained.cfg.attn_scale:g}")
    from .tasks import ADDITION

    return {"digits": n, "samples": samples, "checkpoint": checkpoint, "reference": cons_desc["name"],
            "trained": {"positions": desc["positions"], "train_digits": desc["train_digits"], "scores": scale,
                        "pack": pack},
            "example_input": ADDITION.decode(example),
            "matching": [{"construction_head": head_names[m.head], "trained_layer": m.layer + 1,
                          "trained_head": m.trained_head + 1, "cosine_answer_rows": round(m.answer_similarity, 4),
                          "cosine_all_rows": round(m.full_similarity, 4)} for m in matches]}


def layered_attention_command(cons, cons_desc: dict[str, Any], trained, desc: dict[str, Any], n: int, samples: int,
                              paths: list[Path], seed: int, log=print) -> dict[str, Any]:
    """Every layer and head of a multi-layer reference (its working heads) and of the trained model
    (:mod:`lengthgen.plot_layers`), on ``samples`` n-digit examples (1: one example, no averaging)."""
    from .plot_layers import layer_maps, layers_figure, token_roles
    from .runs import head_roles
    from .tasks import get_task

    task = desc["task"]
    roles = token_roles(task, n)
    cons_att, example = mean_attention(cons, cons_desc["positions"], n, samples, task=task, seed=seed)
    tr_att, example2 = mean_attention(trained, desc["positions"], n, samples, task=task, seed=seed)
    if not (example == example2).all():
        raise RunError("the two models were probed on different inputs")
    declared = head_roles(cons)
    ref, tr = layer_maps(cons_att, declared, tr_att, roles)
    idle = [l for l in range(cons.cfg.n_layers) if declared is not None and all(k[0] != l for k in declared)]
    text = get_task(task).decode(example[:-1])
    ref_score, score = (evaluate(m, d["positions"], [n], samples, task=task, seed=seed)[0]  # the same examples
                        for m, d in ((cons, cons_desc), (trained, desc)))
    right = lambda r: f"{100 * r['token_accuracy']:.0f}% of the answer tokens (exact match {100 * r['exact_match']:.0f}%)"
    what = (f"one {n}-digit example, {text} (answer least significant digit first)" if samples == 1
            else f"mean over {samples} {n}-digit examples")
    title = (f"{task}: attention of the {cons_desc['name']} and of a trained {trained.cfg.n_layers}-layer "
             f"{trained.cfg.n_heads}-head model, {what}.\nTeacher-forced, the trained model gets {right(score)} "
             f"right here, the construction {right(ref_score)}.")
    fig = layers_figure(ref, tr, roles, "construction", title, idle)
    save_figure(fig, paths)
    strip = lambda t: t.replace("$", "").replace("\\", "")
    for m in tr:
        log(f"trained layer {m.layer + 1} head {m.head + 1}: {strip(m.reads)}; {m.closest}")
    log(f"wrote {', '.join(map(str, paths))}")
    return {"digits": n, "samples": samples, "checkpoint": desc["path"], "reference": cons_desc["name"],
            "example_input": text, "trained_exact_match": score["exact_match"],
            "trained_token_accuracy": score["token_accuracy"],
            "reference_heads": [{"layer": m.layer + 1, "head": m.head + 1, "reads": strip(m.reads)} for m in ref],
            "trained_heads": [{"layer": m.layer + 1, "head": m.head + 1, "reads": strip(m.reads),
                               "closest": m.closest} for m in tr]}


def parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="Figures (PNG + PDF): attention maps of a construction vs a trained "
                      "model, exact match vs operand length, or all of them (docs/training.md). Every model is a "
                      "checkpoint path or a registered name such as 'construction'.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    a = sub.add_parser("attention", help="construction vs trained attention maps, heads matched by similarity")
    a.add_argument("--construction", default=CONSTRUCTION,
                   help="reference model: checkpoint path or registered name (default: construction, Theorem 5.1)")
    a.add_argument("--checkpoint", required=True, help="trained run/checkpoint (coupled positions for a like-for-like map)")
    a.add_argument("--digits", type=int, default=6, help="(first) operand length of the probe examples")
    a.add_argument("--samples", type=int, default=1000, help="probe examples averaged (1: one example)")
    a.add_argument("--out", default="figures/attention_addition.png", help="figure path; a .png and a .pdf are written")
    ln = sub.add_parser("length", help="exact match vs operand length")
    ln.add_argument("--checkpoint", action="append", default=[],
                    help="LABEL=PATH (repeatable; checkpoints given one label, e.g. seeds, are one curve: their "
                    "mean, with a band from the lowest to the highest)")
    ln.add_argument("--construction", help="also evaluate this construction (checkpoint path or registered name, "
                    "e.g. construction)")
    ln.add_argument("--digits", default="1-15", help="operand lengths to evaluate: ranges, each with an optional "
                    "step, separated by commas, e.g. 1-15 or 1-10,15-100:5")
    ln.add_argument("--samples", type=int, default=1000, help="test examples per length")
    ln.add_argument("--out", default="figures/length_generalization.png", help="figure path; a .png and a .pdf are written")
    ln.add_argument("--results", help="also write the measured numbers to this JSON file")
    al = sub.add_parser("all", help="every figure and figures/results.json from the committed checkpoints/")
    al.add_argument("--out-dir", default=str(ROOT / "figures"),
                    help="folder for the figures and results.json (default: figures/ of this checkout)")
    al.add_argument("--samples", type=int, default=1000, help="test examples per length and probe examples per map")
    al.add_argument("--construction", default=CONSTRUCTION,
                    help="Theorem 5.1's model: a checkpoint directory (figures/regenerate.sh exports one) or registered name")
    al.add_argument("--long-construction", default=CONSTRUCTION,
                    help="the same for the figure out to 100 digits (its position table must hold 100 digits)")
    for q in (a, ln, al):
        q.add_argument("--seed", type=non_negative_integer, default=DEFAULT_SEED, help="seed of the test and probe examples")
        q.add_argument("--force", action="store_true", help="overwrite existing outputs")
        q.add_argument("--threads", type=int, default=2, help="torch CPU threads")
        q.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.samples < 1 or args.threads < 1:
            raise DataError("--samples and --threads must be at least 1")
        torch.set_num_threads(args.threads)
        if args.command == "attention":
            if args.digits < 1:
                raise DataError("--digits must be at least 1")
            attention_command(args.construction, args.checkpoint, args.digits, args.samples, args.out, args.force,
                              args.seed)
        elif args.command == "length":
            digits = parse_digit_list(args.digits)
            if not args.checkpoint and not args.construction:
                raise RunError("nothing to plot: give --checkpoint LABEL=PATH and/or --construction CHECKPOINT")
            if args.results:
                check_free([Path(args.results)], args.force)  # before any figure is written
            models = ([(None, args.construction)] if args.construction else []) + parse_models(args.checkpoint)
            res = length_command(models, digits, args.samples, args.out, args.force, args.seed,
                                 not args.no_progress)
            if args.results:
                write_json(Path(args.results), res)
        else:
            return all_command(Path(args.out_dir), args.construction, args.long_construction, args.samples, args.seed, args.force,
                               not args.no_progress)
    except (DataError, RunError, ValueError) as exc:
        return fail(PROG, str(exc))
    return 0


def all_command(out_dir: Path, construction: str, long_construction: str, samples: int, seed: int, force: bool,
                progress: bool) -> int:
    """Regenerate the attention and length-generalization figures and ``results.json`` from the
    committed checkpoints and ``construction`` (``long_construction`` for the figure out to 100 digits)."""
    models = {label: str(ROOT / p) for label, p in DEFAULT_CHECKPOINTS.items()}
    long_models = [(label, str(ROOT / p)) for label, p in LONG_CHECKPOINTS]
    missing = [p for p in [*models.values(), *(p for _, p in long_models)] if not Path(p).exists()]
    if missing:
        raise RunError(f"missing committed checkpoint(s): {', '.join(missing)}")
    results = out_dir / "results.json"
    att_figs = {"attention_addition.png": "coupling, packed rows",
                "attention_addition_unpacked.png": "coupling, one problem per row"}
    length_figs = ["length_generalization.png", "length_generalization_100.png"]
    targets = [p for f in [*att_figs, *length_figs] for p in outputs(out_dir / f)] + [results]
    check_free(targets, force)
    attention = {}
    for fig_name, label in att_figs.items():
        print(f"{fig_name} ({label}):")
        attention[fig_name] = attention_command(construction, models[label], 6, samples, out_dir / fig_name, True, seed)
    length = length_command([(None, construction), *models.items()], list(range(1, 16)), samples,
                            out_dir / length_figs[0], True, seed, progress)
    long = length_command([(None, long_construction), *long_models], parse_digit_list(LONG_DIGITS), samples,
                          out_dir / length_figs[1], True, seed, progress)
    rel = lambda p: str(Path(p).relative_to(ROOT)) if str(p).startswith(str(ROOT)) else str(p)
    for e in [*length["models"].values(), *long["models"].values()]:
        for one in e.get("seeds", [e]):
            one["checkpoint"] = ("exported by python -m constructions.addition export" if one["kind"] == "construction"
                                 else rel(one["checkpoint"]))
        if "checkpoints" in e:
            e["checkpoints"] = [rel(p) for p in e["checkpoints"]]
    for att in attention.values():
        att["checkpoint"] = rel(att["checkpoint"])
    write_json(results, {"generated_by": "python -m lengthgen.plot all (figures/regenerate.sh)",
                         "evaluation": "teacher-forced; a prediction is right only if its logit beats every other "
                                       "by more than lengthgen.decode.DECISION_MARGIN; exact match = every answer "
                                       "digit and the final EOS right", "decision_margin": DECISION_MARGIN,
                         "length_generalization": length, "length_generalization_100": long,
                         "attention": attention, "torch": torch.__version__})
    print(f"wrote {results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
