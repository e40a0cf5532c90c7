"""Residual layout, position code and capacity of the N×2 multiplication construction
(docs/multiplication.md).

Residual stream, d = 25 + 4P (+ unused dimensions when d − 25 is not a multiple of 4):

    written by the embedding:      NUM, IS_BOS, ONE, IS_STAR, IS_EQ
    written by layer 1 attention:  SEEN_STAR, SEEN_EQ, NEXT_SEP
    written by layer 2 attention:  B0, B1, A0, A1, EOS_PRE
    written by layer 2 MLP:        PROD
    written by layer 3 MLP:        DIGIT[0..9], IS_EOS
    position code (W_pos):         POS[P], POS_MINUS1[P], POS_PLUS1[P], POS_PLUS2[P]

Position ID p is coded by the hypercube vector v_p = ((−1)^{bit_i(p−1)})_{i<P}, v_0 = 0, as in the
addition construction (Theorem 5.1 of Cho et al., "Position Coupling"): ⟨v_p, v_q⟩ = P for p = q and
≤ P − 2 otherwise. POS holds v_p (the key side); POS_MINUS1, POS_PLUS1, POS_PLUS2 hold v_{p−1},
v_{p+1}, v_{p+2} (the query sides of heads that read the digit one place more significant, one
place less significant, two places less significant).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from constructions.sizing import CapacityError
from lengthgen.positions import hypercube_codes
from lengthgen.basis import NamedBasis

TOKEN_BLOCKS: list[tuple[str, int | None]] = [
    ("NUM", None), ("IS_BOS", None), ("ONE", None), ("IS_STAR", None), ("IS_EQ", None),
    ("SEEN_STAR", None), ("SEEN_EQ", None), ("NEXT_SEP", None),
    ("B0", None), ("B1", None), ("A0", None), ("A1", None), ("EOS_PRE", None),
    ("PROD", None), ("DIGIT", 10), ("IS_EOS", None),
]
N_TOKEN_DIMS = 25
#: ID offset of each position block: the block holds v_{p + offset} for a token with ID p
POSITION_BLOCKS = {"POS": 0, "POS_MINUS1": -1, "POS_PLUS1": 1, "POS_PLUS2": 2}
START_ID = 2  # s: the answer's last digit c_{N+1} gets ID s, so the query for a_{N+2} targets s − 1 ≥ 1
LEAK_TARGET = 1e-9
DEFAULT_TABLE_DIGITS = 10_000


def position_dims(d_model: int) -> int:
    """P = ⌊(d − 25)/4⌋ dimensions per position block."""
    if d_model < N_TOKEN_DIMS + 8:
        raise CapacityError(f"d_model must be at least {N_TOKEN_DIMS + 8} (25 token dimensions + 4·2 position dimensions), got {d_model}")
    return (d_model - N_TOKEN_DIMS) // 4


def max_digits_for(d_model: int) -> int:
    """The bound N ≤ 2^P − 6: every ID a query may target, s − 1 = 1 .. e + 2 = N + 6, gets its own
    non-zero hypercube code (the tokens use IDs 0 and s .. e = s + N + 2)."""
    return 2 ** position_dims(d_model) - 6


def d_model_for(n_digits: int) -> int:
    """Smallest embedding dimension whose bound 2^P − 6 reaches ``n_digits``."""
    p = max(2, math.ceil(math.log2(n_digits + 6)))
    return N_TOKEN_DIMS + 4 * p


def required_sharpness(n_tokens: int) -> float:
    """M = ½·ln(N / LEAK_TARGET): N·e^{−2M}, the leak of a head whose unwanted keys score 2M lower, is
    10^{−9}. Whether a given length is then exact is proven by ``python -m
    constructions.multiplication.certify margins`` (docs/multiplication.md, "Certificate")."""
    return 0.5 * math.log(n_tokens / LEAK_TARGET)


def residual_basis(d_model: int) -> NamedBasis:
    P = position_dims(d_model)
    spare = d_model - N_TOKEN_DIMS - 4 * P
    blocks = TOKEN_BLOCKS + [(name, P) for name in POSITION_BLOCKS]
    return NamedBasis(blocks + ([("UNUSED", spare)] if spare else []))


def position_table(d_model: int, n_positions: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """W_pos: row p holds v_{p+offset} in each position block (v_q = 0 for q ≤ 0)."""
    basis, P = residual_basis(d_model), position_dims(d_model)
    ids = np.arange(n_positions)
    table = torch.zeros(n_positions, d_model, dtype=dtype)
    for name, offset in POSITION_BLOCKS.items():
        table[:, basis.block(name)] = torch.from_numpy(hypercube_codes(ids + offset, P)).to(dtype)
    return table
