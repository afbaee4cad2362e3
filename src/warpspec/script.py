"""The classes kernel authors subclass (``Script``, ``Class``) and the ``autotune`` decorator.

A ``Script`` subclass is a kernel: ``__init__`` stores its compile-time schedule on ``self``, ``__call__`` is the
kernel body, written in the language and compiled from its source (never executed as Python). Calling an instance
builds the IR for its compile-time arguments once, then runs it on the selected back end.
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass

from warpspec.errors import CompileError, WarpspecError


@dataclass(frozen=True)
class TuneSpace:
    """The schedules of an autotuned Script: stacked ``@autotune`` decorators multiply into their product."""

    axes: tuple[tuple[tuple[str, ...], tuple], ...]  # ((names, candidate values), ...), outermost decorator first

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for names, _ in self.axes for name in names)

    def schedules(self) -> list[dict]:
        """Every schedule, as ``{name: value}``, in a stable order."""
        per_axis = []
        for names, candidates in self.axes:
            options = []
            for candidate in candidates:
                values = tuple(candidate) if len(names) > 1 else (candidate,)
                if len(values) != len(names):
                    raise CompileError(f"autotune({', '.join(names)!r}): candidate {candidate!r} has {len(values)} "
                                       f"values, expected {len(names)}")
                options.append(dict(zip(names, values)))
            per_axis.append(options)
        return [dict(kv for part in combo for kv in part.items()) for combo in itertools.product(*per_axis)]


def autotune(names: str, candidates) -> callable:
    """Declare tuned constructor parameters: ``@autotune("block_m, block_n", [[128, 64], [128, 128]])``.

    ``names`` is one name or a comma-separated list; ``candidates`` one value per schedule (a sequence of values
    when several names are given). Stacked decorators form the cartesian product. Constructing the Script without
    these arguments leaves the choice to the tuner; passing them pins one schedule.
    """
    parsed = tuple(n.strip() for n in names.split(",") if n.strip())
    if not parsed:
        raise CompileError(f"autotune: no parameter names in {names!r}")
    candidates = tuple(candidates)
    if not candidates:
        raise CompileError(f"autotune({names!r}): no candidate values")

    def decorate(cls):
        if not (isinstance(cls, type) and issubclass(cls, Script)):
            raise CompileError(f"autotune({names!r}) decorates a Script subclass, got {cls!r}")
        inherited = cls.__dict__.get("_tune_space")
        axes = ((parsed, candidates),) + (inherited.axes if inherited else ())
        duplicate = set(parsed) & {n for names_, _ in (inherited.axes if inherited else ()) for n in names_}
        if duplicate:
            raise CompileError(f"autotune: parameter {sorted(duplicate)[0]!r} is tuned twice")
        cls._tune_space = TuneSpace(axes)
        return cls

    return decorate


class _ScriptMeta(type):
    """Constructing an autotuned Script without its tuned arguments yields a tuner over all its schedules."""

    def __call__(cls, *args, **kwargs):
        space = cls.__dict__.get("_tune_space")
        if space is not None:
            bound = inspect.signature(cls.__init__).bind_partial(None, *args, **kwargs)
            given = set(bound.arguments) - {"self"}
            missing = [n for n in space.names if n not in given]
            if missing:
                if len(missing) != len(space.names):
                    raise CompileError(f"{cls.__name__}: pass all tuned parameters {list(space.names)} to pin a "
                                       f"schedule, or none to autotune; missing {missing}")
                from warpspec.tune.tuned import TunedScript

                return TunedScript(cls, args, kwargs, space)
        return super().__call__(*args, **kwargs)


class Script(metaclass=_ScriptMeta):
    """Base class of kernels. Subclasses define ``__init__`` (compile-time schedule) and ``__call__`` (the kernel).

    Inside ``__call__`` and helper methods ``self`` gives the language: ``self.attrs``, ``self.blockIdx``, tensors
    (``global_view``, ``shared_tensor``, ``register_tensor``), roles (``thread_group``, ``single_thread``),
    ``self.mbarrier``, ``self.tma``, ``self.wgmma`` and the rest listed in docs/language.md.
    """

    __warpspec_base__ = True  # the front end inlines methods of subclasses, never this class's own

    def __init__(self):
        pass

    def kernel_name(self) -> str:
        """The name of the built kernel (the CUDA function's, what profilers show): the class name. A class whose
        constructor takes the element types overrides it so that each instance's kernel says which it runs."""
        return type(self).__name__

    def schedule(self) -> dict:
        """This instance's tuned parameter values (empty for a Script without ``@autotune``)."""
        space = type(self).__dict__.get("_tune_space")
        return {name: getattr(self, name) for name in space.names} if space else {}

    def __init_subclass__(cls, **kwargs):
        # Python looks __call__ up on the type, and a subclass's __call__ is its kernel body, never run as Python:
        # keep the body as __kernel__ for the front end and make calling an instance launch the kernel.
        super().__init_subclass__(**kwargs)
        body = cls.__dict__.get("__call__")
        if body is not None:
            cls.__kernel__ = body
            cls.__call__ = _launch


def _launch(self: Script, *args, **kwargs):
    """Compile the kernel for these arguments (once per compile-time specialisation) and run it on the selected
    back end; see ``warpspec.runtime.run_script``."""
    from warpspec.runtime import run_script

    try:
        return run_script(self, args, kwargs)
    except WarpspecError as error:
        # The message names the kernel's file:line and the caller's frames name the call; the front end's and the
        # back end's own frames (hundreds for a deep inlining) would only bury both. Other exceptions are
        # warpspec's bugs, or Ctrl-C, and keep their whole traceback.
        raise error.with_traceback(None) from None


class Class:
    """Base of reusable language classes (e.g. ``warpspec.Pipeline``): instantiated inside a kernel, their
    ``__init__`` and methods are inlined; ``self`` gives the same language as in a Script, and attributes may hold
    compile-time values, tensors, barriers or runtime scalars (``self.stage: int32 = 0``)."""

    __warpspec_class__ = True  # the front end instantiates subclasses inside kernels by inlining
