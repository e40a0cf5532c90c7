"""lengthgen: theorems about transformers' length generalization as running, checkable code.

The generic pieces live here (model, attention kernels, position-ID rules, tasks, decoding,
weight files); constructions of particular theorems live in the top-level ``constructions``
package, RASP in ``rasp``.
"""
from .model import Annotations, KVCache, Transformer, TransformerConfig

__all__ = ["Annotations", "KVCache", "Transformer", "TransformerConfig"]
__version__ = "0.1.0"
