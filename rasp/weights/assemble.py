"""Assemble a compiled program into a :class:`lengthgen.Transformer` and wrap it.

``compile_to_transformer(program, vocab, max_seq_len)`` = analysis (:mod:`rasp.weights.graph`)
-> residual layout (:mod:`rasp.weights.layout`) -> heads (:mod:`rasp.weights.heads`) and MLPs
(:mod:`rasp.weights.mlp`) placed in their layers -> one standard Transformer (TransformerLens
names; no layer norm; ReLU; ``attn_scale = 1``). Input: the compiler's BOS token, then the
tokens; position ``p`` carries index ``p - 1``. docs/turing-programs.md describes the result.

**BOS clean-up.** A head must see the BOS key and value exactly as designed (key: only the
``tokens:BOS`` row; value: the default), but MLPs also run at the BOS position and leave
values there. Those values are fixed (BOS is always the same token at position 0), so after
building each layer the compiler runs BOS alone through the model and subtracts their
contribution from the ``tokens:BOS`` rows of that layer's W_Q, W_K and W_V: exact, and no
effect on other positions (where ``tokens:BOS`` is 0).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

import torch

from lengthgen.decode import UNDECIDED, decided_argmax
from lengthgen.model import Annotations, Transformer, TransformerConfig
from rasp.core import SOp
from rasp.weights.graph import ONEHOT_MAX, CompileError, Program
from rasp.weights.heads import HeadSpec, binary_nodes, compile_head
from rasp.weights.layout import Feature, Layout
from rasp.weights.mlp import MLPBlock, compile_mlp
from rasp.weights.precision import check_heads, check_logits

_DTYPE_NAMES = {torch.float64: "float64", torch.float32: "float32"}


class Undecided:
    """Decoded value where the transformer's top logit did not win by the decision margin."""

    def __repr__(self) -> str:
        return "<undecided>"


UNDECIDED_VALUE = Undecided()


@dataclass
class CompiledTransformer:
    """A RASP program as transformer weights (see :func:`compile_to_transformer`)."""

    model: Transformer
    layout: Layout
    program: Program
    vocab: list
    classes: list
    heads: list[list[HeadSpec]]
    mlps: list[list[MLPBlock]]
    seconds: float = 0.0
    _token_ids: dict = field(default_factory=dict, repr=False)

    @property
    def bos_id(self) -> int:
        return len(self.vocab)

    @property
    def residual_labels(self) -> list[str]:
        return self.layout.labels

    def encode(self, tokens: Sequence[Any]) -> list[int]:
        """Token ids of ``BOS + tokens``."""
        try:
            return [self.bos_id] + [self._token_ids[t] for t in tokens]
        except (KeyError, TypeError):
            bad = next(t for t in tokens if not isinstance(t, Hashable) or t not in self._token_ids)
            raise CompileError(f"token {bad!r} is not in the compiled vocabulary") from None

    def decode(self, logits: torch.Tensor) -> list:
        """Output values from logits ``[positions, classes]``: the class whose logit wins by the
        decision margin (else :data:`UNDECIDED_VALUE`), or the number for a numerical output."""
        if self.program.output.numerical:
            return [float(x) for x in logits[:, 0]]
        picks = decided_argmax(logits).tolist()
        return [UNDECIDED_VALUE if i == UNDECIDED else self.classes[i] for i in picks]

    @torch.inference_mode()
    def logits(self, tokens: Sequence[Any]) -> torch.Tensor:
        """Logits at the token positions (BOS's row dropped)."""
        if len(tokens) > self.program.n:
            raise CompileError(f"{len(tokens)} tokens exceed max_seq_len={self.program.n}")
        ids = torch.tensor(self.encode(tokens), device=self.model.device)
        return self.model(ids)[0, 1:]

    def run(self, tokens: Sequence[Any]) -> list:
        """The output s-op at every position, computed by the transformer."""
        return self.decode(self.logits(tokens))

    def describe(self) -> str:
        """Which RASP op each embedding block, head and MLP implements."""
        lines = ["embedding:"]
        for node in self.program.nodes:
            if node.kind in ("token", "position"):
                where = "W_E" if node.kind == "token" else "W_pos"
                lines.append(f"  {where}: {node.label} ({node.encoding}, {len(node.values)} values)")
        free = [n for n in self.program.nodes if n.kind in ("linear", "folded")]
        if free:
            lines.append("no layer (affine; read by the ops that use them):")
        for node in free:
            form = node.affine.text([d.label for d in node.deps])
            lines.append(f"  {node.label} = {form}" if node.kind == "linear" else
                         f"  {node.label}: folded into the affine s-ops that read it")
        for layer in range(len(self.heads)):
            for h, head in enumerate(self.heads[layer]):
                lines.append(f"layer {layer} head {h}: {head.text}")
            for block in self.mlps[layer]:
                lines.append(f"layer {layer} MLP ({len(block.units)} units): {block.text}")
        lines.append(f"unembed: {self.program.output.label} ({self.program.output.encoding})")
        return "\n".join(lines)

    @property
    def stats(self) -> dict[str, Any]:
        cfg = self.model.cfg
        return {"layers": cfg.n_layers, "heads": sum(len(h) for h in self.heads),
                "heads_per_layer": [len(h) for h in self.heads], "d_model": cfg.d_model,
                "d_head": cfg.d_head, "d_mlp": cfg.d_mlp,
                "mlp_units": sum(len(b.units) for bl in self.mlps for b in bl),
                "params": sum(p.numel() for p in self.model.parameters()),
                "compile_seconds": round(self.seconds, 3)}


