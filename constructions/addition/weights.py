"""Every weight of Theorem 5.1's transformer (Cho et al. 2024), one function per part.

Each function writes named entries (:class:`lengthgen.basis.MatrixBuilder`) between the named
dimensions of :mod:`constructions.addition.layout`; docs/theorem-5-1.md has a section per part:

* :func:`token_embedding` and :func:`position_embedding`: the input X0 (token value, BOS flag,
  constant one; hypercube codes of the token's own ID and of the ID before it);
* :func:`head1_addition_without_carry`: PRE_SUM = a_{i+1} + b_{i+1};
* :func:`head2_carry_detection`: PRE_CARRY = a_i + b_i + c_i, and PRE_EOS (the BOS share);
* :func:`feed_forward`: SUM[k] one-hot of the next digit, IS_EOS;
* :func:`readout`: logits from SUM and IS_EOS.

The dimension names, their order and the query layout are the paper's; the initial values of the
token dimensions, the content of POS_2, the BOS attention sink, the output factors 3 and 4, the
trapezoid bumps and the linear readout are our reconstruction, proven right by the tests.

Every function takes ``sqrt``/``number`` so that exact-arithmetic checks can pass sympy functions
(``sympy.sqrt``, ``sympy.nsimplify``) and a symbolic M; the defaults give floats.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

from lengthgen.basis import MatrixBuilder, NamedBasis
from lengthgen.tasks import ADDITION

from .layout import (
    EOS_RAMP, TRAP_OFFSETS, TRAP_VALUES, TRAP_WIDTH, eos_unit, head_basis, hypercube_code, mlp_basis,
    position_dims, residual_basis, trapezoid_unit,
)

Sqrt = Callable[[Any], Any]
Number = Callable[[float], Any]


class HeadWeights(NamedTuple):
    """One attention head in TransformerLens orientation: W_Q, W_K, W_V [d_model → d_head],
    W_O [d_head → d_model]."""

    W_Q: MatrixBuilder
    W_K: MatrixBuilder
    W_V: MatrixBuilder
    W_O: MatrixBuilder


def vocab_basis() -> NamedBasis:
    return NamedBasis([(token, None) for token in ADDITION.vocab])


def token_embedding(resid: NamedBasis) -> MatrixBuilder:
    """W_E, the token part of X0 (Theorem 5.1; docs/theorem-5-1.md, "The residual basis"): digit k →
    NUM = k; every token → FULL_ONES = 1 (the bias of the queries and of the feed-forward network);
    ``$`` → IS_BOS = 1 (the attention sink's key)."""
    W_E = MatrixBuilder(vocab_basis(), resid)
    for token in ADDITION.vocab:
        W_E.add(token, "FULL_ONES", 1)
        if token.isdigit() and token != "0":
            W_E.add(token, "NUM", int(token))
    return W_E.add("$", "IS_BOS", 1)


def position_embedding(resid: NamedBasis, n_positions: int) -> MatrixBuilder:
    """W_pos, the position part of X0 (Theorem 5.1; docs/theorem-5-1.md, "The position code"), entry
    by entry: ID p → POS_1 = v_p and POS_2 = v_{p−1} (v_0 = 0). For short tables (exact checks);
    ``build_model`` uses the vectorized :func:`~constructions.addition.layout.position_table`."""
    P = len(resid.block("POS_1"))
    ids = NamedBasis([(f"id{p}", None) for p in range(n_positions)])
    W_pos = MatrixBuilder(ids, resid)
    for p in range(n_positions):
        for block, code in (("POS_1", hypercube_code(p, P)), ("POS_2", hypercube_code(p - 1, P))):
            for label, sign in zip(resid.block_labels(block), code):
                if sign:
                    W_pos.add(f"id{p}", label, sign)
    return W_pos


def _sink_key(resid: NamedBasis, head: NamedBasis, M: Any, P: int, sqrt: Sqrt) -> MatrixBuilder:
    """The key both heads share: √M·POS_1 ⊕ √(MP)·IS_BOS. ``$`` scores MP against every query
    (the attention sink); a token with ID q scores M·⟨v_p, v_q⟩, i.e. MP only when q = p."""
    return MatrixBuilder(resid, head).add_block("POS_1", "pos", sqrt(M)).add("IS_BOS", "sink", sqrt(M * P))


def _query(resid: NamedBasis, head: NamedBasis, position_block: str, M: Any, P: int, sqrt: Sqrt) -> MatrixBuilder:
    """√M·``position_block`` ⊕ √(MP)·FULL_ONES: the query scores MP on the sink and on the keys
    whose ID is coded in ``position_block``, at most MP − 2M on every other key."""
    return MatrixBuilder(resid, head).add_block(position_block, "pos", sqrt(M)).add("FULL_ONES", "sink", sqrt(M * P))


def head1_addition_without_carry(resid: NamedBasis, M: Any, sqrt: Sqrt = math.sqrt) -> HeadWeights:
    """Head 1, "addition without carries" (Theorem 5.1; docs/theorem-5-1.md, "Head 1").

    The query reads POS_2 = v_{p−1}: the token at significance i (c_i, or ``=`` for i = −1) has
    ID p and attends uniformly to {``$``, a_{i+1}, b_{i+1}} (ID p − 1). The value is NUM and the
    output multiplies the mean by 3, so PRE_SUM = a_{i+1} + b_{i+1} (0 past the last digit)."""
    P = position_dims(len(resid))
    head = head_basis(P)
    return HeadWeights(
        W_Q=_query(resid, head, "POS_2", M, P, sqrt),
        W_K=_sink_key(resid, head, M, P, sqrt),
        W_V=MatrixBuilder(resid, head).add("NUM", "val_NUM", 1),
        W_O=MatrixBuilder(head, resid).add("val_NUM", "PRE_SUM", 3),
    )


def head2_carry_detection(resid: NamedBasis, M: Any, sqrt: Sqrt = math.sqrt) -> HeadWeights:
    """Head 2, "carry detection" (Theorem 5.1; docs/theorem-5-1.md, "Head 2").

    The query reads POS_1 = v_p, its own ID: c_i attends uniformly to {``$``, a_i, b_i, c_i}
    (``=`` to {``$``, ``+``, ``=``}). Values NUM and IS_BOS; the output writes 4 × the mean of NUM
    to PRE_CARRY = a_i + b_i + c_i and the sink's share to PRE_EOS, which is 1/2 only at c_n
    (whose ID s − 1 no operand digit shares)."""
    P = position_dims(len(resid))
    head = head_basis(P)
    return HeadWeights(
        W_Q=_query(resid, head, "POS_1", M, P, sqrt),
        W_K=_sink_key(resid, head, M, P, sqrt),
        W_V=MatrixBuilder(resid, head).add("NUM", "val_NUM", 1).add("IS_BOS", "val_IS_BOS", 1),
        W_O=MatrixBuilder(head, resid).add("val_NUM", "PRE_CARRY", 4).add("val_IS_BOS", "PRE_EOS", 1),
    )


def feed_forward(resid: NamedBasis, number: Number = float) -> tuple[MatrixBuilder, MatrixBuilder]:
    """(W_in, W_out) of the ReLU network (Theorem 5.1; docs/theorem-5-1.md, "The feed-forward network").

    With t = PRE_SUM + (PRE_CARRY − 2·NUM)/10: PRE_CARRY − 2·NUM = a_i + b_i − c_i equals
    10·carry_{i+1} − carry_i, so t lies within 0.1 of a_{i+1} + b_{i+1} + carry_{i+1}, whose
    value mod 10 is the next digit. For each m in 0..19 four ReLUs of t − m form a trapezoid
    (1 for |t − m| ≤ 0.15, 0 for |t − m| ≥ 0.35) written to SUM[m mod 10]. Two ReLUs on PRE_EOS
    form a ramp (0 below 0.375, 1 above 0.4375) written to IS_EOS. FULL_ONES carries the biases."""
    mlp = mlp_basis()
    W_in, W_out = MatrixBuilder(resid, mlp), MatrixBuilder(mlp, resid)
    tenth, fifth = number(0.1), number(0.2)
    for m in TRAP_VALUES:
        for offset, sign in TRAP_OFFSETS:
            unit = trapezoid_unit(m, offset)
            W_in.add("PRE_SUM", unit, 1).add("PRE_CARRY", unit, tenth).add("NUM", unit, -fifth)
            W_in.add("FULL_ONES", unit, number(offset) - m)
            W_out.add(unit, f"SUM[{m % 10}]", sign / number(TRAP_WIDTH))
    ramp = number(EOS_RAMP[1]) - number(EOS_RAMP[0])
    for threshold, sign in zip(EOS_RAMP, (1, -1)):
        unit = eos_unit(threshold)
        W_in.add("PRE_EOS", unit, 1).add("FULL_ONES", unit, -number(threshold))
        W_out.add(unit, "IS_EOS", sign / ramp)
    return W_in, W_out


def readout(resid: NamedBasis) -> MatrixBuilder:
    """W_U: logit(k) = SUM[k], logit(``$``) = 2·IS_EOS (docs/theorem-5-1.md, "The readout"). Before
    EOS, SUM is one-hot and IS_EOS = 0, so the next digit wins by 1; at c_n, IS_EOS = 1 and SUM holds
    at most a single 1, so ``$`` wins by at least 1."""
    W_U = MatrixBuilder(resid, vocab_basis())
    for k in range(10):
        W_U.add(f"SUM[{k}]", str(k), 1)
    return W_U.add("IS_EOS", "$", 2)


def weight_entries(
    d_model: int, M: Any, n_positions: int | None, sqrt: Sqrt = math.sqrt, number: Number = float,
) -> dict[str, MatrixBuilder]:
    """Every weight as named entries under the keys W_E, W_pos (only when ``n_positions`` is
    given), W_Q{h}, W_K{h}, W_V{h}, W_O{h} for heads h = 0, 1, W_in, W_out and W_U."""
    resid = residual_basis(d_model)
    W: dict[str, MatrixBuilder] = {"W_E": token_embedding(resid)}
    if n_positions is not None:
        W["W_pos"] = position_embedding(resid, n_positions)
    for h, head in enumerate((head1_addition_without_carry(resid, M, sqrt), head2_carry_detection(resid, M, sqrt))):
        for name, builder in head._asdict().items():
            W[f"{name}{h}"] = builder
    W["W_in"], W["W_out"] = feed_forward(resid, number)
    W["W_U"] = readout(resid)
    return W
