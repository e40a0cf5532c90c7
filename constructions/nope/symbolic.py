"""Proposition 5.2, checked symbolically (docs/proposition-5-2.md, "The symbolic check").

A tiny 1-layer decoder-only transformer whose every weight is a sympy symbol — token embedding,
(optional) position embedding, one or more attention heads with softmax, residual connections,
optional LayerNorm, an MLP with an *undefined* activation φ, unembedding — is written out as exact
expressions for the logits at the last position. For a prompt and a permutation of it with the same
last token, the expressions are the same expression when there is no positional information (sympy's
canonical ordering of sums makes them structurally identical, which is the
proof). Once a position embedding is added, or the last token differs, they are not: the difference
is evaluated at a random rational point, with φ = tanh, to a nonzero number (a witness that the two
functions differ). Each check takes well under a second.

``python -m constructions.nope.symbolic`` prints the three checks.
"""
from __future__ import annotations

import random
import textwrap
import time
from dataclasses import dataclass
from typing import Callable

import sympy as sp

PHI = sp.Function("phi")


def _vecmat(x: list[sp.Expr], W: list[list[sp.Expr]]) -> list[sp.Expr]:
    return [sp.Add(*[x[i] * W[i][j] for i in range(len(x))]) for j in range(len(W[0]))]


def last_logits(
    tokens: tuple[int, ...], vocab: int = 3, d_model: int = 2, n_heads: int = 1, d_head: int = 2,
    d_mlp: int = 2, positional: bool = False, layernorm: bool = False,
    values: dict[str, float] | None = None, phi: Callable[[sp.Expr], sp.Expr] = PHI,
) -> list[sp.Expr]:
    """The logits at the last position of ``tokens`` as sympy expressions in the model's weights.

    Every position's residual is E[token] (+ P[position] when ``positional``); the last position
    attends causally to all of them with softmax(q·k) (no score scaling); then residual, (LayerNorm,)
    MLP φ(x·W_in + b_in)·W_out, residual, (LayerNorm,) unembedding x·U. Weight ``E_i_j`` is row i,
    column j of E (likewise ``Q0_i_j``, ``Win_i_j``, ``ln_w_i``, …; one LayerNorm gain/bias shared by
    the three norms). Only the last position is computed: in a 1-layer model nothing else reaches it.

    ``values`` (weight name -> number) and ``phi`` evaluate the same computation numerically; names
    missing from ``values`` count as 0."""
    if not tokens or max(tokens) >= vocab:
        raise ValueError(f"tokens must be non-empty ids below {vocab}")

    def w(name: str) -> sp.Expr:
        return sp.Symbol(name) if values is None else sp.Float(values.get(name, 0.0), 30)

    def matrix(name: str, rows: int, cols: int) -> list[list[sp.Expr]]:
        return [[w(f"{name}_{i}_{j}") for j in range(cols)] for i in range(rows)]

    def norm(x: list[sp.Expr]) -> list[sp.Expr]:
        if not layernorm:
            return x
        mean = sp.Add(*x) / d_model
        inv = 1 / sp.sqrt(sp.Add(*[(xi - mean) ** 2 for xi in x]) / d_model + sp.Rational(1, 100000))
        return [(xi - mean) * inv * w(f"ln_w_{i}") + w(f"ln_b_{i}") for i, xi in enumerate(x)]

    E, P = matrix("E", vocab, d_model), matrix("P", len(tokens), d_model)
    resid = [[E[t][i] + (P[p][i] if positional else 0) for i in range(d_model)] for p, t in enumerate(tokens)]
    xs = [norm(x) for x in resid]
    attn = [sp.Integer(0)] * d_model
    for h in range(n_heads):
        Q, K, V = (matrix(f"{name}{h}", d_model, d_head) for name in "QKV")
        O = matrix(f"O{h}", d_head, d_model)
        q = _vecmat(xs[-1], Q)
        scores = [sp.exp(sp.Add(*[qi * ki for qi, ki in zip(q, _vecmat(x, K))])) for x in xs]
        total = sp.Add(*scores)
        vs = [_vecmat(x, V) for x in xs]
        z = [sp.Add(*[s * v[j] for s, v in zip(scores, vs)]) / total for j in range(d_head)]
        attn = [a + o for a, o in zip(attn, _vecmat(z, O))]
    mid = [r + a for r, a in zip(resid[-1], attn)]
    hidden = [phi(u + w(f"bin_{j}")) for j, u in enumerate(_vecmat(norm(mid), matrix("Win", d_model, d_mlp)))]
    post = [m + o for m, o in zip(mid, _vecmat(hidden, matrix("Wout", d_mlp, d_model)))]
    return _vecmat(norm(post), matrix("U", d_model, vocab))


