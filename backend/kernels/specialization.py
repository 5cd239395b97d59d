"""How Triton's JIT would bind a launch on a GPU target: the specialisation key that picks (or
compiles) a variant, and the signature, constexprs and attributes a compile of it takes.

Computed without a GPU and without compiling, so tests can check that arguments which change every
step never produce a new variant, and the AOT check can compile exactly what a launch would run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .launch import Launch


@dataclass(frozen=True)
class Bound:
    """A launch as the JIT sees it on one target."""

    key: tuple[Any, ...]  # equal keys share one compiled variant
    signature: dict[str, str]
    constexprs: dict[Any, Any]
    attrs: dict[Any, Any]
    options: dict[str, Any]


def as_jit(kernel: Any) -> Any:
    """The kernel's JITFunction (under TRITON_INTERPRET=1 @triton.jit yields an InterpretedFunction,
    which keeps the decorator's arguments: rebuild the JITFunction from them)."""
    from triton.runtime.jit import JITFunction

    if isinstance(kernel, JITFunction):
        return kernel
    return JITFunction(kernel.fn, **kernel.kwargs)


def bind(launch: Launch, target: Any) -> Bound:
    """Bind the launch's arguments as JITFunction.run does on `target` (a triton GPUTarget)."""
    from triton import knobs
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    fn = as_jit(launch.kernel)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = dict(launch.kwargs, debug=False, instrumentation_mode=knobs.compilation.instrumentation_mode)
    bound_args, specialization, options = binder(*launch.args, **kwargs)
    packed = fn._pack_args(backend, kwargs, bound_args, specialization, options)
    options_obj, signature, constexprs, attrs = packed
    key = (tuple(tuple(s) if isinstance(s, list) else s for s in specialization), str(options_obj))
    return Bound(key, signature, constexprs, attrs, options_obj.__dict__)


def jit_kernels() -> dict[str, Any]:
    """Every Triton kernel the model launches, by name."""
    from . import triton_decode_attention as dec
    from . import triton_elementwise as elem
    from . import triton_prefill_attention as pre

    return {
        "prefill_attention": pre.prefill_attention_kernel,
        "decode_attention": dec.decode_attention_kernel,
        "combine_splits": dec.combine_splits_kernel,
        "store_kv": elem.store_kv_kernel,
        "rms_norm": elem.rms_norm_kernel,
        "rotary": elem.rotary_kernel,
        "silu_and_mul": elem.silu_and_mul_kernel,
    }


def compiled_variants() -> dict[str, int]:
    """Variants each kernel has compiled in this process (0 under the interpreter, which compiles
    nothing): the count that must not grow once a run is warm."""
    out = {}
    for name, kernel in jit_kernels().items():
        caches = getattr(kernel, "device_caches", {})
        out[name] = sum(len(entry[0]) for entry in caches.values())
    return out
