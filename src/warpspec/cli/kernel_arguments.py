"""A kernel's arguments and schedules as the command line gives them: ``NAME=VALUE`` scalars checked against the
kernel's parameters, and ``--schedule K=V,...`` (or every schedule) as pinned Script instances."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import warpspec
from warpspec.cli.failures import UsageError
from warpspec.ir.evaluate import wrap


def scalar_arguments(class_name: str, params, texts: list[str], runtime_required: bool = True) -> dict:
    """The NAME=VALUE arguments by name, checked against the kernel's scalar parameters. Every scalar parameter
    without a default must be given, runtime ones only when ``runtime_required`` (running needs them, building
    does not)."""
    values = {}
    for text in texts:
        name, separator, value = text.partition("=")
        if not separator or not name:
            raise UsageError(f"expected NAME=VALUE, got {text!r}")
        values[name] = _parse_value(name, value)
    by_name = {p.name: p for p in params}
    pointers = [p.name for p in params if p.pointer]
    scalars = [p.name for p in params if not p.pointer]
    for name in values:
        if name in pointers:
            raise UsageError(f"{name} is a pointer parameter: it takes no value (warpspec check fills it with "
                             f"random values)")
        if name not in by_name:
            raise UsageError(f"{class_name} has no parameter {name!r}; its scalar parameters: "
                             f"{', '.join(scalars) or 'none'}")
        _check_runtime_scalar(by_name[name], values[name])
    # warpspec.frontend.kernel.Parameter marks "no default" with the ast module as its sentinel.
    missing = [n for n in scalars if n not in values and by_name[n].default is ast
               and (runtime_required or not by_name[n].runtime)]
    if missing:
        raise UsageError(f"missing kernel argument(s) {', '.join(missing)}: give each as NAME=VALUE, e.g. "
                         f"{' '.join(f'{n}=...' for n in missing)}")
    return values


def selected_scripts(script_cls, schedule_text: str | None) -> list[tuple[str, object]]:
    """(label, pinned Script instance) for each schedule that may be checked, in the Script's schedule order: the
    one pinned by ``schedule_text`` (``K=V,...``) if given, else all of them."""
    from warpspec.tune.tuned import TunedScript

    space = script_cls.__dict__.get("_tune_space")
    _check_constructible(script_cls, () if space is None else space.names)
    try:
        instance = script_cls()
    except TypeError as error:
        raise UsageError(f"{script_cls.__name__}() cannot be constructed without arguments: {error}") from None
    if not isinstance(instance, TunedScript):
        if schedule_text is not None:
            raise UsageError(f"{script_cls.__name__} is not autotuned; --schedule needs an @autotune kernel")
        return [(_schedule_label(instance.schedule()) or script_cls.__name__, instance)]
    names = instance.space.names
    schedules = instance.schedules()
    if schedule_text is None:
        return [(_schedule_label(s), script) for s, script in instance.constructible()]
    texts = {}
    for item in schedule_text.split(","):
        name, separator, value = item.partition("=")
        if not separator or not name.strip():
            raise UsageError(f"--schedule takes K=V,... pairs, got {item!r}")
        texts[name.strip()] = value
    unknown = [n for n in texts if n not in names]
    missing = [n for n in names if n not in texts]
    if unknown or missing:
        problems = ([f"unknown: {', '.join(unknown)}"] if unknown else []) + \
                   ([f"missing: {', '.join(missing)}"] if missing else [])
        raise UsageError(f"--schedule must set exactly the tuned parameters {', '.join(names)} "
                         f"({'; '.join(problems)})")
    ordered = {n: _schedule_value(n, texts[n], [s[n] for s in schedules]) for n in names}
    return [(_schedule_label(ordered), instance.instantiate(ordered))]


def _check_constructible(script_cls, tuned) -> None:
    """UsageError naming the constructor arguments of ``script_cls`` the command line cannot give: those without a
    default beyond its ``tuned`` parameters (which each schedule sets)."""
    try:
        signature = inspect.signature(script_cls.__init__)
    except (TypeError, ValueError):  # a constructor Python cannot describe: constructing it will tell
        return
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
             inspect.Parameter.KEYWORD_ONLY)
    needed = [p.name for p in list(signature.parameters.values())[1:]
              if p.kind in kinds and p.default is p.empty and p.name not in tuned]
    if needed:
        package = Path(warpspec.__file__).resolve().parent
        library = Path(inspect.getfile(script_cls)).resolve().is_relative_to(package)
        how = ("it is a library kernel: run it through its warpspec.ops operation (e.g. warpspec.ops.matmul), which "
               "gives them" if library else "define a subclass in the file whose __init__ takes only the tuned "
               "parameters (if any) and passes the others to super().__init__, and give that class")
        raise UsageError(f"{script_cls.__name__} needs constructor argument(s) {', '.join(needed)}, which the command "
                         f"line cannot give: {how}")


def _schedule_value(name: str, text: str, candidates: list):
    """A ``--schedule`` value of tuned parameter ``name``: a word naming one of its string ``candidates``
    (``variant=pingpong``), else what ``_parse_value`` reads (a number or true/false). A parameter whose tuned
    values are all words takes only those."""
    tuned = list(dict.fromkeys(candidates))
    words = [c for c in tuned if isinstance(c, str)]
    text = text.strip()
    if text in words:
        return text
    if words and len(words) == len(tuned):
        raise UsageError(f"{name}={text!r}: expected one of the tuned values {', '.join(words)}")
    return _parse_value(name, text)


def _parse_value(name: str, text: str):
    """An int (decimal or 0x...), a float, or true/false; anything else is a usage error naming ``name``."""
    text = text.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for parse in (lambda t: int(t, 0), float):
        try:
            return parse(text)
        except ValueError:
            continue
    raise UsageError(f"{name}={text!r}: expected an integer, a number or true/false")


def _check_runtime_scalar(param, value) -> None:
    """Reject a value a runtime scalar parameter cannot hold (compile-time ones are checked when binding)."""
    if not param.runtime:
        return
    dtype = param.annotation
    if dtype.kind == "bool":
        fits = isinstance(value, bool)
    elif dtype.is_float:
        fits = not isinstance(value, bool)
    else:
        fits = isinstance(value, int) and not isinstance(value, bool)
        if fits and wrap(value, dtype) != value:  # before it sizes (and allocates) arrays, not at the launch
            raise UsageError(f"{param.name} is a runtime {dtype.name} parameter, got {value}, which does not fit")
    if not fits:
        raise UsageError(f"{param.name} is a runtime {dtype.name} parameter, got {value!r}")


def _schedule_label(schedule: dict) -> str:
    return " ".join(f"{name}={value}" for name, value in schedule.items())