@dataclass(frozen=True)
class InvarianceCheck:
    """Outcome of comparing the last-position logits of two prompts symbolically."""

    prompt_a: tuple[int, ...]
    prompt_b: tuple[int, ...]
    positional: bool
    layernorm: bool
    same_expression: bool  #: sympy proved logits_a == logits_b for every weight value
    witness: float | None  #: otherwise max |logits_a - logits_b| at a random point (phi = tanh); > 0
    seconds: float

    def describe(self) -> str:
        setting = ("with a position embedding" if self.positional else "no positional information") + (
            ", LayerNorm" if self.layernorm else "")
        verdict = ("same expression (Proposition 5.2)" if self.same_expression
                   else f"different: at a random point they differ by {self.witness:.3g}")
        return f"{self.prompt_a} vs {self.prompt_b}, {setting}: {verdict}  [{self.seconds:.2f} s]"


def _witness(a: list[sp.Expr], b: list[sp.Expr], seed: int, points: int = 5) -> float:
    """max |a_i - b_i| at random rational points in [-1, 1] (30-digit floats), with φ = tanh; the
    first point with a nonzero difference is returned (0.0 if none of ``points`` points has one).

    Small weights keep the attention scores moderate: with large ones softmax saturates on one key
    and the difference can underflow even though the functions differ."""
    rng = random.Random(seed)
    free = sorted(set().union(*(e.free_symbols for e in a + b)), key=str)
    diffs = [sp.Add(x, -y) for x, y in zip(a, b)]
    for _ in range(points):
        point = {s: sp.Float(sp.Rational(rng.randint(-10, 10), 10), 30) for s in free}
        values = [d.xreplace(point).replace(PHI, sp.tanh) for d in diffs]
        best = max(abs(float(v if v.is_Number else sp.N(v, 30))) for v in values)
        if best > 0:
            return best
    return 0.0


def check_invariance(
    prompt_a: tuple[int, ...] = (0, 1, 2, 1), prompt_b: tuple[int, ...] = (2, 0, 1, 1), *, positional: bool = False,
    layernorm: bool = False, vocab: int = 3, seed: int = 0, **dims: int,
) -> InvarianceCheck:
    """Compare the symbolic last-position logits of two prompts (see the module docstring).

    ``same_expression`` is True only when sympy's canonical forms coincide (a proof of equality for
    every weight value); otherwise ``witness`` is a nonzero difference at a random point (a proof
    that they differ), or 0.0 when five random points found none (undecided; not seen in practice)."""
    start = time.perf_counter()
    a = last_logits(tuple(prompt_a), vocab, positional=positional, layernorm=layernorm, **dims)
    b = last_logits(tuple(prompt_b), vocab, positional=positional, layernorm=layernorm, **dims)
    same = all(x == y for x, y in zip(a, b))  # canonical forms: equal sums of the same terms
    witness = None if same else _witness(a, b, seed)
    return InvarianceCheck(tuple(prompt_a), tuple(prompt_b), positional, layernorm, same, witness,
                           time.perf_counter() - start)


PROG = "python -m constructions.nope.symbolic"


def build_parser() -> "ArgumentParser":
    from lengthgen.cli import ArgumentParser

    return ArgumentParser(
        prog=PROG,
        description=textwrap.fill("Proposition 5.2 (Cho et al. 2024, Position Coupling) in symbols: write the last-position "
        "logits of a tiny 1-layer transformer as sympy expressions in its weights and compare them for a "
        "prompt and a permutation of it that ends in the same token. Four checks: without positional "
        "information (plain, and with LayerNorm) the expressions are identical; with a position embedding, "
        "or with a different last token, they differ at a random point. See docs/proposition-5-2.md.", 100),
        epilog="exit status: 0 the four checks come out as Proposition 5.2 says, 1 they do not, 2 bad input",
    )


def main(argv: list[str] | None = None) -> int:
    """Print the symbolic checks; exit 0 when they come out as Proposition 5.2 says."""
    from lengthgen.cli import run_cli

    return run_cli(PROG, lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    build_parser().parse_args(argv)  # only --help; anything else is bad input (exit 2)
    checks = [
        check_invariance(),
        check_invariance(layernorm=True),
        check_invariance(positional=True),
        check_invariance((0, 1, 2, 1), (0, 1, 1, 2)),
    ]
    for c in checks:
        print(c.describe())
    expected = [True, True, False, False]
    ok = [c.same_expression for c in checks] == expected and all(c.witness for c in checks[2:])
    print("as Proposition 5.2 says" if ok else "UNEXPECTED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
