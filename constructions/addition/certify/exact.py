"""Theorem 5.1's construction in exact arithmetic with hard-max attention.

The weights come from :func:`constructions.addition.weights.weight_entries` with ``sqrt=sympy.sqrt``
and ``number=sympy.nsimplify`` and a *symbolic* sharpness ``M > 0``: every attention score
``x_i W_Q W_K^T x_j`` is then ``M`` times a rational number (sympy simplifies √M·√M = M and
√(MP)·√(MP) = MP), so the set of maximal-score keys — the hard-max limit of softmax as M → ∞
(uniform over the maximal keys; docs/theorem-5-1.md, "The error bound") — is the same for every
M > 0. All other weights are rationals (0.1 → 1/10, the trapezoid offsets, the EOS ramp). The
forward pass then runs in ``fractions.Fraction`` (the same rational numbers, converted from sympy
for speed): no floating point anywhere. Every answer token (and the final EOS) must win by the
project's one rule for "exact" (:func:`lengthgen.decode.decided_argmax`: its logit beats every
other logit by more than the decision margin, compared exactly) and equal the digits of the
Python integer a + b.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from fractions import Fraction

import sympy

from lengthgen.decode import DECISION_MARGIN
from lengthgen.positions import coupled_addition_ids
from lengthgen.tasks import ADDITION

from ..layout import START_ID, position_dims
from ..weights import weight_entries

Vec = dict[int, Fraction]


def _frac(value) -> Fraction:
    value = sympy.nsimplify(value)
    if not value.is_Rational:
        raise ValueError(f"weight {value} is not rational")
    return Fraction(int(value.p), int(value.q))


def _rows(builder) -> dict[int, Vec]:
    """Sparse rows of a MatrixBuilder as exact fractions."""
    rows: dict[int, Vec] = {}
    for (r, c), value in builder.entries.items():
        if value != 0:
            rows.setdefault(r, {})[c] = _frac(value)
    return rows


@dataclass
class ExactModel:
    """Exact weights: sparse rational rows, and per head the score form W_Q W_K^T / M."""

    d_model: int
    n_positions: int
    E: dict[int, Vec]
    pos: dict[int, Vec]
    form: list[dict[int, Vec]]  # per head: row r -> {col: rational}, score = M · x B x'
    V: list[dict[int, Vec]]
    O: list[dict[int, Vec]]
    W_in: dict[int, Vec]
    W_out: dict[int, Vec]
    W_U: dict[int, Vec]
    _scores: dict = field(default_factory=dict)
    _ffn: dict = field(default_factory=dict)
    _outs: dict = field(default_factory=dict)
    _embeds: dict = field(default_factory=dict)

    @classmethod
    def build(cls, d_model: int, n_positions: int) -> "ExactModel":
        M = sympy.Symbol("M", positive=True)
        W = weight_entries(d_model, M, n_positions, sqrt=sympy.sqrt, number=sympy.nsimplify)
        forms = []
        for h in range(2):
            q, k = W[f"W_Q{h}"].entries, W[f"W_K{h}"].entries
            form: dict[int, Vec] = {}
            for (r, e), qv in q.items():
                for (s, e2), kv in k.items():
                    if e == e2:
                        ratio = sympy.simplify(qv * kv / M)
                        if ratio.free_symbols:
                            raise ValueError(f"score term {qv}·{kv} is not M times a constant")
                        form.setdefault(r, {})
                        form[r][s] = form[r].get(s, Fraction(0)) + _frac(ratio)
            forms.append(form)
        return cls(d_model, n_positions, _rows(W["W_E"]), _rows(W["W_pos"]), forms,
                   [_rows(W["W_V0"]), _rows(W["W_V1"])], [_rows(W["W_O0"]), _rows(W["W_O1"])],
                   _rows(W["W_in"]), _rows(W["W_out"]), _rows(W["W_U"]))

    def embed(self, tok: int, pid: int) -> Vec:
        if (tok, pid) not in self._embeds:
            x = dict(self.E.get(tok, {}))
            for c, v in self.pos.get(pid, {}).items():
                x[c] = x.get(c, Fraction(0)) + v
            self._embeds[(tok, pid)] = {c: v for c, v in x.items() if v}
        return self._embeds[(tok, pid)]

    def score(self, h: int, query: tuple[int, int], key: tuple[int, int]) -> Fraction:
        """Score / M of a query and a key, each given as (token, position ID); memoized."""
        memo = (h, query, key)
        if memo not in self._scores:
            xq, xk = self.embed(*query), self.embed(*key)
            self._scores[memo] = sum((v * b * xk.get(s, 0) for r, v in xq.items()
                                      for s, b in self.form[h].get(r, {}).items()), Fraction(0))
        return self._scores[memo]

    def resid_logits(self, query: tuple[int, int], chosen: tuple[tuple[tuple[int, int], ...], ...]) -> list[Fraction]:
        """Logits at a query whose heads attend uniformly to the ``chosen`` keys (memoized)."""
        memo = (query, chosen)
        if memo not in self._ffn:
            resid = dict(self.embed(*query))
            for h, keys in enumerate(chosen):
                for key in keys:
                    for c, v in self.head_out(h, key).items():
                        resid[c] = resid.get(c, Fraction(0)) + v / len(keys)
            content = tuple(sorted((c, v) for c, v in resid.items() if v))
            if content not in self._ffn:
                self._ffn[content] = self.logits(dict(content))
            self._ffn[memo] = self._ffn[content]
        return self._ffn[memo]

    def head_out(self, h: int, key: tuple[int, int]) -> Vec:
        if (h, key) not in self._outs:
            out: Vec = {}
            for r, xv in self.embed(*key).items():
                for e, w in self.V[h].get(r, {}).items():
                    for c, o in self.O[h].get(e, {}).items():
                        out[c] = out.get(c, Fraction(0)) + xv * w * o
            self._outs[(h, key)] = out
        return self._outs[(h, key)]

    def logits(self, resid: Vec) -> list[Fraction]:
        pre: Vec = {}
        for r, x in resid.items():
            for u, w in self.W_in.get(r, {}).items():
                pre[u] = pre.get(u, Fraction(0)) + x * w
        post = dict(resid)
        for u, p in pre.items():
            if p > 0:
                for c, w in self.W_out.get(u, {}).items():
                    post[c] = post.get(c, Fraction(0)) + p * w
        logits = [Fraction(0)] * len(ADDITION.vocab)
        for r, x in post.items():
            for t, w in self.W_U.get(r, {}).items():
                logits[t] += x * w
        return logits

    def predict(self, tokens: list[int], ids: list[int], first: int,
                margin: float = DECISION_MARGIN) -> list[int | None]:
        """Teacher-forced hard-max predictions of positions first … len−2 (None: the top logit does
        not beat the runner-up by more than ``margin``, the rule of ``decided_argmax``)."""
        keys = list(zip(tokens, ids))
        preds: list[int | None] = []
        for i in range(first, len(tokens) - 1):
            chosen = []
            for h in range(2):
                scores = [self.score(h, keys[i], keys[j]) for j in range(i + 1)]
                top = max(scores)
                chosen.append(tuple(keys[j] for j, s in enumerate(scores) if s == top))
            preds.append(decided(self.resid_logits(keys[i], tuple(chosen)), margin))
        return preds


def decided(logits: list[Fraction], margin: float = DECISION_MARGIN) -> int | None:
    """The exact counterpart of :func:`lengthgen.decode.decided_argmax`: the index of the top
    logit if it exceeds the runner-up by more than ``margin`` (as an exact rational), else None."""
    ranked = sorted(range(len(logits)), key=logits.__getitem__, reverse=True)
    top, runner_up = logits[ranked[0]], logits[ranked[1]]
    return ranked[0] if top - runner_up > Fraction(margin) else None


def expected_answer(a: int, b: int, n: int) -> list[int]:
    """c_0 … c_n (the sum's digits, least significant first, zero-padded) and EOS, from Python ints."""
    return [ADDITION.vocabulary[ch] for ch in str(a + b).zfill(n + 1)[::-1]] + [ADDITION.EOS]


def check_pairs(model: ExactModel, n: int, pairs) -> tuple[int, list[tuple[int, int]]]:
    """(number checked, the pairs whose exact hard-max predictions differ from Python's a + b)."""
    ids = coupled_addition_ids(n, START_ID).tolist()
    wrong, count = [], 0
    for a, b in pairs:
        sa, sb = str(a).zfill(n), str(b).zfill(n)
        want = expected_answer(a, b, n)
        tokens = [ADDITION.BOS] + [int(c) for c in sa] + [ADDITION.PLUS] + [int(c) for c in sb] + [ADDITION.EQUALS]
        tokens += want
        if model.predict(tokens, ids, 2 * n + 2) != want:
            wrong.append((a, b))
        count += 1
    return count, wrong


def run_exact(d_model: int, exhaustive: int, sample_digits: list[int], samples: int, seed: int) -> int:
    lengths = list(range(1, exhaustive + 1)) + list(sample_digits)
    model = ExactModel.build(d_model, START_ID + max(lengths) + 1)
    print(f"exact arithmetic: sympy weights with symbolic M > 0, d_model = {d_model} (P = {position_dims(d_model)}); "
          "every score is M × a rational, so hard-max sets hold for all M; forward pass in fractions.Fraction")
    rng = random.Random(seed)
    total, failures = 0, []
    for n in lengths:
        if n <= exhaustive:
            pairs, what = ((a, b) for a in range(10**n) for b in range(10**n)), "all"
        else:
            pairs = [(rng.randrange(10**n), rng.randrange(10**n)) for _ in range(samples)]
            what = f"{samples} random (seed {seed})"
        count, wrong = check_pairs(model, n, pairs)
        total += count
        failures += wrong
        print(f"  n = {n}: {what} inputs -> {count - len(wrong)} of {count} agree with Python integers"
              + (f"; first wrong: {wrong[0][0]} + {wrong[0][1]}" if wrong else ""))
    if failures:
        print(f"FAIL: {len(failures)} of {total} additions disagree")
        return 1
    print(f"PASS: {total} additions, every answer token and EOS ahead of every other logit by more than "
          f"{DECISION_MARGIN} (exact rationals), no floating point anywhere")
    return 0
