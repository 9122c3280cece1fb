"""The methods the tensorclasses of `cryovit.types` share: their state dicts, loading in place, pinning."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch
from tensordict import NonTensorData, is_tensor_collection

from ._io import arrays_as_tensors, tensors_as_arrays

_TC = TypeVar("_TC", bound="TensorClassMixin")

WHOLE_LISTS: dict[type, tuple[str, ...]] = {}
"""The list fields a class keeps whole (one ``NonTensorData``), not one entry per element of the batch."""


class TensorClassMixin:
    """The methods the tensorclasses of `cryovit.types` replace, where tensordict's fail or are deprecated.

    tensordict 0.15 cannot take the state dict of a tensorclass holding a list of strings (a
    ``NonTensorStack``), deprecates ``load_()``, and raises in ``pin_memory()`` without an accelerator.
    """

    def state_dict(
        self,
        destination: dict[str, Any] | None = None,
        prefix: str = "",
        keep_vars: bool = False,
        flatten: bool = False,
    ) -> dict[str, Any]:
        """Returns a state_dict dictionary that can be used to save and load data from a tensorclass.

        Every field is an entry: a tensor as it is (detached unless ``keep_vars``), a nested tensor
        collection as its own state dict, anything else (``str``, ``int``, lists, dicts, ``None``) as its
        Python value, a list of strings as a plain ``list``; a numpy array of ``aux_data`` as a tensor
        (marked, so that ``load_state_dict`` makes it an array again), which
        ``torch.load(weights_only=True)`` reads.

        Args:
            destination: The dictionary to fill. Defaults to a new ``OrderedDict``.
            prefix: A prefix for the keys of this tensorclass's entries.
            keep_vars: Whether to keep the tensors attached to the autograd graph.
            flatten: Whether nested tensor collections are written as ``"field.sub"`` keys of this
                dictionary instead of nested dictionaries.

        Returns:
            The state dict.
        """
        out: dict[str, Any] = collections.OrderedDict() if destination is None else destination
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            key = prefix + field.name
            value = getattr(self, field.name)
            if is_tensor_collection(value):
                if flatten:
                    value.state_dict(destination=out, prefix=key + ".", keep_vars=keep_vars, flatten=True)
                else:
                    out[key] = value.state_dict(keep_vars=keep_vars, flatten=False)
            elif isinstance(value, torch.Tensor):
                out[key] = value if keep_vars else value.detach()
            elif isinstance(value, dict):
                out[key] = arrays_as_tensors(value)
            else:
                out[key] = list(value) if isinstance(value, list) else value
        return out

    def load_state_dict(
        self: _TC,
        state_dict: Mapping[str, Any],
        strict: bool = True,
        assign: bool = False,
        from_flatten: bool = False,
    ) -> _TC:
        """Loads a state_dict attemptedly in-place on the destination tensorclass.

        A tensor of the same shape as the field's is copied into it, unless ``assign``; any other value
        replaces the field. Flat (``"field.sub"``) and nested state dicts are both read.

        Args:
            state_dict: A state dict, as ``state_dict`` makes.
            strict: Whether a missing or unknown field raises.
            assign: Whether to replace the tensors instead of copying into them.
            from_flatten: Accepted for compatibility; flat keys are recognised by their dots.

        Returns:
            self.

        Raises:
            KeyError: If ``strict`` and a field is missing from ``state_dict`` or a key names no field.
        """
        grouped: dict[str, Any] = {}
        for key, value in state_dict.items():
            head, dot, rest = key.partition(".")
            if dot:
                grouped.setdefault(head, {})[rest] = value
            else:
                grouped[key] = value
        names = [field.name for field in dataclasses.fields(self)]  # type: ignore[arg-type]
        if strict:
            unknown = sorted(set(grouped) - set(names))
            missing = [name for name in names if name not in grouped]
            if unknown or missing:
                raise KeyError(
                    f"{type(self).__name__}.load_state_dict: unknown keys {unknown}, missing fields {missing}"
                )
        for name in names:
            if name not in grouped:
                continue
            value, current = grouped[name], getattr(self, name)
            if is_tensor_collection(current) and isinstance(value, Mapping):
                current.load_state_dict(value, strict=strict, assign=assign, from_flatten=from_flatten)
            elif (
                not assign
                and isinstance(current, torch.Tensor)
                and isinstance(value, torch.Tensor)
                and current.shape == value.shape
            ):
                current.copy_(value)
            else:
                if name in WHOLE_LISTS.get(type(self), ()):
                    value = NonTensorData(list(value))
                elif isinstance(value, dict):
                    value = tensors_as_arrays(value)
                self.set(name, value)  # type: ignore[attr-defined]
        return self

    def load_(self: _TC, prefix: str | Path, *args: Any, **kwargs: Any) -> _TC:
        """Loads a tensordict from disk within the current tensordict.

        This method is a proxy to ``load_memmap_()``.

        Args:
            prefix: The folder the tensorclass was saved to.
            *args: Passed on to ``load_memmap_``.
            **kwargs: Passed on to ``load_memmap_``.

        Returns:
            self, holding the loaded values.
        """
        return self.load_memmap_(prefix, *args, **kwargs)  # type: ignore[attr-defined]

    def pin_memory(self: _TC, device: torch.device | str | None = None) -> _TC:
        """Returns a copy with its tensors in pinned (page-locked) memory.

        Pinned memory only exists alongside an accelerator; without one this returns a plain copy.

        Args:
            device: Accepted as the pipeline passes it (torch's ``DataLoader`` calls
                ``pin_memory(device)``); memory is pinned for the current accelerator.

        Returns:
            A new instance of the same class, with the same values.
        """
        if not torch.accelerator.is_available():
            return self.clone()  # type: ignore[attr-defined]
        return self.apply(lambda tensor: tensor.pin_memory())  # type: ignore[attr-defined]
