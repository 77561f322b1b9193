"""Plugin 'watch': wraps the built-in `launch` runtime to record every Program it loads.

It shows how a plugin composes with a stage another distribution registered: the
built-in runtimes may register before or after this plugin's `pipec_register`, so the
wrapping happens in `pipec_configure`, which pipec calls once every plugin has registered.
The wrapper delegates to the runtime it wraps and returns its callable untouched, so
results and per-call cost stay those of `launch`.
"""

import pipec_ir


class WatchedRuntime:
    """A `pipec_ir.Runtime` that records each load, then lets the wrapped runtime do it."""

    def __init__(self, inner):
        self.inner = inner
        # the options the wrapped runtime reads only at load stay out of cache keys (pipeline.py)
        self.load_options = getattr(inner, "load_options", frozenset())
        self.loaded = []  # (program name, number of steps), one per load

    def load(self, program, options, context=None):
        # forward the loaded model's context to the wrapped runtime where its `load` takes one
        run = pipec_ir.load_with(self.inner, program, options, context)
        self.loaded.append((program.name, len(program.steps)))
        return run

    def warm(self, context=None):
        # a wrapper passes on the optional methods too: without this, pipec's own runtime never
        # started its compile workers and Triton's key early wherever this plugin was installed
        warm = getattr(self.inner, "warm", None)
        if warm is not None:
            warm(context)

    def __repr__(self):
        return f"WatchedRuntime({self.inner!r})"


@pipec_ir.hookimpl
def pipec_configure(registry):
    if "launch" in registry.names("runtime"):  # absent when the built-in runtime is disabled
        registry.wrap("runtime", "launch", WatchedRuntime)
