"""An adversarial search inside the local configurations that the trained-model certificate leaves
unproven (``python -m lengthgen.certify --attack K``).

An unproven configuration fixes the digits of a window of significances and the carry into it;
the certificate's proof fails because it treats every key outside the window pessimally. Random
operand pairs with those window digits (:func:`lengthgen.proof.counterexamples.realize`) are one
test of whether the model really fails there; this module is a stronger one. From such a pair it
runs a greedy coordinate descent on the model's own answer margin at the configuration's answer
position r,

    margin(a, b) = logit[target] − max_{o ≠ target} logit[o]   (teacher-forced, float64),

over the digits outside the window: each sweep visits every such digit of both operands in turn
and moves it to the value (of the ten, or the nine non-zero ones for a leading digit) that lowers
the margin most, keeping the carry into the window fixed, so every pair visited stays inside the
configuration. The model is wrong at r, with the project's rule (:mod:`lengthgen.decode`), exactly
where margin ≤ the decision margin; the pairs found are confirmed by
:func:`lengthgen.proof.counterexamples.wrong_positions` before they are printed.

What the search proves is only what it finds: a counterexample is real, and the smallest margin
it reaches is an upper bound on the model's worst margin inside the configurations it searched
(where the certificate's lower bound failed). A large one says that the pessimism of the proof,
not the model, is what is left; it says nothing about configurations it did not search.
"""
from __future__ import annotations

import copy
import sys
from dataclasses import dataclass

import numpy as np
import torch

from ..data import layout
from .counterexamples import realize
from .trained import Layout, PositionResult

TOKENS_PER_CHUNK = 1 << 15  # tokens per forward pass (rows × sequence length)


@dataclass
class AttackResult:
    """The outcome of the search at one answer position r. Inside the unproven configurations:
    how many were searched, the smallest margin reached there and its operand pair (MSB-first
    strings). Over all pairs: the smallest margin of the unconstrained descents and its pair. And
    every pair either search found with margin ≤ the decision margin, as (a, b)."""

    r: int
    searched: int
    min_margin: float
    worst_pair: tuple[str, str] | None
    global_min_margin: float
    global_worst_pair: tuple[str, str] | None
    wrong_pairs: list[tuple[str, str]]


class UnsoundProof(RuntimeError):
    """A pair the model gets wrong lies in a configuration the certificate proved."""


def digits_of(operand: str) -> np.ndarray:
    """An MSB-first operand string -> its digits indexed by significance (int64)."""
    return np.array([int(x) for x in operand[::-1]], dtype=np.int64)


def as_strings(a: np.ndarray, b: np.ndarray) -> tuple[str, str]:
    """Digit arrays indexed by significance -> MSB-first operand strings."""
    return "".join(str(int(x)) for x in a[::-1]), "".join(str(int(x)) for x in b[::-1])


