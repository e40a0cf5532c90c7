"""The copy/reverse length bound n_max(d) = 2^⌊(d−23)/2⌋ − 2, derived from the construction's own
layout rather than restated (docs/copying.md, "Bound"):

* the token dimensions and the two position blocks POS, POS_NEXT are read from
  :func:`~constructions.copying.model.residual_basis`;
* the code alphabet is read from the position table the model holds
  (:func:`~constructions.copying.model.position_table`): each coordinate of a non-zero ID's code
  takes one of two values, ID 0 (``$``) has the zero code, so there are 2^P codes;
* the IDs that need their own non-zero code are those the tokens hold *and* those the queries
  target (a query reads POS_NEXT, the code one ID up for copy, one ID down for reverse), counted
  from ``lengthgen.tasks.COPY`` / ``REVERSE``'s coupled IDs.

Copy needs n + 2 codes (tokens 1 … n + 1, and y_n's query targets n + 2); reverse needs n + 1. The
construction uses one bound for both tasks, the smaller one.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from constructions.sizing import EXACT_P, bound_table, count_texts, power_text
from lengthgen.tasks import COPY, REVERSE
from lengthgen.tasks.copying import CopyTask

from ..model import N_TOKEN_DIMS, START_ID, id_step, position_table, residual_basis

POSITION_BLOCKS = ("POS", "POS_NEXT")
MAX_PROBED_CODES = 2**8
PROBED_COORDINATES = 8


def ids_needed(task: CopyTask, n: int) -> set[int]:
    """The non-zero IDs an n-digit ``task`` gives a code to: held by a token, or targeted by an
    answer position's query (``=``, y_1 … y_n) through POS_NEXT."""
    ids = task.coupled_ids(n, START_ID)
    queried = ids[n + 1: 2 * n + 2] + id_step(task)
    return (set(ids.tolist()) | set(queried.tolist())) - {0}


@dataclass(frozen=True)
class BoundDerivation:
    """The length bound for width d, with every ingredient read from the construction."""

    d_model: int
    token_dims: int
    token_blocks: tuple[tuple[str, int], ...]
    P: int
    unused: int
    alphabet: tuple[float, ...]
    ids_affine: dict[str, tuple[int, int]]  # task -> (slope, offset): the task needs slope·n + offset codes

    @property
    def n_codes(self) -> int:
        """|alphabet|^P distinct codes (an exact integer: use :meth:`n_max_texts` for a huge P)."""
        return len(self.alphabet) ** self.P

    def binding_task(self) -> str:
        """The task whose need gives the bound: the largest slope, then the largest offset."""
        return max(self.ids_affine, key=lambda t: self.ids_affine[t])

    def n_max_texts(self) -> tuple[str, str]:
        """n_max as (exact, approximate) text, instantly for any P."""
        slope, offset = self.ids_affine[self.binding_task()]
        return count_texts(len(self.alphabet), self.P, offset, slope)

    def n_max_for(self, task: str) -> int:
        slope, offset = self.ids_affine[task]
        return (self.n_codes - offset) // slope

    @property
    def n_max(self) -> int:
        """The largest n both tasks fit: every ID they need has its own non-zero code."""
        return min(self.n_max_for(t) for t in self.ids_affine)


@lru_cache(maxsize=None)
def code_alphabet(P: int) -> tuple[float, ...]:
    """The values the POS coordinates of non-zero IDs take in the position table of a model with P
    position dimensions (IDs 1 … min(2^P, 256) probed; they must get distinct codes, ID 0 the zero code)."""
    d = N_TOKEN_DIMS + 2 * P  # the width with exactly P position dimensions
    probe = min(2**P, MAX_PROBED_CODES)
    codes = position_table(COPY, d, probe + 1).numpy()[:, residual_basis(d).block("POS")]
    if np.any(codes[0]):
        raise AssertionError("ID 0 ('$') must have the zero code")
    alphabet = tuple(sorted(set(codes[1:].ravel().tolist())))
    if 0 in alphabet or len({row.tobytes() for row in codes[1:]}) != probe:
        raise AssertionError("non-zero IDs must get distinct codes without zero coordinates")
    return alphabet


def derive_bound(d_model: int) -> BoundDerivation:
    """n_max(d) from the layout; raises CapacityError for d < 27 (from residual_basis)."""
    basis = residual_basis(d_model)
    P = basis.block_size("POS")
    if basis.block_size("POS_NEXT") != P:
        raise AssertionError("POS and POS_NEXT differ in size")
    token_blocks = tuple((b, basis.block_size(b)) for b in basis.block_names if b not in POSITION_BLOCKS + ("UNUSED",))
    unused = basis.block_size("UNUSED") if "UNUSED" in basis.block_names else 0
    alphabet = code_alphabet(min(P, PROBED_COORDINATES))  # every coordinate follows one rule
    affine = {}
    for task in (COPY, REVERSE):
        used = [len(ids_needed(task, n)) for n in (1, 2, 3)]
        slope, offset = used[1] - used[0], used[0] - (used[1] - used[0])
        if used[2] != 3 * slope + offset or slope <= 0:
            raise AssertionError(f"the number of IDs {task.name} needs is not affine in n: {used}")
        affine[task.name] = (slope, offset)
    token_dims = sum(size for _, size in token_blocks)
    return BoundDerivation(d_model, token_dims, token_blocks, P, unused, alphabet, affine)


def n_max(d_model: int) -> int:
    return derive_bound(d_model).n_max


def bound_lines(d_model: int) -> list[str]:
    b = derive_bound(d_model)
    blocks = ", ".join(f"{name}×{size}" if size > 1 else name for name, size in b.token_blocks)
    spare = f" + {b.unused} unused" if b.unused else ""
    needs = "; ".join(f"{task} needs {'' if s == 1 else f'{s}·'}n + {o}" for task, (s, o) in b.ids_affine.items())
    exact, approx = b.n_max_texts()
    slope, offset = b.ids_affine[b.binding_task()]
    exact_p = b.P <= EXACT_P
    return [
        f"d_model = {d_model}: {b.token_dims} token dimensions ({blocks}) + 2·P position dimensions (POS, POS_NEXT){spare}",
        f"  P = ⌊({d_model} − {b.token_dims})/2⌋ = {b.P}",
        f"  hypercube codes: coordinates take the values {{{', '.join(f'{v:+g}' for v in b.alphabet)}}} on non-zero IDs -> "
        f"{len(b.alphabet)}^{b.P} = {power_text(len(b.alphabet), b.P)} distinct codes "
        "(ID 0 = '$' keeps the zero vector)",
        f"  non-zero IDs held by a token or targeted by a query (read from the coupled IDs): {needs}",
        f"n_max({d_model}) = 2^{b.P} − {offset}{'' if slope == 1 else f' (÷{slope})'} = {exact}"
        + ("   (reverse alone would fit one more; the construction uses one bound for both)"
           if exact_p and b.n_max_for("reverse") == b.n_max + 1 else ""),
        f"             ≈ {approx}",
    ]


def table_lines(d_min: int = 27, d_max: int = 1024) -> list[str]:
    return bound_table(derive_bound, d_min, d_max, "2^P − 2")
