"""``TunedScript``: what constructing an autotuned Script without its tuned arguments returns."""

from __future__ import annotations

from warpspec.cuda.plan import MISS
from warpspec.errors import ArgumentError, CompileError, WarpspecError
from warpspec.runtime import get_backend, mode, shape_only


class TunedScript:
    """All schedules of an autotuned Script. Calling it runs the kernel with a chosen schedule: on the emulator
    the first schedule that compiles for these arguments; on the GPU the tuner's pick."""

    def __init__(self, cls, args: tuple, kwargs: dict, space):
        self.cls, self.args, self.kwargs, self.space = cls, args, kwargs, space
        self._instances: dict = {}
        self.last_report = None  # the tuner's report of the last GPU call that tuned (warpspec.tune.tuner)

    def schedules(self) -> list[dict]:
        """Every schedule (tuned parameter values), in decorator order."""
        return self.space.schedules()

    def instantiate(self, schedule: dict):
        """The Script pinned to ``schedule``."""
        key = tuple(sorted(schedule.items()))
        if key not in self._instances:
            self._instances[key] = self.cls(*self.args, **self.kwargs, **schedule)
        return self._instances[key]

    def constructible(self) -> list[tuple[dict, object]]:
        """(schedule, pinned Script) for every schedule the constructor accepts with the other arguments (a kernel
        may take some of its tiles only at some sizes, e.g. ``Attention``'s three consumer warpgroups); the first
        refusal, an ArgumentError, when it accepts none."""
        pairs, refusals = [], []
        for schedule in self.schedules():
            try:
                pairs.append((schedule, self.instantiate(schedule)))
            except ArgumentError as error:
                refusals.append(error)
        if not pairs:
            raise refusals[0]
        return pairs

    def first_valid(self, args: tuple, kwargs: dict):
        """The first schedule whose kernel builds for these call arguments, as a pinned Script."""
        from warpspec.frontend.kernel import bind_arguments
        from warpspec.runtime import kernel_for

        errors = []
        for schedule, script in self.constructible():
            _, compile_time = bind_arguments(self.cls, args, kwargs)
            try:
                kernel_for(script, compile_time)
                return script
            except CompileError as error:
                errors.append(f"{schedule}: {error}")
        raise CompileError(f"no schedule of {self.cls.__name__} compiles for these arguments:\n" + "\n".join(errors))

    def __call__(self, *args, **kwargs):
        # A call like a recent GPU call goes straight to its winner's launch through the guard tuned_call made
        # for it, without the general path's binding and lookups.
        if not kwargs and mode() != "emulator":
            for guard in self.__dict__.get("_warpspec_guards", ()):
                if guard(args) is not MISS:
                    return None
        try:
            if get_backend() == "emulator":
                if shape_only((*args, *kwargs.values())):
                    return None  # fake or meta tensors (torch.compile tracing): nothing to run
                return self.first_valid(args, kwargs)(*args, **kwargs)
            return _tuned_call()(self, args, kwargs)
        except WarpspecError as error:  # the caller's frames and the message's file:line, as a Script call reports
            raise error.with_traceback(None) from None


def _tuned_call():
    """``warpspec.tune.tuner.tuned_call``, imported at the first GPU call (the tuner loads the CUDA compiler),
    then kept: an import statement per call would cost more than finding the winner."""
    global _tuned_call_function
    if _tuned_call_function is None:
        from warpspec.tune.tuner import tuned_call

        _tuned_call_function = tuned_call
    return _tuned_call_function


_tuned_call_function = None
