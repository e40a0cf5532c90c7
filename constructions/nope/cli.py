"""Command line for the Proposition 5.2 counterexample search: ``python -m constructions.nope``.

Builds or loads a model, searches for two prompts that are permutations of each other, end in the
same token and have different correct next tokens, on which the model's logits are identical (up to
float rounding) and its answer wrong, and prints the pair (docs/proposition-5-2.md).

Exit status: 0 a verified counterexample is printed; 3 no counterexample, the model distinguishes
every pair tried (every pair, in exhaustive mode); 2 bad input (one line on stderr); 1 an
unexpected internal error (one line on stderr).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from lengthgen.cli import ArgumentParser, UsageError, fail, non_negative_integer
from lengthgen.resources import require_memory
from lengthgen.data import DataError, check_digits

from constructions.nope.certificate import (
    DEFAULT_RTOL, EXIT_BAD_INPUT, EXIT_COUNTEREXAMPLE, EXIT_DISTINGUISHED, INVARIANCE, BadInput, Comparison,
    SearchReport, coupled_pos_ids, resolve_task,
)

EPILOG = f"""examples:
  python -m constructions.nope --task addition --digits 3
  python -m constructions.nope --task reverse --digits 4 --layernorm --act gelu --seed 7 --json
  python -m constructions.nope --task addition --digits 3 --layers 2        # exit 3: distinguished
  python -m constructions.nope --task addition --digits 3 --model construction   # Theorem 5.1, coupled IDs
  python -m constructions.nope --task copy --digits 5 --model run/model.safetensors
  python -m constructions.nope --digits 3 --model checkpoints/addition_coupled_1l2h   # positions from run

