"""``certify(ct)``: the certificate of a compiled RASP program, layer by layer.

Order of the checks (docs/turing-programs.md, "Certifying a compiled program"):

1. the model's form: causal, float64, no normalisation, ReLU, ``attn_scale = 1``, no windows,
   ``b_V = b_O = 0`` (anything else is refused or fails ``structure``);
2. the embedding: every token row and every position row ``p + 1`` equals ``one`` plus the
   ``layout.write`` encodings of the token-wise (position-wise) s-ops, exactly, so ``eps = 0``;
3. per layer, each head (:mod:`rasp.certify.heads`), then each MLP table (:mod:`rasp.certify.mlps`),
   updating ``eps`` of the dimensions they write; the BOS position's residual is one fixed input,
   carried as an interval enclosure (causal: BOS attends to itself alone, with weight exactly 1);
4. the readout: at every state of the output s-op's sources the logits' enclosure must put the
   program's value ahead of every other class by more than ``DECISION_MARGIN`` (numerical
   output: the error bound must be at most ``NUMERIC_TOL``).

The statement proven is about the exact real-number function of the stored float64 weights; for
float32 weights it is about their float32 forward pass under the rounding model of
docs/certificate.md ((F1) and (F3)), each step's rounding added to ``eps``
(:mod:`rasp.certify.floats`).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from lengthgen.decode import DECISION_MARGIN
from lengthgen.proof import interval as I
import rasp.certify.floats as floats
from rasp.certify.heads import FLOAT32_TOL, HeadRow, check_head, head_writes
from rasp.certify.mlps import MLPRow, check_mlps
from rasp.certify.state import COMBO_BUDGET, CertifyError, Fail, State
from rasp.weights.assemble import CompiledTransformer

PREMISE = ("every categorical Aggregate(reduce='mean') selects keys that all hold one value "
           "(tracr's premise for categorical means)")
NUMERIC_TOL = 1e-9    # a numerical output's certified error bound may be at most this
STATEMENTS = {"float64": "the exact real-number function of the stored float64 weights",
              "float32": "the float32 forward pass, under the rounding model (F1)-(F3) of docs/certificate.md"}


@dataclass
class Certificate:
    """Verdict (PASS/FAIL), the failing check's kind and reason, and the per-head and per-MLP rows."""

    verdict: str
    kind: str | None
    reason: str
    program: str
    max_seq_len: int
    premise: str = PREMISE
    heads: list[HeadRow] = field(default_factory=list)
    mlps: list[MLPRow] = field(default_factory=list)
    readout_margin: float | None = None
    output_error: float | None = None
    eps: list[list[float]] = field(default_factory=list)   # after each sub-layer (head, MLP, ...)
    seconds: float = 0.0
    dtype: str = "float64"

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    def to_json(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        lines = [f"certificate for {self.program!r}, inputs of 1..{self.max_seq_len} tokens: {self.verdict}"
                 + (f" ({self.kind}: {self.reason})" if self.kind else ""),
                 f"premise: {self.premise}", f"about: {STATEMENTS[self.dtype]}"]
        for r in self.heads:
            lines.append(f"  layer {r.layer} head {r.head} [{r.reduce}] {r.writes}: margin {r.margin:.6g}, "
                         f"spread {r.spread:.3g}, leak <= {r.leak:.3g}, TV <= {r.tv:.3g}, "
                         f"error <= {r.error:.3g} ({r.pairs} state pairs)")
        for r in self.mlps:
            lines.append(f"  layer {r.layer} MLP {r.writes}: {r.units} units, {r.states} input states, "
                         f"error <= {r.error:.3g}")
        if self.readout_margin is not None:
            lines.append(f"  readout: every class wins by >= {self.readout_margin:.6g} "
                         f"(needs > DECISION_MARGIN = {DECISION_MARGIN:g})")
        if self.output_error is not None:
            lines.append(f"  readout: numerical output within {self.output_error:.3g}")
        lines.append(f"  {self.seconds:.2f} s")
        return "\n".join(lines)


def _check_form(ct: CompiledTransformer) -> None:
    cfg = ct.model.cfg
    if not cfg.causal or not ct.program.causal:
        raise CertifyError("non-causal programs are not certified in this version (every position, "
                           "BOS included, attends to every key)")
    if cfg.dtype not in STATEMENTS:
        raise CertifyError(f"{cfg.dtype} weights are not certified; compile with dtype=torch.float64 or float32")
    if (cfg.normalization is not None or cfg.act_fn != "relu" or cfg.score_scale != 1.0
            or cfg.attn_windows is not None or cfg.positional != "learned"):
        raise CertifyError("the model is not of the compiler's form (no normalisation, ReLU, "
                           "attn_scale 1, learned positions, no windows)")


def _embedding(st: State) -> None:
    """Token rows and position rows equal the exact encodings (BOS's rows are free); in float32,
    within the format's rounding of them (at most ``u |encoding|``), which starts ``eps``."""
    lay, prog = st.layout, st.prog

    def compare(row: np.ndarray, want: np.ndarray, what: str) -> None:
        off = np.abs(row - want)
        if not np.all(off <= st.unit * np.abs(want)):
            raise Fail("lookup", f"embedding: {what}")
        st.eps = np.maximum(st.eps, off)

    for t in range(len(prog.vocab)):
        want = np.zeros(st.d)
        want[lay.one] = 1.0
        for node in prog.nodes:
            if node.kind == "token":
                for x, c in lay.write(node, node.table[t]).items():
                    want[x] += c
        compare(st.p["embed.W_E"][t], want, f"W_E row {t} ({prog.vocab[t]!r}) is not the encoding of its token")
    for p in range(st.n):
        want = np.zeros(st.d)
        for node in prog.nodes:
            if node.kind == "position":
                for x, c in lay.write(node, node.table[p]).items():
                    want[x] += c
        compare(st.p["pos_embed.W_pos"][p + 1], want, f"W_pos row {p + 1} is not the encoding of position {p}")


def _readout(st: State, cert: Certificate) -> None:
    out = st.prog.output
    W_U, b_U = st.p["unembed.W_U"], st.p["unembed.b_U"]
    u_dims = np.nonzero(np.any(W_U != 0, axis=1))[0]
    names, ranges = st.sources([out.sop] + [o.sop for o in st.owners(u_dims)])
    if st.count(ranges) > COMBO_BUDGET:
        raise Fail("budget", f"readout: {st.count(ranges)} output states, over COMBO_BUDGET = {COMBO_BUDGET}")
    combos = st.combos(names, ranges)
    logits = floats.widen(I.affine(st.box(combos, u_dims), W_U, b_U),
                          floats.logit_error(floats.magnitudes(st), W_U, b_U, st.unit))
    values = [st.value(out.sop, a) for a in combos]
    if out.numerical:
        want = np.array([float(v) for v in values])
        err = float(np.maximum(I.up(logits.hi[:, 0] - want), I.up(want - logits.lo[:, 0])).max())
        cert.output_error = err
        tol = FLOAT32_TOL if st.unit else NUMERIC_TOL
        if not err <= tol:
            raise Fail("readout", f"the numerical output is certified only within {err:.3g} (> {tol:g})")
        return
    worst = np.inf
    classes = st.ct.classes
    for i, v in enumerate(values):
        if v not in classes:
            raise Fail("readout", f"output {v!r} is not one of the unembedding's classes")
        c = classes.index(v)
        rivals = np.delete(logits.hi[i], c)
        gap = float(I.down(logits.lo[i, c] - rivals.max())) if len(rivals) else np.inf
        worst = min(worst, gap)
        if not gap > DECISION_MARGIN:
            raise Fail("readout", f"output {v!r} at the state {_show(combos[i], st)} wins by only "
                                  f"{gap:.3g} (needs > DECISION_MARGIN = {DECISION_MARGIN:g})")
    cert.readout_margin = worst


def _show(asg: dict, st: State) -> str:
    names = {id(n): n.label for n in st.prog.nodes}
    return ", ".join(f"{names.get(k, k)}={v!r}" for k, v in asg.items())


def _layer(st: State, layer: int, bos_x: I.Iv, cert: Certificate) -> I.Iv:
    a = f"blocks.{layer}.attn."
    if np.any(st.p[a + "b_V"] != 0) or np.any(st.p[a + "b_O"] != 0):
        raise Fail("structure", f"layer {layer}: b_V or b_O is not zero")
    written: dict[int, object] = {}
    for h in range(st.p[a + "W_Q"].shape[0]):
        for node in head_writes(st, layer, h):
            if id(node) in written:
                raise Fail("structure", f"two heads of layer {layer} write {node.label!r}")
            written[id(node)] = node
    for node in st.prog.nodes:
        if ((node.kind == "attn" and node.slot == 2 * layer) or (node.kind == "width" and node.slot == 2 * layer + 1)) \
                and id(node) not in written:
            raise Fail("structure", f"no head of layer {layer} computes {node.label!r}")
    updates = []
    for h in range(st.p[a + "W_Q"].shape[0]):
        res = check_head(st, layer, h, bos_x)
        if res is not None:
            cert.heads.append(res[0])
            updates.append(res[1:])
    bos_x = floats.bos_attention(bos_x, st.p[a + "W_V"], st.p[a + "W_O"], st.unit)
    for nodes, dims, err in updates:
        st.eps[dims] = err
        for node in nodes:
            st.status[id(node)] = "scratch" if node.kind == "width" else "full"
    cert.eps.append(st.eps.tolist())
    for row, node, dims, dev in check_mlps(st, layer):
        cert.mlps.append(row)
        st.eps[dims] = dev
        st.status[id(node)] = "full"
    cert.eps.append(st.eps.tolist())
    m = f"blocks.{layer}.mlp."
    return floats.bos_mlp(bos_x, *(st.p[m + k] for k in ("W_in", "b_in", "W_out", "b_out")), st.unit)


def certify(ct: CompiledTransformer) -> Certificate:
    """Prove (or refute) that ``ct`` decides the program's output at every position of every input
    of at most ``max_seq_len`` tokens, under :data:`PREMISE`. Raises :class:`CertifyError` for a
    model or program outside the certificate's scope (one line saying why)."""
    start = time.perf_counter()
    _check_form(ct)
    cert = Certificate("PASS", None, "", ct.program.output.label, ct.program.n, dtype=ct.model.cfg.dtype)
    try:
        st = State(ct)
        _embedding(st)
        bos = st.p["embed.W_E"].shape[0] - 1
        bos_x = I.Iv.exact(st.p["embed.W_E"][bos]) + st.p["pos_embed.W_pos"][0]
        for layer in range(ct.model.cfg.n_layers):
            bos_x = _layer(st, layer, bos_x, cert)
        _readout(st, cert)
    except Fail as exc:
        cert.verdict, cert.kind, cert.reason = "FAIL", exc.kind, exc.message
    cert.seconds = time.perf_counter() - start
    return cert


__all__ = ["Certificate", "CertifyError", "PREMISE", "certify"]
