"""The named dimensions of Theorem 5.1's transformer and its hypercube position code.

Theorem 5.1 of Cho et al. 2024 ("Position Coupling") uses a residual stream of d = 17 + 2P
dimensions: 17 named token dimensions, then two blocks of P position dimensions (one more, unused,
when d − 17 is odd). docs/theorem-5-1.md, "The residual basis" and "The position code", explains
each dimension; this module only names them, so that every weight of the construction
(:mod:`constructions.addition.weights`) and every test addresses a dimension by its name.

    NUM, IS_BOS, FULL_ONES, PRE_SUM, PRE_CARRY, PRE_EOS, SUM[0..9], IS_EOS, POS_1[0..P-1], POS_2[0..P-1]

Position ID p is coded by v_p = ((−1)^{bit_i(p−1)})_{i<P} and v_0 = 0, so ⟨v_p, v_q⟩ = P when
p = q ≥ 1 and at most P − 2 otherwise. POS_1 holds v_p and POS_2 holds v_{p−1}. The offset p − 1
and v_0 = 0 are our reconstruction (the paper's appendix gives the code but not these conventions);
the tests prove the whole construction right with them.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from lengthgen.basis import NamedBasis

from lengthgen.positions import hypercube_code, hypercube_codes

from ..sizing import CapacityError

#: the 17 token dimensions, in the paper's order (``SUM`` is a block of 10)
TOKEN_BLOCKS: list[tuple[str, int | None]] = [
    ("NUM", None), ("IS_BOS", None), ("FULL_ONES", None), ("PRE_SUM", None), ("PRE_CARRY", None),
    ("PRE_EOS", None), ("SUM", 10), ("IS_EOS", None),
]
N_TOKEN_DIMS = 17
START_ID = 2  # s: operands get IDs s..s+n-1, "+"/"=" get s+n, the overflow digit s-1
MIN_D_MODEL = N_TOKEN_DIMS + 2 * 2  # P >= 2: the score gap 2M needs two position dimensions

#: the feed-forward network's units (docs/theorem-5-1.md, "The feed-forward network"): a trapezoid
#: bump for each value m = 0..19 of t, made of four ReLUs ReLU(t − m + offset)·sign / TRAP_WIDTH
TRAP_VALUES = range(20)
TRAP_OFFSETS = ((0.35, 1), (0.15, -1), (-0.15, -1), (-0.35, 1))
TRAP_WIDTH = 0.20
#: the two hinges of the end-of-sequence ramp on PRE_EOS
EOS_RAMP = (0.375, 0.4375)



def position_dims(d_model: int) -> int:
    """P = ⌊(d − 17)/2⌋ position dimensions per block (Theorem 5.1)."""
    if d_model < MIN_D_MODEL:
        raise CapacityError(f"d_model must be at least 21 (17 token dimensions + 2·2 position dimensions), got {d_model}")
    return (d_model - N_TOKEN_DIMS) // 2


def max_digits_for(d_model: int) -> int:
    """Theorem 5.1's bound 2^P − 2: IDs s−1 .. s+n must be n + 2 distinct non-zero hypercube codes."""
    return 2 ** position_dims(d_model) - 2


def d_model_for(n_digits: int) -> int:
    """Smallest embedding dimension whose bound 2^P − 2 reaches ``n_digits``."""
    p = max(2, math.ceil(math.log2(n_digits + 2)))
    return N_TOKEN_DIMS + 2 * p


def required_sharpness(n_tokens: int) -> float:
    """M = ½·ln(1000·N): keeps the softmax leak δ ≤ N·e^{−2M} at most 1/1000
    (docs/theorem-5-1.md, "The error bound")."""
    return 0.5 * math.log(1000 * n_tokens)


def residual_basis(d_model: int) -> NamedBasis:
    """The residual stream: the 17 token dimensions, POS_1, POS_2 (and UNUSED when d − 17 is odd)."""
    P = position_dims(d_model)
    blocks = TOKEN_BLOCKS + [("POS_1", P), ("POS_2", P)]
    spare = d_model - N_TOKEN_DIMS - 2 * P
    return NamedBasis(blocks + ([("UNUSED", spare)] if spare else []))


def head_basis(P: int) -> NamedBasis:
    """Per-head dimensions: P position-matching dims, the BOS sink, then two value dims."""
    return NamedBasis([("pos", P), ("sink", None), ("val_NUM", None), ("val_IS_BOS", None)])


def trapezoid_unit(m: int, offset: float) -> str:
    """Label of the ReLU ``ReLU(t − m + offset)`` (e.g. ``trap_m3_-0.15``)."""
    return f"trap_m{m}_{'+' if offset > 0 else '-'}{abs(offset):.2f}"


def eos_unit(threshold: float) -> str:
    """Label of the ReLU ``ReLU(PRE_EOS − threshold)`` of the end-of-sequence ramp."""
    return f"eos_{threshold}"


def trapezoid_units() -> list[str]:
    """The 80 trapezoid ReLUs, value by value, in :data:`TRAP_OFFSETS` order."""
    return [trapezoid_unit(m, offset) for m in TRAP_VALUES for offset, _ in TRAP_OFFSETS]


def eos_units() -> list[str]:
    """The two ReLUs of the end-of-sequence ramp."""
    return [eos_unit(threshold) for threshold in EOS_RAMP]


def mlp_basis() -> NamedBasis:
    """The hidden units of the feed-forward network: the trapezoids, then the EOS ramp."""
    return NamedBasis([(unit, None) for unit in trapezoid_units() + eos_units()])


def position_table(d_model: int, n_positions: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """W_pos: row p holds v_p in POS_1 and v_{p−1} in POS_2, for IDs 0 .. n_positions−1
    (vectorized: 10^5 rows; :func:`constructions.addition.weights.position_embedding` gives the
    same numbers entry by entry)."""
    basis, P = residual_basis(d_model), position_dims(d_model)
    ids = np.arange(n_positions)
    table = torch.zeros(n_positions, d_model, dtype=dtype)
    table[:, basis.block("POS_1")] = torch.from_numpy(hypercube_codes(ids, P)).to(dtype)
    table[:, basis.block("POS_2")] = torch.from_numpy(hypercube_codes(ids - 1, P)).to(dtype)
    return table
