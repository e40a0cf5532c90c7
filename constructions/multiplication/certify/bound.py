"""The length bound n_max(d) = 2^⌊(d−25)/4⌋ − 6 of the N×2 multiplication construction, derived from
its own layout rather than restated (docs/multiplication.md, "Bound"): the token dimensions and the
four position blocks are read from :func:`~constructions.multiplication.layout.residual_basis`, the
code alphabet from :func:`~constructions.addition.layout.hypercube_codes`, and the IDs the heads
query from the format (``lengthgen.tasks.MULTIPLICATION_NX2``) and the blocks' ID offsets.
"""
from __future__ import annotations

from dataclasses import dataclass

from constructions.sizing import bound_table, count_texts, power_text
from lengthgen.positions import hypercube_codes

from ..layout import POSITION_BLOCKS, START_ID, residual_basis
from ..model import TASK


@dataclass(frozen=True)
class BoundDerivation:
    """The bound for width d, every ingredient read from the construction."""

    d_model: int
    token_dims: int
    token_blocks: tuple[str, ...]
    P: int
    offsets: dict[str, int]
    unused: int
    alphabet: tuple[int, ...]
    ids_slope: int
    ids_offset: int
    lowest: int
    highest_over_n: int

    @property
    def n_codes(self) -> int:
        """|alphabet|^P distinct codes (an exact integer: use :meth:`n_max_texts` for a huge P)."""
        return len(self.alphabet) ** self.P

    def n_max_texts(self) -> tuple[str, str]:
        """n_max as (exact, approximate) text, instantly for any P."""
        return count_texts(len(self.alphabet), self.P, self.ids_offset, self.ids_slope)

    @property
    def n_max(self) -> int:
        """Largest n with ids_slope·n + ids_offset ≤ n_codes: every ID a query targets needs its own code."""
        return (self.n_codes - self.ids_offset) // self.ids_slope


PROBED_COORDINATES = 8


def queried_ids(n: int) -> set[int]:
    """Every non-zero ID a query of an n-digit input targets: p + offset for each token's ID p and each
    position block's offset (POS holds v_p itself, the key side; a target ≤ 0 is the zero vector)."""
    ids = TASK.coupled_ids(n, START_ID)
    return {int(p) + off for p in ids for off in POSITION_BLOCKS.values() if int(p) + off > 0}


def derive_bound(d_model: int) -> BoundDerivation:
    """n_max(d): residual_basis gives the token dimensions and P per position block; hypercube_codes'
    coordinates take 2 values on non-zero IDs (ID 0 = ``$`` is the zero vector), and they are
    distinct on 2^P consecutive IDs; the queried IDs of an n-digit input are counted for n = 1, 2, 3
    and must be affine in n. Raises CapacityError for d < 33."""
    basis = residual_basis(d_model)
    sizes = {name: basis.block_size(name) for name in POSITION_BLOCKS}
    P = sizes["POS"]
    if set(sizes.values()) != {P}:
        raise AssertionError(f"position blocks differ in size: {sizes}")
    token_blocks = tuple(b for b in basis.block_names if b not in tuple(POSITION_BLOCKS) + ("UNUSED",))
    token_dims = sum(basis.block_size(b) for b in token_blocks)
    unused = basis.block_size("UNUSED") if "UNUSED" in basis.block_names else 0
    probed = min(P, PROBED_COORDINATES)  # every coordinate follows one rule: the first few show its values
    probe = hypercube_codes(list(range(1, 2 ** min(P, 4) + 1)), probed)
    alphabet = tuple(sorted(set(probe.reshape(-1).tolist())))
    if 0 in alphabet or hypercube_codes([0], probed).any():
        raise AssertionError("non-zero IDs must get non-zero codes and ID 0 the zero vector")
    used = [len(queried_ids(n)) for n in (1, 2, 3)]
    slope, offset = used[1] - used[0], used[0] - (used[1] - used[0])
    if used[2] != 3 * slope + offset or slope <= 0:
        raise AssertionError(f"the number of queried IDs is not affine in n: {used}")
    ids3 = queried_ids(3)
    if ids3 != set(range(min(ids3), max(ids3) + 1)):
        raise AssertionError("the queried IDs are not consecutive, so 2^P codes would not be enough to tell them apart")
    return BoundDerivation(d_model, token_dims, token_blocks, P, dict(POSITION_BLOCKS), unused, alphabet,
                           slope, offset, min(ids3), max(ids3) - 3)


def n_max(d_model: int) -> int:
    return derive_bound(d_model).n_max


def bound_lines(d_model: int) -> list[str]:
    b = derive_bound(d_model)
    basis = residual_basis(d_model)
    blocks = ", ".join(f"{name}×{basis.block_size(name)}" if basis.block_size(name) > 1 else name for name in b.token_blocks)
    spare = f" + {b.unused} unused" if b.unused else ""
    offsets = ", ".join(f"{name} v_(p{off:+d})" if off else f"{name} v_p" for name, off in b.offsets.items())
    exact, approx = b.n_max_texts()
    fits = not exact.lstrip("-").isdigit() or int(exact) >= 1
    return [
        f"d_model = {d_model}: {b.token_dims} token dimensions ({blocks}) + {len(b.offsets)}·P position dimensions{spare}",
        f"  P = ⌊({d_model} − {b.token_dims})/{len(b.offsets)}⌋ = {b.P} dimensions per position block ({offsets})",
        f"  hypercube codes: coordinates take the values {{{', '.join(f'{v:+d}' for v in b.alphabet)}}} on non-zero IDs -> "
        f"{len(b.alphabet)}^{b.P} = {power_text(len(b.alphabet), b.P)} distinct codes on consecutive IDs "
        "(ID 0 = '$' keeps the zero vector)",
        f"  an n-digit input has queries targeting {'' if b.ids_slope == 1 else f'{b.ids_slope}·'}n + {b.ids_offset} distinct "
        f"non-zero IDs (s−1 = {b.lowest} … e+2 = n + {b.highest_over_n}: every token ID plus each block's offset, read from "
        "the format's coupled IDs); each needs its own non-zero code",
        f"n_max({d_model}) = 2^{b.P} − {b.ids_offset} = {exact}",
        f"             ≈ {approx}" if fits else "             (no operand length fits this width)",
    ]


def table_lines(d_min: int = 33, d_max: int = 1024) -> list[str]:
    return bound_table(derive_bound, d_min, d_max, "2^P − 6")
