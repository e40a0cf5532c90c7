"""TransformerLens-style hook points, without TransformerLens.

Every :class:`lengthgen.Transformer` passes its activations through :class:`HookPoint` modules
named as in TransformerLens (``blocks.0.attn.hook_pattern``, ``blocks.1.hook_resid_post``, ...),
and :class:`HookedModule` gives it TransformerLens's way of using them: ``run_with_hooks``,
``run_with_cache``, ``hooks()``, ``add_hook``, ``reset_hooks``, ``hook_dict``. A hook function is
called as ``fn(activation, hook=hook_point)``; returning a tensor replaces the activation.

The surface follows ``transformer_lens.hook_points.HookPoint`` and
``transformer_lens.HookedRootModule`` (present in TransformerLens 3.x and 4.x), so code written
for them runs on lengthgen models. Nothing here imports TransformerLens: ``run_with_cache`` wraps
its dict in ``transformer_lens.ActivationCache`` only when TransformerLens is installed (imported at
that call), and returns the plain dict otherwise.

A hook point with no hook attached costs one attribute check: :meth:`HookPoint.__call__` returns
its input without going through ``nn.Module.__call__`` (a decoding step passes some twenty of them).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterator, Literal, Sequence, Union

import torch
from torch import nn
from torch.nn.modules import module as _torch_module
from torch.utils.hooks import RemovableHandle

__all__ = ["HookPoint", "HookedModule", "NamesFilter"]

Direction = Literal["fwd", "bwd", "both"]
HookFunction = Callable[..., Any]
NamesFilter = Union[None, str, Sequence[str], Callable[[str], bool]]
#: torch's process-wide module hooks (nn.modules.module.register_module_forward_hook and kin)
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")


@dataclass
class Handle:
    """One hook added to a :class:`HookPoint` (TransformerLens's ``LensHandle``)."""

    hook: RemovableHandle
    is_permanent: bool = False
    context_level: int | None = None


def _global_hooks() -> bool:
    return any(getattr(_torch_module, name, None) for name in _GLOBAL_HOOKS)


class HookPoint(nn.Module):
    """An identity module that hook functions can read and replace (TransformerLens's HookPoint)."""

    def __init__(self) -> None:
        super().__init__()
        self.fwd_hooks: list[Handle] = []
        self.bwd_hooks: list[Handle] = []
        self.ctx: dict = {}
        self.name: str | None = None

    @property
    def active(self) -> bool:
        """Whether calling this point can do anything but return its input: a torch hook on it
        (TransformerLens hooks are torch hooks), a process-wide module hook, or a ``forward``
        patched onto this instance (as tracing libraries do)."""
        return bool(self._forward_hooks or self._forward_pre_hooks or self._backward_hooks
                    or self._backward_pre_hooks or "forward" in self.__dict__ or _global_hooks())

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return super().__call__(x) if self.active else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def add_hook(self, hook: HookFunction, dir: Literal["fwd", "bwd"] = "fwd", is_permanent: bool = False,
                 level: int | None = None, prepend: bool = False) -> Handle:
        """Call ``hook(activation, hook=self)`` on the forward value (``dir="fwd"``) or on its
        gradient (``"bwd"``); a returned tensor replaces the value."""
        if dir == "fwd":
            def full_hook(module: nn.Module, inputs: Any, output: torch.Tensor) -> Any:
                return hook(output, hook=self)

            torch_handle = self.register_forward_hook(full_hook, prepend=prepend)
            handles = self.fwd_hooks
        elif dir == "bwd":
            def full_hook(module: nn.Module, grad_input: Any, grad_output: tuple) -> Any:
                out = hook(grad_output[0], hook=self)
                return None if out is None else (out if isinstance(out, tuple) else (out,))

            torch_handle = self.register_full_backward_hook(full_hook, prepend=prepend)
            handles = self.bwd_hooks
        else:
            raise ValueError(f"invalid hook direction {dir!r}; use 'fwd' or 'bwd'")
        full_hook.__name__ = f"partial({hook.func!r},...)" if isinstance(hook, partial) else repr(hook)
        handle = Handle(torch_handle, is_permanent, level)
        handles.insert(0, handle) if prepend else handles.append(handle)
        return handle

    def add_perma_hook(self, hook: HookFunction, dir: Literal["fwd", "bwd"] = "fwd") -> Handle:
        return self.add_hook(hook, dir=dir, is_permanent=True)

    @staticmethod
    def _matches(handle: Handle, including_permanent: bool, level: int | None) -> bool:
        return (including_permanent or not handle.is_permanent) and (level is None or handle.context_level == level)

    def has_hooks(self, dir: Direction = "both", including_permanent: bool = True, level: int | None = None) -> bool:
        lists = {"fwd": [self.fwd_hooks], "bwd": [self.bwd_hooks], "both": [self.fwd_hooks, self.bwd_hooks]}[dir]
        return any(self._matches(h, including_permanent, level) for handles in lists for h in handles)

    def remove_hooks(self, dir: Direction = "fwd", including_permanent: bool = False, level: int | None = None) -> None:
        if dir not in ("fwd", "bwd", "both"):
            raise ValueError(f"invalid hook direction {dir!r}; use 'fwd', 'bwd' or 'both'")

        def keep(handles: list[Handle]) -> list[Handle]:
            for h in handles:
                if self._matches(h, including_permanent, level):
                    h.hook.remove()
            return [h for h in handles if not self._matches(h, including_permanent, level)]

        if dir in ("fwd", "both"):
            self.fwd_hooks = keep(self.fwd_hooks)
        if dir in ("bwd", "both"):
            self.bwd_hooks = keep(self.bwd_hooks)

    def clear_context(self) -> None:
        self.ctx = {}

    def layer(self) -> int:
        """The block index of a ``blocks.{l}....`` hook point."""
        if self.name is None:
            raise ValueError("this hook point has no name (it is not part of a HookedModule)")
        return int(self.name.split(".")[1])

    def __repr__(self) -> str:
        return f"HookPoint(name={self.name!r})"


def _as_filter(names_filter: NamesFilter) -> Callable[[str], bool]:
    if names_filter is None:
        return lambda name: True
    if isinstance(names_filter, str):
        return lambda name: name == names_filter
    if callable(names_filter):
        return names_filter
    allowed = set(names_filter)
    return lambda name: name in allowed


class HookedModule(nn.Module):
    """TransformerLens's ``HookedRootModule`` interface over the :class:`HookPoint` submodules.

    Subclasses call :meth:`setup_hooks` at the end of ``__init__``."""

    def setup_hooks(self) -> None:
        """Name every submodule after its path and index the hook points (``hook_dict``)."""
        self.context_level = 0
        self.mod_dict: dict[str, nn.Module] = {}
        self.hook_dict: dict[str, HookPoint] = {}
        for name, module in self.named_modules():
            if not name:
                continue
            self.mod_dict[name] = module
            if isinstance(module, HookPoint):
                module.name = name
                self.hook_dict[name] = module

    def hook_points(self) -> Iterator[HookPoint]:
        return iter(self.hook_dict.values())

    def _points(self, name: str | Callable[[str], bool]) -> list[HookPoint]:
        if isinstance(name, str):
            if name not in self.hook_dict:
                raise KeyError(f"no hook point named {name!r}; this model has {sorted(self.hook_dict)}")
            return [self.hook_dict[name]]
        return [hp for hook_name, hp in self.hook_dict.items() if name(hook_name)]

    def add_hook(self, name: str | Callable[[str], bool], hook: HookFunction, dir: Literal["fwd", "bwd"] = "fwd",
                 is_permanent: bool = False, level: int | None = None, prepend: bool = False) -> None:
        """Add ``hook`` at the hook point ``name``, or at every point whose name passes ``name``."""
        for hp in self._points(name):
            hp.add_hook(hook, dir=dir, is_permanent=is_permanent, level=level, prepend=prepend)

    def add_perma_hook(self, name: str | Callable[[str], bool], hook: HookFunction,
                       dir: Literal["fwd", "bwd"] = "fwd") -> None:
        self.add_hook(name, hook, dir=dir, is_permanent=True)

    def reset_hooks(self, clear_contexts: bool = True, direction: Direction = "both",
                    including_permanent: bool = False, level: int | None = None) -> None:
        for hp in self.hook_points():
            if clear_contexts:
                hp.clear_context()
            hp.remove_hooks(direction, including_permanent=including_permanent, level=level)

    @contextmanager
    def hooks(self, fwd_hooks: Sequence[tuple] = (), bwd_hooks: Sequence[tuple] = (),
              reset_hooks_end: bool = True, clear_contexts: bool = False) -> Iterator["HookedModule"]:
        """Within the block, the given ``(name or filter, fn)`` hooks are active."""
        self.context_level += 1
        try:
            for hooks, direction in ((fwd_hooks, "fwd"), (bwd_hooks, "bwd")):
                for name, fn in hooks:
                    self.add_hook(name, fn, dir=direction, level=self.context_level)
            yield self
        finally:
            if reset_hooks_end:
                self.reset_hooks(clear_contexts, including_permanent=False, level=self.context_level)
            self.context_level -= 1

    def run_with_hooks(self, *model_args: Any, fwd_hooks: Sequence[tuple] = (), bwd_hooks: Sequence[tuple] = (),
                       reset_hooks_end: bool = True, clear_contexts: bool = False, **model_kwargs: Any) -> Any:
        """``self(*model_args, **model_kwargs)`` with the hooks active (removed afterwards)."""
        with self.hooks(fwd_hooks, bwd_hooks, reset_hooks_end, clear_contexts):
            return self(*model_args, **model_kwargs)

    def get_caching_hooks(self, names_filter: NamesFilter = None, incl_bwd: bool = False,
                          device: str | torch.device | None = None, remove_batch_dim: bool = False,
                          cache: dict | None = None) -> tuple[dict, list, list]:
        """``(cache, fwd_hooks, bwd_hooks)``: hooks that store detached activations in ``cache``."""
        cache = {} if cache is None else cache
        keep = _as_filter(names_filter)

        def save(tensor: torch.Tensor, hook: HookPoint, suffix: str) -> None:
            stored = tensor.detach().to(device) if device is not None else tensor.detach()
            cache[f"{hook.name}{suffix}"] = stored[0] if remove_batch_dim else stored

        names = [name for name in self.hook_dict if keep(name)]
        fwd = [(name, partial(save, suffix="")) for name in names]
        bwd = [(name, partial(save, suffix="_grad")) for name in names] if incl_bwd else []
        return cache, fwd, bwd

    def run_with_cache(self, *model_args: Any, names_filter: NamesFilter = None,
                       device: str | torch.device | None = None, remove_batch_dim: bool = False,
                       incl_bwd: bool = False, reset_hooks_end: bool = True, clear_contexts: bool = False,
                       return_cache_object: bool = True, **model_kwargs: Any) -> tuple[Any, Any]:
        """``(output, cache)`` of one forward pass. The cache is a
        ``transformer_lens.ActivationCache`` when TransformerLens is installed and
        ``return_cache_object`` is true, else a dict from hook name to activation."""
        if remove_batch_dim and model_args and isinstance(model_args[0], torch.Tensor) \
                and model_args[0].dim() > 1 and model_args[0].shape[0] != 1:
            raise ValueError(f"remove_batch_dim needs a batch of 1, got {model_args[0].shape[0]}")
        cache, fwd, bwd = self.get_caching_hooks(names_filter, incl_bwd, device, remove_batch_dim)
        with self.hooks(fwd, bwd, reset_hooks_end, clear_contexts):
            out = self(*model_args, **model_kwargs)
            if incl_bwd:
                out.backward()
        if return_cache_object:
            try:
                from transformer_lens import ActivationCache
            except ImportError:
                return out, cache
            return out, ActivationCache(cache, self, has_batch_dim=not remove_batch_dim)
        return out, cache
