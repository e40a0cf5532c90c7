"""Proposition 5.2, checked symbolically (theorem-5-1-addition.md §5, proof steps 1–3).

A tiny 1-layer decoder-only transformer whose every weight is a sympy symbol — token embedding,
(optional) position embedding, one or more attention heads with softmax, residual connections,
optional LayerNorm, an MLP with an *undefined* activation φ, unembedding — is written out as exact
expressions for the logits at the last position. For a prompt and a permutation of it with the same
last token, the expressions are the same expression when there is no positional information (sympy's
canonical ordering of sums makes them structurally identical; ``simplify`` of the difference is the
fallback). Once a position embedding is added, or the last token differs, they are not: the difference
is evaluated at a random rational point, with φ = tanh, to a nonzero number (a witness that the two
functions differ). Runs in about a second.

``python -m constructions.nope_symbolic`` prints the three checks.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass

import sympy as sp

PHI = sp.Function("phi")


def _matrix(name: str, rows: int, cols: int) -> list[list[sp.Symbol]]:
    return [[sp.Symbol(f"{name}_{i}_{j}") for j in range(cols)] for i in range(rows)]


def _vecmat(x: list[sp.Expr], W: list[list[sp.Expr]]) -> list[sp.Expr]:
    return [sp.Add(*[x[i] * W[i][j] for i in range(len(x))]) for j in range(len(W[0]))]


def _layernorm(x: list[sp.Expr], d: int) -> list[sp.Expr]:
    mean = sp.Add(*x) / d
    var = sp.Add(*[(xi - mean) ** 2 for xi in x]) / d
    inv = 1 / sp.sqrt(var + sp.Rational(1, 100000))
    return [(xi - mean) * inv * sp.Symbol(f"ln_w_{i}") + sp.Symbol(f"ln_b_{i}") for i, xi in enumerate(x)]


def last_logits(
    tokens: tuple[int, ...], vocab: int = 3, d_model: int = 2, n_heads: int = 1, d_head: int = 2,
    d_mlp: int = 2, positional: bool = False, layernorm: bool = False,
) -> list[sp.Expr]:
    """The logits at the last position of ``tokens`` as sympy expressions in the model's weights.

    Every position's residual is E[token] (+ P[position] when ``positional``); the last position
    attends causally to all of them with softmax(q·k); then residual, (LayerNorm,) MLP with φ, residual,
    (LayerNorm,) unembedding. Only the last position is computed: in a 1-layer model nothing else
    reaches it."""
    if not tokens or max(tokens) >= vocab:
        raise ValueError(f"tokens must be non-empty ids below {vocab}")
    E, P = _matrix("E", vocab, d_model), _matrix("P", len(tokens), d_model)
    resid = [[E[t][i] + (P[p][i] if positional else 0) for i in range(d_model)] for p, t in enumerate(tokens)]
    norm = (lambda x: _layernorm(x, d_model)) if layernorm else (lambda x: x)
    xs = [norm(x) for x in resid]
    last = xs[-1]
    attn = [sp.Integer(0)] * d_model
    for h in range(n_heads):
        Q, K, V = (_matrix(f"{w}{h}", d_model, d_head) for w in "QKV")
        O = _matrix(f"O{h}", d_head, d_model)
        q = _vecmat(last, Q)
        weights = [sp.exp(sp.Add(*[qi * ki for qi, ki in zip(q, _vecmat(x, K))])) for x in xs]
        total = sp.Add(*weights)
        z = [sp.Add(*[w * v[j] for w, v in zip(weights, (_vecmat(x, V) for x in xs))]) / total for j in range(d_head)]
        attn = [a + o for a, o in zip(attn, _vecmat(z, O))]
    mid = [r + a for r, a in zip(resid[-1], attn)]
    W_in, W_out = _matrix("Win", d_model, d_mlp), _matrix("Wout", d_mlp, d_model)
    hidden = [PHI(u + sp.Symbol(f"bin_{j}")) for j, u in enumerate(_vecmat(norm(mid), W_in))]
    post = [m + o for m, o in zip(mid, _vecmat(hidden, W_out))]
    return _vecmat(norm(post), _matrix("U", d_model, vocab))


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


def _witness(a: list[sp.Expr], b: list[sp.Expr], seed: int) -> float:
    """max |a_i - b_i| at a random rational point (30-digit floats), with φ = tanh."""
    rng = random.Random(seed)
    free = sorted(set().union(*(e.free_symbols for e in a + b)), key=str)
    point = {s: sp.Float(sp.Rational(rng.randint(-9, 9), rng.randint(1, 9)), 30) for s in free}
    diffs = []
    for x, y in zip(a, b):
        value = (x - y).replace(PHI, sp.tanh).xreplace(point)
        diffs.append(abs(float(value if value.is_Number else sp.N(value, 30))))
    return max(diffs)


def check_invariance(
    prompt_a: tuple[int, ...] = (0, 1, 2, 1), prompt_b: tuple[int, ...] = (2, 0, 1, 1), *, positional: bool = False,
    layernorm: bool = False, vocab: int = 3, seed: int = 0, **dims: int,
) -> InvarianceCheck:
    """Compare the symbolic last-position logits of two prompts (see the module docstring)."""
    start = time.perf_counter()
    a = last_logits(tuple(prompt_a), vocab, positional=positional, layernorm=layernorm, **dims)
    b = last_logits(tuple(prompt_b), vocab, positional=positional, layernorm=layernorm, **dims)
    same = all(x == y for x, y in zip(a, b))  # canonical forms: equal sums of the same terms
    witness = None
    if not same:
        witness = _witness(a, b, seed)
        if witness == 0.0:  # no witness at this point: ask sympy (slow, never needed so far)
            same = all(sp.simplify(x - y) == 0 for x, y in zip(a, b))
            witness = None if same else 0.0
    return InvarianceCheck(tuple(prompt_a), tuple(prompt_b), positional, layernorm, same, witness,
                           time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    """Print the symbolic checks; exit 0 when they come out as Proposition 5.2 says."""
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
