"""Loading a MODEL.py file: its `model` (an nn.Module or a function) and its `example_inputs`
(a tuple of tensors, or a zero-argument function returning one), moved to a device or cast to a
dtype. A file that cannot be used is a usage error: one line, exit 2."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from .exits import fail, one_line


def load_model_file(path: Path, model_name: str = "model", inputs_name: str = "example_inputs"):
    """(model, example_inputs tuple, name) from a Python file; usage errors exit 2 with one line."""
    model, inputs, name, _ = load_model_module(path, model_name, inputs_name)
    return model, inputs, name


def load_model_module(path: Path, model_name: str = "model", inputs_name: str = "example_inputs"):
    """load_model_file, also returning the imported module (for optional names like `tolerance`)."""
    import torch

    path = Path(path)
    if not path.is_file():
        fail(f"model file {str(path)!r} not found")
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in path.stem) or "model"
    spec = importlib.util.spec_from_file_location(f"pipec_model_{name}", path)
    if spec is None or spec.loader is None:
        fail(f"cannot import {path.name} (not a Python file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # torch.export (strict) and pickling look classes up by module name
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except SystemExit:
        sys.modules.pop(spec.name, None)
        fail(f"{path.name} called exit() while being imported")
    except Exception as exc:
        sys.modules.pop(spec.name, None)
        fail(f"importing {path.name} failed: {one_line(exc)}")
    finally:
        try:
            sys.path.remove(str(path.resolve().parent))
        except ValueError:
            pass
    if not hasattr(module, model_name):
        fail(f"{path.name} defines no `{model_name}` (use --model NAME)")
    model = getattr(module, model_name)
    if not callable(model):
        fail(f"`{model_name}` in {path.name} is a {type(model).__name__}, not an nn.Module or a function")
    if not hasattr(module, inputs_name):
        fail(f"{path.name} defines no `{inputs_name}` (use --inputs NAME)")
    inputs = getattr(module, inputs_name)
    if callable(inputs) and not isinstance(inputs, torch.Tensor):
        try:
            inputs = inputs()
        except Exception as exc:
            fail(f"calling `{inputs_name}()` from {path.name} failed: {one_line(exc)}")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if isinstance(inputs, list):
        inputs = tuple(inputs)
    if not isinstance(inputs, tuple):
        fail(f"`{inputs_name}` in {path.name} must be a tuple of tensors or a zero-argument function "
             f"returning one, not {type(inputs).__name__}")
    return model, inputs, name, module


def to_device(model, inputs, device: str):
    import torch
    from torch.utils._pytree import tree_map

    if isinstance(model, torch.nn.Module):
        model = model.to(device)
    inputs = tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, inputs)
    return model, inputs


def to_dtype(model, inputs, dtype: str):
    """The model's floating parameters and the floating inputs cast to `dtype`."""
    import torch
    from torch.utils._pytree import tree_map

    target = getattr(torch, dtype)
    if isinstance(model, torch.nn.Module):
        model = model.to(target)
    inputs = tree_map(lambda t: t.to(target) if isinstance(t, torch.Tensor) and t.is_floating_point() else t,
                      inputs)
    return model, inputs


def to_channels_last(model, inputs):
    """The model's 4-d parameters and buffers and the 4-d inputs stored channels-last (NHWC):
    `model.to(memory_format=torch.channels_last)`, what a conv net's user does for cuDNN's
    16-bit kernels; values unchanged."""
    import torch
    from torch.utils._pytree import tree_map

    if isinstance(model, torch.nn.Module):
        model = model.to(memory_format=torch.channels_last)
    inputs = tree_map(lambda t: t.contiguous(memory_format=torch.channels_last)
                      if isinstance(t, torch.Tensor) and t.dim() == 4 else t, inputs)
    return model, inputs


__all__ = ["load_model_file", "load_model_module", "to_channels_last", "to_device", "to_dtype"]


def ready_to_check(model, example, name: str, device: str, dtype: str | None, channels_last: bool = False):
    """(model, inputs) on `device`, cast to `dtype`, channels-last if asked, in eval mode, after one
    eager run that must succeed (else a usage error): what bench, bisect and minify compare the
    compiled model with."""
    import torch

    model, example = to_device(model, example, device)
    if dtype is not None:
        model, example = to_dtype(model, example, dtype)
    if channels_last:
        model, example = to_channels_last(model, example)
    if isinstance(model, torch.nn.Module):
        model = model.eval()
    try:
        with torch.no_grad():
            model(*example)
    except Exception as exc:
        fail(f"running {name} eagerly on its example inputs failed: {one_line(exc)}")
    return model, example
