"""Theorem 5.1's length bound n_max(d) = 2^⌊(d−17)/2⌋ − 2, derived from the construction's own
layout rather than restated: the token dimensions and position blocks are read from
:func:`~constructions.addition.model.residual_basis`, the code alphabet from
:func:`~constructions.addition.model.hypercube_code`, and the number of position IDs an n-digit
addition uses from :func:`lengthgen.positions.coupled_addition_ids` (docs/theorem-5-1.md, "Capacity").
"""
from __future__ import annotations

from dataclasses import dataclass

from constructions.sizing import bound_table, count_texts, power_text
from lengthgen.positions import coupled_addition_ids

from ..model import START_ID, hypercube_code, residual_basis

POSITION_BLOCKS = ("POS_1", "POS_2")
PROBED_COORDINATES = 8


@dataclass(frozen=True)
class BoundDerivation:
    """Theorem 5.1's length bound for width d, with every ingredient read from the construction."""

    d_model: int
    token_dims: int
    token_blocks: tuple[str, ...]
    P: int
    unused: int
    alphabet: tuple[int, ...]
    ids_slope: int
    ids_offset: int

    @property
    def n_codes(self) -> int:
        """|alphabet|^P distinct codes (an exact integer: use :meth:`n_max_texts` for a huge P)."""
        return len(self.alphabet) ** self.P

    def n_max_texts(self) -> tuple[str, str]:
        """n_max as (exact, approximate) text, instantly for any P."""
        return count_texts(len(self.alphabet), self.P, self.ids_offset, self.ids_slope)

    @property
    def n_max(self) -> int:
        """Largest n with ids_slope·n + ids_offset ≤ n_codes: every ID the format uses needs its own code."""
        return (self.n_codes - self.ids_offset) // self.ids_slope


def derive_bound(d_model: int) -> BoundDerivation:
    """n_max(d) from the layout (docs/theorem-5-1.md, "Capacity"): residual_basis gives the 17 token dimensions and P position
    dimensions per block; hypercube_code's coordinates take |alphabet| = 2 values on non-zero IDs
    (ID 0 = ``$`` is the zero vector), so there are 2^P distinct codes (bit i of p − 1 sets
    coordinate i, every sign pattern occurs once in p = 1 … 2^P); coupled_addition_ids shows an
    n-digit addition uses n + 2 distinct non-zero IDs (s − 1 … s + n). Raises CapacityError for
    d < 21."""
    basis = residual_basis(d_model)
    P = basis.block_size("POS_1")
    if basis.block_size("POS_2") != P:
        raise AssertionError("POS_1 and POS_2 differ in size")
    token_blocks = tuple(b for b in basis.block_names if b not in POSITION_BLOCKS + ("UNUSED",))
    token_dims = sum(basis.block_size(b) for b in token_blocks)
    unused = basis.block_size("UNUSED") if "UNUSED" in basis.block_names else 0
    probed = min(P, PROBED_COORDINATES)  # every coordinate follows one rule: the first few show its values
    probe = range(1, 2 ** min(P, 4) + 1)
    alphabet = tuple(sorted({c for p in probe for c in hypercube_code(p, probed)}))
    if 0 in alphabet or any(hypercube_code(0, probed)):
        raise AssertionError("non-zero IDs must get non-zero codes and ID 0 the zero vector")
    used = [len(set(coupled_addition_ids(n, START_ID).tolist()) - {0}) for n in (1, 2, 3)]
    slope, offset = used[1] - used[0], used[0] - (used[1] - used[0])
    if used[2] != 3 * slope + offset or slope <= 0:
        raise AssertionError(f"the number of IDs is not affine in n: {used}")
    return BoundDerivation(d_model, token_dims, token_blocks, P, unused, alphabet, slope, offset)


def n_max(d_model: int) -> int:
    return derive_bound(d_model).n_max


def bound_lines(d_model: int) -> list[str]:
    b = derive_bound(d_model)
    exact, approx = b.n_max_texts()
    basis = residual_basis(d_model)
    blocks = ", ".join(f"{name}×{basis.block_size(name)}" if basis.block_size(name) > 1 else name for name in b.token_blocks)
    spare = f" + {b.unused} unused" if b.unused else ""
    return [
        f"d_model = {d_model}: {b.token_dims} token dimensions ({blocks}) + 2·P position dimensions{spare}",
        f"  P = ⌊({d_model} − {b.token_dims})/2⌋ = {b.P} dimensions per position block (POS_1, POS_2)",
        f"  hypercube codes: coordinates take the values {{{', '.join(f'{v:+d}' for v in b.alphabet)}}} on non-zero IDs -> "
        f"{len(b.alphabet)}^{b.P} = {power_text(len(b.alphabet), b.P)} distinct codes "
        "(ID 0 = '$' keeps the zero vector)",
        f"  an n-digit addition uses {'' if b.ids_slope == 1 else f'{b.ids_slope}·'}n + {b.ids_offset} distinct non-zero IDs "
        f"(s−1 … s+n, read from coupled_addition_ids)",
        f"n_max({d_model}) = {b.ids_slope == 1 and '' or '⌊('}2^{b.P} − {b.ids_offset}{b.ids_slope == 1 and '' or f')/{b.ids_slope}⌋'}"
        f" = {exact}",
        f"             ≈ {approx}",
    ]


def table_lines(d_min: int = 21, d_max: int = 1024) -> list[str]:
    return bound_table(derive_bound, d_min, d_max, "2^P − 2")
