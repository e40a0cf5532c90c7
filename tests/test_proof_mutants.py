"""Tests that kill the mutants of the shared attention proof (src/lengthgen/proof/keys.py,
attention.py) that the certificate tests let survive (docs/certificate.md, "Mutation testing").
Each expectation comes from outside the code under test: a brute-force sum over every position ID
in 50-digit mpmath, a float64 softmax over every input of a tiny format, or exact rationals."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import mpmath
import numpy as np
import pytest

from lengthgen.proof.interval import Iv
from lengthgen.proof.keys import position_key_alphabet, position_scores, query_vectors

mpmath.mp.dps = 50


def _key_weights(codes: np.ndarray, W_K: np.ndarray) -> SimpleNamespace:
    """Position rows ``W_pos[1:] = codes`` (ID 0 is the sink's row, all zero) read by one head's W_K."""
    W_pos = np.vstack([np.zeros(codes.shape[1]), codes])
    return SimpleNamespace(W_pos=W_pos, W_K=W_K[None])


def _exact_sums(alpha: np.ndarray, keys_matrix: np.ndarray) -> list[tuple[mpmath.mpf, int, mpmath.mpf]]:
    """Per query row: the best position score max_q π(q), its ID index, and log Σ_{q ≠ q*} e^{π(q) − π(q*)},
    in 50 digits from every ID's key vector (π(q) = α·κ_q); the inputs are dyadic, so π is exact."""
    out = []
    for a in alpha:
        pi = [mpmath.fsum(mpmath.mpf(float(x)) * mpmath.mpf(float(k)) for x, k in zip(a, row)) for row in keys_matrix]
        star = max(range(len(pi)), key=lambda i: pi[i])
        rest = mpmath.fsum(mpmath.exp(p - pi[star]) for i, p in enumerate(pi) if i != star)
        out.append((pi[star], star, mpmath.log(rest)))
    return out


# a full product of two key coordinates: K_0 = {-1, 1}, K_1 = {0, 1/2, 2}; every tuple is one ID
FULL_CODES = np.array([[a, b] for a in (-1.0, 1.0) for b in (0.0, 0.5, 2.0)])
ALPHA = np.array([[1.5, 0.75], [-2.0, 1.25], [0.25, -3.0], [1.5, -3.0], [1.5, 0.75]])


def test_the_position_bound_is_exact_on_a_full_product_of_codes() -> None:
    """Every tuple of entries is an ID, so Σ_{q≠q*} e^{π(q)−π(q*)} = ∏_e (1 + G_e) − 1 exactly
    (docs/certificate.md, "The argument", step 3): the bound must contain the brute-force sum and
    be within 10^-12 of it; π(q*) must be enclosed, q* found, and the gap be the runner-up's."""
    keys = position_key_alphabet(_key_weights(FULL_CODES, np.eye(2)), 0, np.arange(1, 7))
    assert keys.radix == [2, 3]
    for v, want in zip(keys.values, ([-1.0, 1.0], [0.0, 0.5, 2.0])):  # enclosures of the distinct values
        assert np.all(v.lo <= want) and np.all(want <= v.hi) and np.all(v.hi - v.lo < 1e-14)
    scores = position_scores(Iv.exact(ALPHA), keys)
    assert not scores.tie.any()
    for i, (best, star, log_rest) in enumerate(_exact_sums(ALPHA, FULL_CODES)):
        assert scores.best.lo[i] <= best <= scores.best.hi[i]
        assert scores.best.hi[i] - scores.best.lo[i] < 1e-12
        assert log_rest <= scores.log_others[i] <= log_rest + 1e-12
        # the winning ID's code: the entries' ranks in mixed radix (2, 3) point back at ID star + 1
        assert keys.ids[keys.order[np.searchsorted(keys.sorted_codes, scores.top_code[i])]] == star + 1
        gaps = sorted(float(best - mpmath.fsum(ALPHA[i] * row)) for row in FULL_CODES)
        assert gaps[0] == 0 and scores.min_gap[i] == pytest.approx(gaps[1], abs=1e-12)
        assert scores.min_gap[i] <= gaps[1]


def _log_sum_all(alpha: np.ndarray, keys_matrix: np.ndarray, best: float) -> mpmath.mpf:
    """log Σ_q e^{π(q) − best} over every ID, q* included, in 50 digits."""
    return mpmath.log(mpmath.fsum(mpmath.exp(mpmath.fsum(mpmath.mpf(float(x)) * mpmath.mpf(float(k))
                                                          for x, k in zip(alpha, row)) - best) for row in keys_matrix))


def test_a_tied_coordinate_keeps_the_winner_in_the_sum() -> None:
    """α_1 = 0: every entry of coordinate 1 scores 0, there is no q*, and the bound must cover the sum
    over every ID relative to Σ_e α_e v*_e (the 1 of q* kept); on a full product it is that sum."""
    keys = position_key_alphabet(_key_weights(FULL_CODES, np.eye(2)), 0, np.arange(1, 7))
    alpha = np.array([[1.5, 0.0], [-0.5, 0.0]])
    scores = position_scores(Iv.exact(alpha), keys)
    assert scores.tie.all()
    for i, a in enumerate(alpha):
        best = max(float(a[0]) * v for v in (-1.0, 1.0))
        assert scores.best.lo[i] <= best <= scores.best.hi[i]
        exact = _log_sum_all(a, FULL_CODES, best)
        assert exact <= scores.log_others[i] <= exact + 1e-12


# five IDs on four binary coordinates: 0000 and the four unit vectors (a sparse part of the 16 tuples)
SPARSE_CODES = np.vstack([np.zeros(4), np.eye(4)])


@pytest.mark.parametrize("a, cap_binds", [(-0.1, True), (-3.0, False)])
def test_the_count_cap_binds_on_a_sparse_code(a: float, cap_binds: bool) -> None:
    """Only 5 of the 16 tuples are IDs. With small gaps g = 0.1 the product ∏(1 + e^{−g}) − 1 = 12.2 is
    far above the true 4·e^{−g} = 3.62, and the bound |IDs|·e^{−gap} = 4.52 must take over (within
    log(5/4) of the truth); with g = 3 the product (0.208 against the true 0.199) is the smaller one."""
    keys = position_key_alphabet(_key_weights(SPARSE_CODES, np.eye(4)), 0, np.arange(1, 6))
    alpha = np.full((1, 4), a)
    scores = position_scores(Iv.exact(alpha), keys)
    (_, star, log_rest), = _exact_sums(alpha, SPARSE_CODES)
    assert star == 0 and not scores.tie[0] and -a - 1e-12 <= scores.min_gap[0] <= -a
    product = mpmath.log((1 + mpmath.exp(a)) ** 4 - 1)
    assert log_rest <= scores.log_others[0]
    if cap_binds:
        assert scores.log_others[0] <= log_rest + mpmath.log(mpmath.mpf(5) / 4) + 1e-12 < product
    else:
        assert scores.log_others[0] <= product + 1e-12


def test_a_tie_on_a_sparse_code_is_capped_by_the_count() -> None:
    """Coordinate 0 ties (α_0 = 0), the others lose 0.1: the sum over every ID, q* included, is
    2 + 3·e^{−0.1} = 4.71; the product 2·(1 + e^{−0.1})^3 = 13.8 is loose and |IDs|·e^0 = 5 must bind."""
    keys = position_key_alphabet(_key_weights(SPARSE_CODES, np.eye(4)), 0, np.arange(1, 6))
    alpha = np.array([[0.0, -0.1, -0.1, -0.1]])
    scores = position_scores(Iv.exact(alpha), keys)
    assert scores.tie[0]
    exact = _log_sum_all(alpha[0], SPARSE_CODES, 0.0)
    assert exact <= scores.log_others[0] <= mpmath.log(5) + 1e-12


def _value_weights(rng: np.random.Generator, vocab: int = 5, ids: int = 6, d: int = 4, d_head: int = 3,
                   heads: int = 2) -> SimpleNamespace:
    """Random dyadic weights (multiples of 1/8), so that every product and short sum is exact."""
    r = lambda *shape: rng.integers(-16, 17, shape) / 8.0  # noqa: E731
    return SimpleNamespace(W_E=r(vocab, d), W_pos=r(ids, d), W_V=r(heads, d, d_head), b_V=r(heads, d_head),
                           W_O=r(heads, d_head, d), W_Q=r(heads, d, d_head), b_Q=r(heads, d_head), scale=0.5)


@pytest.mark.parametrize("h", [0, 1])
def test_the_value_range_is_the_range_over_tokens_and_ids(h: int) -> None:
    """Step 6: max − min of (W_E[y] W_V + b_V + W_pos[q] W_V) W_O over every token y and ID q,
    computed exactly in rationals from dyadic weights; the bound contains it and is within 10^-12."""
    from fractions import Fraction as F
    from lengthgen.proof.attention import value_range

    W = _value_weights(np.random.default_rng(h))
    ids = np.array([0, 2, 3, 5])
    bound = value_range(W, ids, h)
    fr = lambda a: np.vectorize(F)(a)  # noqa: E731
    outs = [(fr(W.W_E[y]) @ fr(W.W_V[h]) + fr(W.b_V[h]) + fr(W.W_pos[q]) @ fr(W.W_V[h])) @ fr(W.W_O[h])
            for y in range(len(W.W_E)) for q in ids]
    exact = np.max(outs, axis=0) - np.min(outs, axis=0)
    assert np.all(exact <= bound) and np.all(bound <= exact.astype(float) + 1e-12)


@pytest.mark.parametrize("h, token", [(0, 1), (1, 4)])
def test_query_vectors_are_the_scaled_queries(h: int, token: int) -> None:
    """Step 2: α = scale·(W_E[x] W_Q + b_Q + W_pos[p] W_Q), exactly in rationals (dyadic weights)."""
    from fractions import Fraction as F

    W = _value_weights(np.random.default_rng(7))
    ids = np.array([1, 4, 5])
    alpha = query_vectors(W, h, ids, token)
    fr = lambda a: np.vectorize(F)(a)  # noqa: E731
    for row, p in enumerate(ids):
        exact = F(W.scale) * (fr(W.W_E[token]) @ fr(W.W_Q[h]) + fr(W.b_Q[h]) + fr(W.W_pos[p]) @ fr(W.W_Q[h]))
        assert np.all(alpha.lo[row] <= exact) and np.all(exact <= alpha.hi[row])
        assert np.all(alpha.hi[row] - alpha.lo[row] <= 1e-12)


def _tilted(model):
    """The model with the token rows of W_K and W_Q (the coordinates no position row uses) tilted by
    seeded noise, so that digits score unequally and each digit has a query row of its own (in the
    coordinates no position key reads: the same attended ID), and the sink's position row given a quarter of ID 2's, so that '$' has a
    position part of its own."""
    import torch

    g = torch.Generator().manual_seed(3)
    token_cols = (model.pos_embed.W_pos == 0).all(0)
    W_K = model.blocks[0].attn.W_K
    with torch.no_grad():
        W_K[:, token_cols] += 0.1 * torch.randn(W_K[:, token_cols].shape, generator=g, dtype=torch.float64)
        W_Q = model.blocks[0].attn.W_Q
        for h in range(len(W_Q)):  # only the head coordinates that no position key reads
            free = torch.nonzero((model.pos_embed.W_pos @ W_K[h] == 0).all(0)).flatten()
            rows = torch.nonzero(token_cols).flatten()
            W_Q[h][rows[:, None], free] += 0.1 * torch.randn(len(rows), len(free), generator=g, dtype=torch.float64)
        model.pos_embed.W_pos[0] += 0.25 * model.pos_embed.W_pos[2]
    return model


def _format(task: str):
    """A tilted float64 model of the 1-digit adder (M = 1.5) or of 2-digit copy/reverse (M = 1), its
    input format, the position table and the IDs no key holds (as each certificate passes them)."""
    if task == "addition":
        from constructions.addition import build_model
        from constructions.addition.certify.layout import Layout

        model = _tilted(build_model(n_digits=1, d_model=21, dtype="float64", M=1.5)[0])
        L = Layout.build(1)
        table, m_max = L.positions_by_id()
        return model, L, table, m_max, None
    from constructions.copying import build_model
    from constructions.copying.certify.layout import CopyLayout
    from lengthgen.tasks import COPY, REVERSE

    model = _tilted(build_model(task, n_digits=2, dtype="float64", M=1.0)[0])
    L = CopyLayout.build({"copy": COPY, "reverse": REVERSE}[task], 2)
    table, m_max = L.positions_by_id()
    n_ctx = model.cfg.n_ctx
    table = np.concatenate([table, np.full((n_ctx - len(table), m_max), -1, dtype=np.int64)])
    return model, L, table, m_max, np.setdiff1d(np.arange(1, n_ctx), L.ids)


# per format: on how many rows (of heads × answer positions) the leak bound is within log 2 of the
# largest measured leak, the report's gap equals the smallest measured one, and the spread bound the
# largest measured spread (with one member in S, η counts two different tokens that never meet)
TIGHT_ROWS = {"addition": (1, 3, 6), "copy": (1, 1, 3), "reverse": (1, 3, 2)}


@pytest.mark.parametrize("task", ["addition", "copy", "reverse"])
def test_head_bounds_contain_every_input_of_a_tiny_format(task: str) -> None:
    """Steps 1–6 (docs/certificate.md, "The argument") against all 10^4 inputs of ``$ a + b = c0 c1``
    or ``$ x1 x2 = y1 y2`` (every digit in every digit slot), scores and softmax in float64 from the
    weights: per head and answer position, S is ``$`` plus the visible keys at the ID (of all the
    model's) with the largest position score (none on a tie); the leak bound contains the largest
    measured log λ, the spread bound is the measured max − min on S (every token combination
    occurs), the report's gap is at most the smallest measured min_S − max outside S, and on the
    rows of TIGHT_ROWS the leak bound is within log 2, the gap and the spread exact."""
    from lengthgen.proof.attention import head_bounds
    from lengthgen.proof.weights import Weights
    from forward_oracle import params

    model, L, table, m_max, extra = _format(task)
    W = Weights.from_model(model, mlp=task == "addition")
    free = [i for i in range(1, len(L.ids)) if len(L.role_tokens[int(L.role[i])]) > 1]
    toks = np.array([[L.bos_token] + [L.role_tokens[int(r)][0] for r in L.role[1:]]] * 10 ** len(free))
    toks[:, free] = np.array(list(itertools.product(L.digit_tokens, repeat=len(free))))
    p, a = params(model), "blocks.0.attn."
    x = p["embed.W_E"][toks] + p["pos_embed.W_pos"][L.ids][None]
    leak_slack, gap_slack, eta_slack = [], [], []
    for h in range(W.W_Q.shape[0]):
        hb = head_bounds(W, L, h, table, m_max, extra_ids=extra)
        assert hb.members.dtype.kind == "i"  # positions, to index the format with
        q, k = x @ p[a + "W_Q"][h] + p[a + "b_Q"][h], x @ p[a + "W_K"][h] + p[a + "b_K"][h]
        s = np.einsum("nte,nse->nts", q, k) * float(model.cfg.score_scale)
        pos_keys = p["pos_embed.W_pos"] @ p[a + "W_K"][h]
        for j, t in enumerate(L.queries):
            pi = pos_keys[1:] @ (q[0, t] * float(model.cfg.score_scale))  # the best may be an ID no key holds
            qstar = 1 + np.argmax(pi) if np.sum(pi >= pi.max() - 1e-9) == 1 else -1  # a tie: no q*
            S = [0] + [i for i in range(1, t + 1) if L.ids[i] == qstar]
            assert sorted(m for m in hb.members[j] if m >= 0) == S[1:] and hb.size[j] == len(S)
            on = np.zeros(t + 1, dtype=bool)
            on[S] = True
            sc = s[:, t, : t + 1]
            w = np.exp(sc - sc.max(1, keepdims=True))
            log_lam = np.log(w[:, ~on].sum(1) / w[:, on].sum(1)).max()
            assert log_lam <= hb.log_leak[j]
            leak_slack.append(hb.log_leak[j] - log_lam)
            eta = (sc[:, on].max(1) - sc[:, on].min(1)).max()
            assert eta <= hb.eta[j]
            eta_slack.append(hb.eta[j] - eta)
            gap = (sc[:, on].min(1) - sc[:, ~on].max(1)).min()
            assert hb.gap[j] <= gap
            gap_slack.append(gap - hb.gap[j])
    tight = (sum(np.array(leak_slack) < np.log(2)), sum(np.array(gap_slack) < 1e-9), sum(np.array(eta_slack) < 1e-9))
    assert all(t >= want for t, want in zip(tight, TIGHT_ROWS[task])), (leak_slack, gap_slack, eta_slack)


@pytest.mark.parametrize("signs, winner", [((1, -1, -1, -1), 2), ((-1, -1, -1, 1), 5), ((-1, -1, -1, -1), 1),
                                           ((1, 1, 1, 1), None), ((0, -1, -1, -1), None)])
def test_the_attended_id_is_the_one_holding_the_winning_tuple(signs: tuple, winner: int | None) -> None:
    """Step 4 on the sparse code (ID 1 = 0000, IDs 2–5 the unit vectors; ID i sits at position i):
    the ID whose tuple wins every coordinate (also the largest and the smallest code), none when the
    winning tuple 1111 is no ID's or a coordinate ties. The query at position 4 sees positions 1–4,
    one at position 5 sees them all."""
    from lengthgen.proof.attention import attended_set

    keys = position_key_alphabet(_key_weights(SPARSE_CODES, np.eye(4)), 0, np.arange(1, 6))
    scores = position_scores(Iv.exact(np.array([signs, signs], dtype=float)), keys)
    pos_table = np.array([[-1], [1], [2], [3], [4], [5]])
    qstar, members = attended_set(None, keys, scores, np.array([4, 5]), pos_table)
    want = -1 if winner is None else winner
    assert list(qstar) == [want, want]
    assert members[0, 0] == (want if 0 < want <= 4 else -1) and members[1, 0] == want


def test_an_attended_id_that_depends_on_the_query_digit_names_the_head() -> None:
    """Digits whose query rows single out different IDs: head_bounds must refuse (StructureError) and
    name the head, counted from 1 as the report does."""
    import torch
    from lengthgen.proof.attention import head_bounds
    from lengthgen.proof.weights import StructureError, Weights

    model, L, table, m_max, extra = _format("addition")
    digit = L.digit_tokens[4]
    with torch.no_grad():  # digit 4 now queries with the position part of ID 3's query row, scaled up
        model.embed.W_E[digit] += 3 * model.pos_embed.W_pos[3]
    W = Weights.from_model(model)
    for h in range(2):
        with pytest.raises(StructureError, match=f"^head {h + 1}: the attended ID depends on the query's digit"):
            head_bounds(W, L, h, table, m_max)


def test_a_shared_cache_never_serves_another_models_value_range() -> None:
    """The smallest-M search shares one cache between certificates; a model that differs in a weight
    the value range reads (step 6) must get its own range, the one a fresh cache gives."""
    from lengthgen.proof.attention import head_bounds
    from lengthgen.proof.weights import Weights

    from constructions.addition import build_model
    from constructions.addition.certify.layout import Layout

    W = Weights.from_model(build_model(n_digits=1, d_model=21, dtype="float64")[0])
    L = Layout.build(1)
    table, m_max = L.positions_by_id()
    cache: dict = {}
    before = head_bounds(W, L, 0, table, m_max, cache).range_out
    rng = np.random.default_rng(1)
    queries = [L.first_query_token, *L.digit_tokens]
    for name in ("W_V", "W_O", "W_E", "W_pos"):  # one after another, each on top of the last
        weight = getattr(W, name)
        noise = rng.integers(-4, 5, weight.shape) / 4
        if name == "W_E":  # only the rows of '$' and '+', which never query: the attended IDs stay
            noise[queries] = 0
        if name == "W_pos":  # only the sink's row, ID 0, which no query or code holds
            noise[1:] = 0
        W = Weights(**{**W.__dict__, name: weight + noise})
        after = head_bounds(W, L, 0, table, m_max, cache).range_out
        fresh = head_bounds(W, L, 0, table, m_max).range_out
        assert not np.array_equal(fresh, before) and np.array_equal(after, fresh), name
        before = fresh


def test_an_interval_query_that_straddles_a_tie_is_bounded_at_its_ends() -> None:
    """α_0 ∈ [−1/2, 1/2] on the code {0, 1} (two IDs): no strict winner, and for every α in the
    interval log Σ_q e^{π(q) − α·v*} must stay below the bound; at α = 1/2 it is log(1 + e^{1/2})."""
    keys = position_key_alphabet(_key_weights(np.array([[0.0], [1.0]]), np.eye(1)), 0, np.arange(1, 3))
    scores = position_scores(Iv(np.array([[-0.5]]), np.array([[0.5]])), keys)
    assert scores.tie[0]
    vstar = [0.0, 1.0][int(scores.top_code[0])]
    worst = max(mpmath.log(sum(mpmath.exp(a * (v - vstar)) for v in (0.0, 1.0))) for a in (-0.5, 0.0, 0.5))
    assert worst <= scores.log_others[0] <= worst + 1e-12


def test_a_code_beyond_2_to_the_53_is_matched_exactly() -> None:
    """Fifteen key coordinates of 16 values (2^60 tuples, within the 2^62 the certificate allows)
    after one that reads no position row (a single value); ID i holds entry i − 1 everywhere. α
    prefers the top entry on 14 coordinates and the bottom one on the last: the winning tuple
    (15, …, 15, 0), code 2^60 − 16, is no ID's, while ID 16's code 2^60 − 1 is the same number in
    float64; no ID may be attended."""
    from lengthgen.proof.attention import attended_set

    codes = np.repeat(np.arange(1.0, 17.0)[:, None], 15, axis=1)
    keys = position_key_alphabet(_key_weights(codes, np.hstack([np.zeros((15, 1)), np.eye(15)])), 0, np.arange(1, 17))
    assert keys.radix == [1] + [16] * 15
    alpha = np.ones((1, 16))
    alpha[0, -1] = -1.0
    scores = position_scores(Iv.exact(alpha), keys)
    assert scores.top_code[0] == 2**60 - 16 and scores.top_code.dtype == np.int64
    qstar, members = attended_set(None, keys, scores, np.array([20]), np.arange(17)[:, None])
    assert qstar[0] == -1 and members[0, 0] == -1


def test_a_key_coordinate_that_reads_two_position_columns() -> None:
    """Key coordinate 0 reads two position columns (a + b), coordinate 1 one (b), on the six IDs
    (a, b) ∈ {−1, 1} × {0, 1/2, 2}: entries are patterns of both columns. best = Σ_e max_v α_e·v
    bounds every π(q) and is reached by the ID holding the winning tuple, if one does; the bound
    must contain log Σ e^{π(q) − best} over every other ID (brute force, 50 digits)."""
    mix = np.array([[1.0, 0.0], [1.0, 1.0]])
    keys = position_key_alphabet(_key_weights(FULL_CODES, mix), 0, np.arange(1, 7))
    assert keys.radix == [6, 3]
    kv = FULL_CODES @ mix
    scores = position_scores(Iv.exact(ALPHA), keys)
    for i, a in enumerate(ALPHA):
        best = sum(max(a[e] * v for v in set(kv[:, e])) for e in range(2))  # dyadic: exact
        pi = kv @ a
        assert np.all(pi <= best) and scores.best.lo[i] <= best <= scores.best.hi[i]
        rest = mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(p) - best) for p in pi if p != best))
        assert rest <= scores.log_others[i]