class MarginOracle:
    """Teacher-forced margins of one model on n-digit addition: at answer position ``r``, or, with
    ``r=None``, the smallest over every answer position (one forward pass over the whole answer)."""

    def __init__(self, model: torch.nn.Module, lay: Layout, r: int | None, scheme: str,
                 dtype: torch.dtype = torch.float64):
        self.model = copy.deepcopy(model).to(dtype).eval()
        self.lay, self.r, self.scheme = lay, r, scheme
        prompt = 2 * lay.n + 3  # $ a + b =
        self.first = prompt - 1 if r is None else prompt - 1 + r  # the first query scored
        self.length = prompt + (lay.n + 1 if r is None else r)  # tokens fed: up to the last query scored

    @torch.inference_mode()
    def position_margins(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """[K, P] margins of the pairs a[K, n], b[K, n] (digits indexed by significance) at each
        answer position scored (P = 1 for one r, N + 2 for all); the rows are laid out by
        :func:`lengthgen.data.layout`, as ``lengthgen.evaluate`` lays out its test sets."""
        out = []
        rows = max(1, TOKENS_PER_CHUNK // self.length)
        for i in range(0, len(a), rows):
            k = len(a[i:i + rows])
            tokens, pos, _ = layout(a[i:i + rows], b[i:i + rows], np.full(k, self.lay.n), self.scheme,
                                    self.lay.s).to_torch(self.model.device)
            logits = self.model(tokens[:, :self.length], pos[:, :self.length], logits_from=self.first).double()
            target = tokens[:, self.first + 1:self.length + 1, None]
            right = logits.gather(2, target)[..., 0]
            others = logits.scatter(2, target, -torch.inf).max(dim=2).values
            out.append((right - others).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 1))

    def margins(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """[K] the smallest margin of each pair over the answer positions scored."""
        return self.position_margins(a, b).min(axis=1)


def carries_into(a: np.ndarray, b: np.ndarray, lo: int) -> np.ndarray:
    """[K] the carry into significance ``lo`` of each pair (digits indexed by significance)."""
    carry = np.zeros(len(a), dtype=np.int64)
    for j in range(lo):
        carry = (a[:, j].astype(np.int64) + b[:, j] + carry >= 10).astype(np.int64)
    return carry


def descend(oracle: MarginOracle, a: np.ndarray, b: np.ndarray, lo: int, width: int, sweeps: int,
            rng: np.random.Generator, progress: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy coordinate descent of the margin from the pairs a[K, n], b[K, n] over the digits
    outside significances lo … lo + width − 1, the carry into lo held fixed. Returns the final
    pairs and their margins; a sweep that lowers no row's margin ends the search (``progress``:
    a bar over the digits visited, on stderr)."""
    n = oracle.lay.n
    a, b = a.copy(), b.copy()
    carry = carries_into(a, b, lo)
    current = oracle.margins(a, b)
    free = [j for j in range(n) if not lo <= j < lo + width]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=sweeps * 2 * len(free), desc="adversarial search", unit="digit", file=sys.stderr,
                   dynamic_ncols=True)
    for _ in range(sweeps):
        moved = False
        for operand, j in rng.permutation([(op, j) for op in range(2) for j in free]):
            if bar is not None:
                bar.update()
                bar.set_postfix(margin=f"{current.min():.3g}", refresh=False)
            values = oracle.lay.digit_set(int(j))
            cand_a = np.repeat(a[:, None], len(values), axis=1)  # [K, V, n]
            cand_b = np.repeat(b[:, None], len(values), axis=1)
            (cand_a if operand == 0 else cand_b)[:, :, j] = values[None]
            cand_a, cand_b = cand_a.reshape(-1, n), cand_b.reshape(-1, n)
            m = oracle.margins(cand_a, cand_b)
            if j < lo:  # a digit below the window may change the carry into it
                m = np.where(carries_into(cand_a, cand_b, lo) == np.repeat(carry, len(values)), m, np.inf)
            m = m.reshape(len(a), len(values))
            best = np.argmin(m, axis=1)
            better = m[np.arange(len(a)), best] < current
            if better.any():
                moved = True
                rows = np.flatnonzero(better)
                pick = rows * len(values) + best[rows]
                a[rows], b[rows] = cand_a[pick], cand_b[pick]
                current[rows] = m[rows, best[rows]]
        if not moved:
            break
    if bar is not None:
        bar.close()
    return a, b, current


def configuration_of(a: np.ndarray, b: np.ndarray, lo: int, hi: int) -> tuple:
    """The certificate's name of a pair's local configuration (:class:`PositionResult`.failed):
    per significance of the window [lo, hi] the smaller and the larger digit (swapping a_j and b_j
    at one ID leaves the keys' multiset, hence the model, unchanged), and the carry into lo."""
    window_a, window_b = a[lo:hi + 1], b[lo:hi + 1]
    return (tuple(int(x) for x in np.minimum(window_a, window_b)), tuple(int(x) for x in np.maximum(window_a, window_b)),
            int(carries_into(a[None], b[None], lo)[0]))


def random_pairs(lay: Layout, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """k pairs of the evaluation distribution (leading digits non-zero when n > 1), [k, n] each."""
    a, b = rng.integers(0, 10, size=(2, k, lay.n))
    if lay.n > 1:
        a[:, -1], b[:, -1] = rng.integers(1, 10, size=(2, k))
    return a, b


def check_against(res: PositionResult, a: np.ndarray, b: np.ndarray, margins: np.ndarray, margin_limit: float,
                  slack: float = 1e-9) -> None:
    """Raise :class:`UnsoundProof` where a pair in a configuration the certificate proved is
    answered wrong (margin ≤ ``margin_limit``) or has a margin below the smallest lower bound
    the certificate proved there (``res.min_margin``, less ``slack`` for the float64 forward pass)."""
    lo, hi = res.window
    unproven = {(tuple(int(x) for x in fa), tuple(int(x) for x in fb), int(c)) for fa, fb, c in res.failed}
    for j in np.argsort(margins, kind="stable"):
        config = configuration_of(a[j], b[j], lo, hi)
        if config in unproven:
            continue
        if margins[j] <= margin_limit or margins[j] < res.min_margin - slack:
            x, y = as_strings(a[j], b[j])
            raise UnsoundProof(f"answer position {res.r}: {x} + {y} has margin {margins[j]:.6g} in the forward pass, "
                               f"but its configuration {config} was proven with a margin of at least "
                               f"{res.min_margin:.6g}; the certificate is unsound here, please report it")
        break  # the pairs are sorted by margin: the first proven one is the smallest


def attack(model: torch.nn.Module, lay: Layout, res: PositionResult, scheme: str, configurations: int,
           sweeps: int = 3, tries: int = 2, seed: int = 0, margin_limit: float = 1e-3,
           dtype: torch.dtype = torch.float64) -> AttackResult:
    """Two searches at the answer position of ``res``: :func:`descend` from ``tries`` random
    realizations of each of its first ``configurations`` unproven configurations (worst first),
    the window held; and from ``configurations`` random pairs with every digit free, whose starts
    and end points :func:`check_against` holds to the certificate (the pairs in proven configurations must
    keep at least the proven margin). ``margin_limit`` is the decision margin: a pair whose margin
    is at most it is answered wrong."""
    rng = np.random.default_rng(seed)
    oracle = MarginOracle(model, lay, res.r, scheme, dtype)
    lo, hi = res.window
    chosen = res.failed[:configurations]
    min_margin, worst, wrong = np.inf, None, set()
    if chosen:
        pairs = [realize(lay, lo, a_w, b_w, carry, rng) for a_w, b_w, carry in chosen for _ in range(tries)]
        a = np.stack([digits_of(x) for x, _ in pairs])
        b = np.stack([digits_of(y) for _, y in pairs])
        a, b, m = descend(oracle, a, b, lo, hi - lo + 1, sweeps, rng)
        i = int(np.argmin(m))
        min_margin, worst = float(m[i]), as_strings(a[i], b[i])
        wrong |= {as_strings(a[j], b[j]) for j in np.flatnonzero(m <= margin_limit)}
    a, b = random_pairs(lay, configurations, rng)
    check_against(res, a, b, oracle.margins(a, b), margin_limit)  # the starts: mostly proven configurations
    a, b, m = descend(oracle, a, b, 0, 0, sweeps, rng)
    i = int(np.argmin(m)) if len(m) else None
    check_against(res, a, b, m, margin_limit)
    wrong |= {as_strings(a[j], b[j]) for j in np.flatnonzero(m <= margin_limit)}
    return AttackResult(res.r, len(chosen), min_margin, worst, float(m[i]) if i is not None else np.inf,
                        as_strings(a[i], b[i]) if i is not None else None, sorted(wrong))


@dataclass
class AnswerAttack:
    """The search over whole answers (every answer position at once, no proof needed): the
    starts, the smallest margin reached, its pair and answer position, and the pairs answered
    wrong."""

    starts: int
    min_margin: float
    worst_pair: tuple[str, str]
    worst_position: int
    wrong_pairs: list[tuple[str, str]]


def attack_answer(model: torch.nn.Module, lay: Layout, scheme: str, starts: int, sweeps: int = 3, seed: int = 0,
                  margin_limit: float = 1e-3, dtype: torch.dtype = torch.float64,
                  progress: bool = False) -> AnswerAttack:
    """:func:`descend` of the smallest margin over every answer position from ``starts`` random
    pairs, every digit free: for lengths the certificate is too slow for, a search for inputs
    that random sampling misses. Finds counterexamples; proves nothing."""
    rng = np.random.default_rng(seed)
    oracle = MarginOracle(model, lay, None, scheme, dtype)
    a, b = random_pairs(lay, starts, rng)
    a, b, m = descend(oracle, a, b, 0, 0, sweeps, rng, progress)
    i = int(np.argmin(m))
    worst_position = int(np.argmin(oracle.position_margins(a[i:i + 1], b[i:i + 1])[0]))
    wrong = sorted({as_strings(a[j], b[j]) for j in np.flatnonzero(m <= margin_limit)})
    return AnswerAttack(starts, float(m[i]), as_strings(a[i], b[i]), worst_position, wrong)