def compile_to_transformer(program: SOp, vocab: Sequence[Any], max_seq_len: int, *,
                           causal: bool = True, dtype: torch.dtype = torch.float64,
                           output_values: Sequence[Any] | None = None,
                           onehot_max: int = ONEHOT_MAX, binary_from: float | None = None,
                           plateau: float = 0.0) -> CompiledTransformer:
    """Compile ``program`` into a :class:`lengthgen.Transformer` for inputs of at most
    ``max_seq_len`` tokens from ``vocab`` (docs/turing-programs.md, "Compiling RASP to weights").

    ``causal``: RASP-L semantics (query p sees keys <= p, ``length`` = p + 1) and a causal model;
    ``False``: tracr's semantics and a non-causal model. ``output_values``: the first output
    classes, in order (e.g. the vocabulary, so that greedy decoding can feed the argmax back).
    ``dtype``: the weights' type, ``torch.float64`` or ``torch.float32``; any other is refused.
    ``onehot_max``: categorical s-ops with at most this many values are one-hot (tracr's layout,
    one named dimension per value); larger ones, and all of them with ``onehot_max=0``, hold an
    integer code (two dimensions, docs/turing-programs.md "Residual layout"), except where an order
    or custom comparison needs a one-hot table. Codes make a model with many categorical s-ops
    narrower and faster (program P at n-gram 16: about 5x fewer parameters). ``binary_from``: an
    equality whose quadratic terms ``beta * c**2`` would reach it (scaled to the format's unit
    roundoff) compares bit codes (``None``: ``BINARY_FROM`` = 2^40; ``0``: every equality whose sides
    can carry them); bits carry no error that grows with the codes, which is what
    :mod:`rasp.certify` needs on long programs. ``plateau`` (``0 <= p < 1/2``): every MLP table
    holds its output constant on ``p`` of each gap on either side of each of its points, so an input
    that is off its code by less than that gives the exact output and errors stop at each table
    (``0``: tables interpolate linearly through their points, the fewest hidden units;
    docs/turing-programs.md, "MLPs").
    Raises :class:`CompileError` naming the op for anything without exact weights.
    """
    start = time.perf_counter()
    if not isinstance(max_seq_len, int) or max_seq_len < 1:
        raise CompileError(f"max_seq_len must be a positive integer, got {max_seq_len!r}")
    if not isinstance(onehot_max, int) or isinstance(onehot_max, bool) or onehot_max < 0:
        raise CompileError(f"onehot_max must be an integer >= 0, got {onehot_max!r}")
    if binary_from is not None and (not isinstance(binary_from, (int, float)) or isinstance(binary_from, bool)
                                    or not binary_from >= 0):
        raise CompileError(f"binary_from must be a number >= 0, got {binary_from!r}")
    if isinstance(plateau, bool) or not isinstance(plateau, (int, float)) or not 0 <= plateau < 0.5:
        raise CompileError(f"plateau must be a number with 0 <= plateau < 0.5, got {plateau!r}")
    if dtype not in _DTYPE_NAMES:
        raise CompileError(f"dtype must be torch.float64 or torch.float32, got {dtype!r}")
    vocab = list(vocab)
    if not vocab or len(set(vocab)) != len(vocab):
        raise CompileError("the vocabulary must be non-empty and without repeats")
    prog = Program(program, vocab, max_seq_len, causal, onehot_max)
    unit = torch.finfo(dtype).eps / 2          # the format's unit roundoff
    layout = Layout(prog, binary_nodes(prog, unit=unit, binary_from=binary_from))
    n_layers = prog.n_layers
    heads: list[list[HeadSpec]] = [[] for _ in range(n_layers)]
    mlps: list[list[MLPBlock]] = [[] for _ in range(n_layers)]
    shared: dict[tuple, HeadSpec] = {}
    for node in prog.nodes:
        if node.kind == "attn":
            # aggregates with one selector share one attention pattern: one head, several values
            head = compile_head(node, layout, causal)
            sop = node.sop
            key = (node.slot, sop.selector.uid, sop.reduce, None if sop.reduce == "mean" else sop.sop.uid)
            if key in shared:
                shared[key].ov += head.ov
                shared[key].text += "; " + head.text
            else:
                shared[key] = head
                heads[node.slot // 2].append(head)
        elif node.kind == "width":
            heads[node.slot // 2].append(compile_head(node, layout, causal))
            mlps[node.slot // 2].append(compile_mlp(node, layout, plateau))
        elif node.kind == "mlp":
            mlps[node.slot // 2].append(compile_mlp(node, layout, plateau))
    out = prog.output
    classes = [None] if out.numerical else list(output_values or [])
    if not out.numerical:
        classes += [v for v in out.values if v not in classes]
    check_logits(prog, layout, classes, check_heads(layout, heads, unit), unit)
    cfg = TransformerConfig(
        d_vocab=len(vocab) + 1, d_model=len(layout), n_layers=n_layers,
        n_heads=max([len(h) for h in heads] + [1]),
        d_head=max([max(len(h.qk), len(h.ov)) for hs in heads for h in hs] + [1]),
        d_mlp=max([sum(len(b.units) for b in bl) for bl in mlps] + [1]),
        n_ctx=max_seq_len + 1, positional="learned", attn_scale=1.0, act_fn="relu",
        normalization=None, d_vocab_out=len(classes), dtype=_DTYPE_NAMES[dtype],
        causal=causal)
    annotations = Annotations(
        residual=layout.labels, head_names=[h.text for hs in heads for h in hs],
        vocab=[repr(v) for v in vocab] + ["BOS"], title=f"compiled RASP program {out.label!r}",
        notes={"unembed.W_U": f"reads {out.label} ({out.encoding})"})
    model = Transformer(cfg, annotations)
    with torch.no_grad():
        _fill(model, prog, layout, heads, mlps, classes)
        _clean_bos(model)
    ct = CompiledTransformer(model, layout, prog, vocab, classes, heads, mlps,
                             _token_ids={t: i for i, t in enumerate(vocab)})
    ct.seconds = time.perf_counter() - start
    return ct


def _put(matrix: torch.Tensor, feature: Feature, column: int) -> None:
    for d, c in feature.items():
        matrix[d, column] += c


class _Entries:
    """A float64 matrix collected as (row, column, value) entries and built with one
    accumulating ``index_put_`` (entry-by-entry tensor indexing dominated large compilations)."""

    def __init__(self, rows: int, cols: int) -> None:
        self.shape, self.r, self.c, self.v = (rows, cols), [], [], []

    def column(self, feature: Feature, column: int) -> None:
        """``M[d, column] += c`` for each ``d: c`` of the feature."""
        self.r += feature.keys()
        self.c += [column] * len(feature)
        self.v += feature.values()

    def row(self, row: int, feature: Feature) -> None:
        """``M[row, d] += c`` for each ``d: c`` of the feature."""
        self.r += [row] * len(feature)
        self.c += feature.keys()
        self.v += feature.values()

    def dense(self) -> torch.Tensor:
        m = torch.zeros(self.shape, dtype=torch.float64)
        if self.v:
            m.index_put_((torch.tensor(self.r, dtype=torch.long), torch.tensor(self.c, dtype=torch.long)),
                         torch.tensor(self.v, dtype=torch.float64), accumulate=True)
        return m


def _fill(model: Transformer, prog: Program, layout: Layout, heads: list[list[HeadSpec]],
          mlps: list[list[MLPBlock]], classes: list) -> None:
    dt = model.cfg.torch_dtype
    W_E = torch.zeros(model.cfg.d_vocab, len(layout), dtype=torch.float64)
    W_pos = torch.zeros(model.cfg.n_ctx, len(layout), dtype=torch.float64)
    W_E[:, layout.one] = 1.0
    W_E[len(prog.vocab), layout.bos] = 1.0
    for node in prog.nodes:
        if node.kind == "token":
            for i, v in node.table.items():
                for d, c in layout.write(node, v).items():
                    W_E[i, d] += c
        elif node.kind == "position":
            for p, v in node.table.items():
                for d, c in layout.write(node, v).items():
                    W_pos[p + 1, d] += c
    model.embed.W_E.copy_(W_E.to(dt))
    model.pos_embed.W_pos.copy_(W_pos.to(dt))
    for layer, (hs, blocks) in enumerate(zip(heads, mlps)):
        attn, mlp = model.blocks[layer].attn, model.blocks[layer].mlp
        for h, head in enumerate(hs):
            W_Q, W_K, W_V = (_Entries(len(layout), model.cfg.d_head) for _ in range(3))
            W_O = _Entries(model.cfg.d_head, len(layout))
            for e, (q, k) in enumerate(head.qk):
                W_Q.column(q, e)
                W_K.column(k, e)
            for e, (v, o) in enumerate(head.ov):
                W_V.column(v, e)
                W_O.row(e, o)
            for param, value in ((attn.W_Q, W_Q), (attn.W_K, W_K), (attn.W_V, W_V), (attn.W_O, W_O)):
                param[h].copy_(value.dense().to(dt))
        W_in, W_out = _Entries(len(layout), model.cfg.d_mlp), _Entries(model.cfg.d_mlp, len(layout))
        b_in = [0.0] * model.cfg.d_mlp
        b_out = torch.zeros(len(layout), dtype=torch.float64)
        u = 0
        for block in blocks:
            for d, c in block.out_bias.items():
                b_out[d] += c
            for w_in, bias, w_out in block.units:
                W_in.column(w_in, u)
                b_in[u] = bias
                W_out.row(u, w_out)
                u += 1
        for param, value in ((mlp.W_in, W_in.dense()), (mlp.b_in, torch.tensor(b_in, dtype=torch.float64)),
                             (mlp.W_out, W_out.dense()), (mlp.b_out, b_out)):
            param.copy_(value.to(dt))
    _fill_unembed(model, prog, layout, classes)


def _fill_unembed(model: Transformer, prog: Program, layout: Layout, classes: list) -> None:
    out = prog.output
    W_U = torch.zeros(len(layout), len(classes), dtype=torch.float64)
    if out.numerical:
        _put(W_U, layout.number(out), 0)
    elif out.encoding == "onehot":
        for v in out.values:
            _put(W_U, layout.indicator(out, v), classes.index(v))
    else:   # logit(c) = -(x - code(c))**2 + x**2 = 2*x*code(c) - code(c)**2
        for i, c in enumerate(classes):
            try:
                code = float(prog.code(c))
            except (KeyError, TypeError):
                W_U[layout.one, i] = -1e9           # a class the program never outputs
                continue
            _put(W_U, {d: 2 * code * x for d, x in layout.code(out).items()}, i)
            W_U[layout.one, i] -= code * code
    model.unembed.W_U.copy_(W_U.to(model.cfg.torch_dtype))


def _clean_bos(model: Transformer) -> None:
    """The BOS clean-up of the module docstring, layer by layer."""
    bos_row = model.embed.W_E.shape[0] - 1
    x = (model.embed.W_E[bos_row] + model.pos_embed.W_pos[0])[None, None, :]
    bos_dim = 1
    for block in model.blocks:
        attn = block.attn
        for name in ("W_Q", "W_K", "W_V"):
            W = getattr(attn, name)
            actual = torch.einsum("d,hde->he", x[0, 0], W)
            W[:, bos_dim, :] += W[:, bos_dim, :] - actual
        x = block(x)