tasks: addition ($653+049=), multiplication_nx1 ($653*7=), multiplication_nx2 ($653*07=), copy and
reverse ($3141=); --digits is the operand length (the first operand's for multiplication).
A pair counts only if max|logits_A - logits_B| <= rtol x max|logits| (rtol 1e-5 for float32 logits,
1e-12 for float64) and the model's argmax is wrong on at least one prompt.

exit status: {EXIT_COUNTEREXAMPLE} a verified counterexample is printed; {EXIT_DISTINGUISHED} no counterexample
(the model distinguishes every pair tried); {EXIT_BAD_INPUT} bad input; 1 internal error"""


PROG = "python -m constructions.nope"


def build_parser() -> argparse.ArgumentParser:
    from lengthgen.tasks import TASKS

    p = ArgumentParser(
        prog=PROG,
        description="Proposition 5.2 (Cho et al. 2024, Position Coupling): a 1-layer transformer without "
        "positional information cannot tell a prompt from a permutation of it that ends in the same token. "
        "Find such a pair with different correct answers on which a model is wrong, and check it.",
        epilog=EPILOG,
    )
    p.add_argument("--task", default="addition", choices=sorted(TASKS), help="task (default addition)")
    p.add_argument("--digits", type=int, default=3, help="operand length n (default 3; n >= 2, N×2 allows 1)")
    p.add_argument("--model", default="random",
                   help="'random' (default): a random transformer (options below); 'construction': the Theorem 5.1 "
                   "addition transformer with coupled position IDs; or PATH to a lengthgen model: a .safetensors/.npz "
                   "file, a run directory or a checkpoint directory (as lengthgen.evaluate takes them)")
    p.add_argument("--seed", type=non_negative_integer, default=0, help="seed of the random model and of the search (default 0)")
    p.add_argument("--budget", type=int,
                   help="most prompts to evaluate (default 20000, fewer for long prompts: at most 2e6 tokens); "
                   "the search is exhaustive when all 10^slots fillings fit")
    p.add_argument("--rtol", type=float, help="relative tolerance for 'identical logits' (default by logits dtype)")
    p.add_argument("--positions", default="auto", choices=["auto", "plain", "coupled"],
                   help="position IDs fed to a model with learned positions: plain 0..T-1, or the task's coupled IDs "
                   "(default auto: the scheme a trained checkpoint records, coupled for the construction, "
                   "plain otherwise)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (one is shown on stderr only when it is a terminal)")
    r = p.add_argument_group("random model (--model random)")
    r.add_argument("--layers", type=int, help="number of layers (default 1)")
    r.add_argument("--d-model", type=int, default=32, help="residual width (default 32)")
    r.add_argument("--heads", type=int, default=2, help="attention heads (default 2; d_head = d_model / heads)")
    r.add_argument("--d-mlp", type=int, help="MLP width (default 4 × d_model)")
    r.add_argument("--act", default="relu", choices=["relu", "gelu"], help="MLP activation (default relu)")
    r.add_argument("--layernorm", action="store_true", help="pre-LN blocks and a final LayerNorm")
    r.add_argument("--positional", default="none", choices=["none", "learned"],
                   help="none (NoPE, default) or learned position embeddings")
    return p


def describe_model(model: Any) -> str:
    from lengthgen.model import Transformer

    if not isinstance(model, Transformer):
        return type(model).__name__
    c = model.cfg
    pos = "NoPE" if c.positional == "none" else "learned positions"
    return (f"{c.n_layers}-layer transformer, {pos}, d_model {c.d_model}, {c.n_heads} head(s) × d_head {c.d_head}, "
            f"d_mlp {c.d_mlp}, {c.act_fn}, {'LayerNorm' if c.normalization else 'no LayerNorm'}, {c.dtype}")


def load(args: argparse.Namespace, task: Any) -> tuple[Any, str, Callable | None]:
    """The model, a description of it, and its ``pos_ids_fn`` (None: the model's own default)."""
    from lengthgen.init import random_transformer

    random, scheme = args.model == "random", None
    if not random and args.layers is not None:
        raise BadInput("--layers only applies to --model random")
    if random:
        layers = 1 if args.layers is None else args.layers
        if layers < 1 or args.d_model < 1 or args.heads < 1 or (args.d_mlp is not None and args.d_mlp < 0):
            raise BadInput("--layers, --d-model and --heads must be positive (--d-mlp >= 0)")
        model = random_transformer(
            len(task.vocab), n_layers=layers, d_model=args.d_model, n_heads=args.heads, d_mlp=args.d_mlp,
            positional=args.positional, n_ctx=max(256, 4 * args.digits + 16), act_fn=args.act,
            normalization="LN" if args.layernorm else None, seed=args.seed,
        )
        what = f"random {describe_model(model)} (seed {args.seed})"
    elif args.model == "construction":
        if task.name != "addition":
            raise BadInput(f"the Theorem 5.1 construction adds; it has no {task.name} version (use --task addition)")
        from constructions.addition import build_model

        model, _ = build_model(n_digits=args.digits)
        what = f"Theorem 5.1 construction ({describe_model(model)})"
    else:
        model, wp, scheme = load_checkpoint(args.model, task)
        what = f"{wp}: {describe_model(model)}" + (f", trained with {scheme} positions" if scheme else "")
    if args.positions != "auto" and getattr(getattr(model, "cfg", None), "positional", None) == "none":
        hint = " or add --positional learned" if random else ""
        raise BadInput(f"--positions {args.positions}: this model has no position embeddings (NoPE), so it would "
                       f"ignore the position IDs; leave --positions out{hint}")
    if args.model == "construction" and args.positions == "plain":
        raise BadInput("the Theorem 5.1 construction needs coupled position IDs (--positions coupled)")
    if args.positions == "auto" and scheme not in (None, *POSITION_IDS, "nope", "hard-alibi"):
        raise BadInput(f"{args.model} was trained with {scheme} positions, which this search does not lay out; "
                       "pass --positions coupled or --positions plain to feed it those IDs instead")
    if args.positions == "auto":
        coupled = args.model == "construction" or scheme == "coupled"
    else:
        coupled = args.positions == "coupled"
        if scheme in POSITION_IDS and POSITION_IDS[scheme] != args.positions:
            what += f" (but --positions {args.positions} overrides that)"
    if coupled and scheme == "coupled" and task.name == "addition":
        try:
            check_digits("coupled", model.cfg.n_ctx, args.digits, str(args.model))
        except DataError as exc:
            raise BadInput(str(exc)) from None
    return model, what + (", coupled position IDs" if coupled else ""), coupled_pos_ids(task) if coupled else None


#: the position IDs the search feeds a checkpoint trained with each scheme (lengthgen.data.SCHEMES);
#: nope and hard-alibi models have no position table, so they get none
POSITION_IDS = {"coupled": "coupled", "ape": "plain"}


def load_checkpoint(path: str, task: Any) -> tuple[Any, str, str | None]:
    """A weight file, run directory or checkpoint directory (as ``lengthgen.evaluate`` takes them):
    the model, its weight file and the position scheme it was trained with (``None`` if unrecorded).

    The scheme comes from the notes ``lengthgen.train`` writes into the weight file, or else from the
    ``run.json`` of its run directory; a checkpoint trained on another task is refused."""
    from lengthgen.runs import RunError, model_notes, weights_path
    from lengthgen.weights import WeightFileError, load_model

    try:
        if not Path(path).exists():
            raise BadInput(f"--model {path}: no such file or directory (give a weight file, a checkpoint directory, "
                           "'random' or 'construction')")
        wp = weights_path(path) if Path(path).is_dir() else Path(path)  # a file: load_model names what is wrong
        model = load_model(wp)
    except (RunError, WeightFileError) as exc:
        raise BadInput(str(exc)) from None
    notes = model_notes(model) or _run_config(wp)
    trained_on = notes.get("task")
    if trained_on is not None and trained_on != task.name:
        raise BadInput(f"{wp} was trained on {trained_on}, not {task.name} (use --task {trained_on})")
    return model, str(wp), notes.get("positions")


def _run_config(weights: Path) -> dict[str, str]:
    """``task`` and ``positions`` from the ``run.json`` beside the weights or of their run directory."""
    from lengthgen.runs import RunError, read_json

    for run_json in (weights.parent / "run.json", weights.parent.parent.parent / "run.json"):
        if run_json.is_file():
            try:
                config = read_json(run_json).get("config", {})
            except (RunError, AttributeError):
                continue
            return {k: str(config[k]) for k in ("task", "positions") if k in config}
    return {}


def compact_template(template: str) -> str:
    """``$___+___=`` as is; long runs of slots as ``[1000 digits]``."""
    return re.sub(r"_{9,}", lambda m: f"[{len(m.group())} digits]", template)


def _aligned(a: str, b: str, context: int = 3, limit: int = 40) -> tuple[str, str, str]:
    """Both prompts spaced out token by token, with a ``^`` under each differing token; prompts longer
    than ``limit`` tokens keep only the ends and ``context`` tokens around each difference (``…``)."""
    n = len(a)
    keep = [True] * n
    if n > limit:
        diffs = [k for k in range(n) if a[k] != b[k]]
        keep = [k < 4 or k >= n - 4 or any(abs(k - d) <= context for d in diffs) for k in range(n)]
    rows = ["", "", ""]
    for k in range(n):
        if not keep[k]:
            if k == 0 or keep[k - 1]:
                rows = [r + "… " for r in rows[:2]] + [rows[2] + "  "]
            continue
        rows = [rows[0] + a[k] + " ", rows[1] + b[k] + " ", rows[2] + ("^ " if a[k] != b[k] else "  ")]
    return rows[0].rstrip(), rows[1].rstrip(), rows[2].rstrip()


def format_pair(c: Comparison) -> list[str]:
    """The two prompts aligned, with the correct and the model's next tokens."""
    a, b, marks = _aligned(c.prompt_a.text, c.prompt_b.text)
    width = max(len(a), len("prompt"))
    rows = [f"     {'prompt':<{width}}  correct  model",
            f"  A  {a:<{width}}  {c.token(c.correct_a)!s:<7}  {c.token(c.predicted_a)}"
            + ("   (wrong)" if "a" in c.wrong_on else ""),
            f"  B  {b:<{width}}  {c.token(c.correct_b)!s:<7}  {c.token(c.predicted_b)}"
            + ("   (wrong)" if "b" in c.wrong_on else ""),
            f"     {marks}",
            f"     B rearranges the marked tokens of A; same tokens, same last token {c.prompt_a.text[-1]!r}"
            + (f"; {len(a.split()) - a.count('…')} of {len(c.prompt_a.text)} tokens shown" if "…" in a else "")]
    scale = c.tolerance / c.rtol if c.rtol else 0.0
    rows.append(f"  max |logit_A - logit_B| = {c.max_logit_diff:.3g}   "
                f"(tolerance {c.tolerance:.3g} = rtol {c.rtol:g} × logit scale {scale:.3g})")
    if c.float64_diff is not None:
        rows.append(f"  float64 copy of the model: relative difference {c.float64_diff:.3g} "
                    f"(tolerance {DEFAULT_RTOL[torch.float64]:g})")
    return rows


def render(report: SearchReport, what: str, verified: bool | None) -> str:
    head = f"task     : {report.task}, n = {report.n_digits} (prompts {compact_template(report.template)})"
    mode = "exhaustive" if report.mode == "exhaustive" else "guided random"
    lines = [head, f"model    : {what}", f"           {report.model_note}",
             f"search   : {mode}; {report.prompts_evaluated} prompts evaluated, "
             f"{report.pairs_compared} pairs compared", ""]
    if report.certificate is not None:
        c = report.certificate
        lines = ["Proposition 5.2 counterexample", ""] + lines + format_pair(c)
        lines += [f"  the model is wrong on: {', '.join(w.upper() for w in c.wrong_on)}",
                  f"  certificate re-verified from scratch: {'yes' if verified else 'NO'}", ""]
        lines += textwrap.wrap("why: " + INVARIANCE, 100, subsequent_indent="     ")
    else:
        lines = ["No counterexample: " + report.summary().split(": ", 1)[1], ""] + lines
        if report.closest is not None:
            lines.append("closest pair (smallest logit difference relative to the tolerance):")
            lines += format_pair(report.closest)
            c = report.closest
            if not c.identical:
                lines.append("  the logits differ by more than float rounding, so this pair is no counterexample")
            elif c.float64_diff is not None and c.float64_diff > DEFAULT_RTOL[torch.float64]:
                lines.append(f"  the logits agree within the tolerance, but a float64 copy of the model tells the "
                             f"prompts apart (relative difference {c.float64_diff:.3g}): rounding hid an order effect")
            else:
                lines.append("  the logits agree, but the model is right on both prompts")
    return "\n".join(lines)


BYTES_PER_DIGIT = 200  # the search holds a few int64 token and ID arrays of 2N entries per candidate


def require_pass_memory(model: Any, task: Any, digits: int) -> None:
    """Refuse, before the first forward pass, a search whose passes (:func:`chunk_prompts` prompts of the
    task's length at once) would not fit the free memory (``TransformerConfig.activation_bytes``)."""
    from constructions.nope.search import SearchSpace, chunk_prompts
    from lengthgen.model import Transformer

    if isinstance(model, Transformer):
        seq = len(SearchSpace(task, digits).base)
        require_memory(model.cfg.activation_bytes(chunk_prompts(seq), seq),
                       f"a search over {digits}-digit inputs ({chunk_prompts(seq)} prompts of {seq} tokens per pass)")


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A tqdm bar on stderr over the prompts evaluated (the callback :func:`search` takes), or None; on
    long prompts it also shows how far the attention of the current pass has come."""
    if not enabled:
        yield None
        return
    from tqdm import tqdm

    from lengthgen.attention import report_progress

    bar = tqdm(desc="searching", unit="prompt", file=sys.stderr, leave=False, dynamic_ncols=True)

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    def within_pass(rows: int, total: int) -> None:  # long prompts: the attention's query chunks
        bar.set_postfix_str(f"attention {100 * rows // max(total, 1)}% of a pass")

    try:
        with report_progress(within_pass):
            yield update
    finally:
        bar.close()


def run(args: argparse.Namespace) -> int:
    from constructions.nope.search import search

    task = resolve_task(args.task)
    if args.budget is not None and args.budget < 2:
        raise BadInput(f"--budget must be at least 2, got {args.budget}")
    require_memory(BYTES_PER_DIGIT * args.digits, f"a search over {args.digits}-digit inputs")
    model, what, pos_ids_fn = load(args, task)
    require_pass_memory(model, task, args.digits)
    with progress_bar(not args.no_progress and sys.stderr.isatty()) as progress:
        report = search(model, task, args.digits, args.budget, seed=args.seed, rtol=args.rtol, pos_ids_fn=pos_ids_fn,
                        progress=progress)
    verified = None if report.certificate is None else report.certificate.verify(model, pos_ids_fn, args.rtol)
    if args.json:
        text = json.dumps({**report.to_dict(), "model": what, "verified": verified}, indent=2)
    else:
        text = render(report, what, verified)
    code = EXIT_COUNTEREXAMPLE if report.certificate is not None and verified else EXIT_DISTINGUISHED
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into head: the exit status still says what was found
        sys.stdout = None
    return code


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return run(args)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except (UsageError, ValueError) as exc:  # BadInput, WeightFileError, CapacityError are ValueErrors
        return fail(PROG, str(exc))
    except Exception as exc:  # never a traceback
        print(f"internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