def test_the_key_alphabet_limits_and_messages() -> None:
    """Step 1's limits (docs/certificate.md): 16 values per key coordinate pass, 17 fail; 2^62 tuples
    pass, 2^63 fail; two IDs with one key vector fail, named; every message names head h + 1."""
    from lengthgen.proof.weights import StructureError

    ids17 = np.arange(1, 18)
    position_key_alphabet(_key_weights(np.arange(1.0, 17.0)[:, None], np.eye(1)), 0, np.arange(1, 17))
    W2 = lambda codes, W_K: SimpleNamespace(W_pos=np.vstack([np.zeros(codes.shape[1]), codes]),  # noqa: E731
                                            W_K=np.stack([np.zeros_like(W_K), W_K]))
    with pytest.raises(StructureError, match=r"^head 2: a key coordinate takes more than 16 values"):
        position_key_alphabet(W2(np.arange(1.0, 18.0)[:, None], np.eye(1)), 1, ids17)
    # 15 coordinates of 16 values and one of 4: exactly 2^62 tuples; one of 8 instead: 2^63
    for last, ok in ((4, True), (8, False)):
        codes = np.hstack([np.repeat(np.arange(1.0, 17.0)[:, None], 15, axis=1), (np.arange(16) % last)[:, None]])
        if ok:
            position_key_alphabet(W2(codes, np.eye(16)), 1, np.arange(1, 17))
        else:
            with pytest.raises(StructureError, match=r"^head 2: position key vectors span more than 2\^62"):
                position_key_alphabet(W2(codes, np.eye(16)), 1, np.arange(1, 17))
    codes = np.array([[0.0], [1.0], [2.0], [1.0]])  # IDs 2 and 4 share a key vector
    with pytest.raises(StructureError, match=r"^head 2: position IDs 2 and 4 have the same key vector \(W_pos·W_K"):
        position_key_alphabet(W2(codes, np.eye(1)), 1, np.arange(1, 5))
