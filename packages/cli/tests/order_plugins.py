"""Plugins for the registration-order tests: each records its calls in CALLS and registers
fusion 'probe' (so the one registered last is the one kept)."""

import pipec_ir

CALLS: list[str] = []


class Probe:
    def __init__(self, label: str):
        self.label = label

    def fuse(self, graph, options):
        raise NotImplementedError("never run")


def _plugin(label: str, **marks):
    class Plugin:
        @pipec_ir.hookimpl(**marks)
        def pipec_register(self, registry):
            CALLS.append(f"register {label}")
            registry.add_fusion("probe", Probe(label))

        @pipec_ir.hookimpl(**marks)
        def pipec_configure(self, registry):
            CALLS.append(f"configure {label}")

    return Plugin()


builtin = _plugin("builtin")
alpha = _plugin("alpha")
zeta = _plugin("zeta")
first = _plugin("first", tryfirst=True)
last = _plugin("last", trylast=True)


class Recursing:
    """Asks for the registry from inside its registration hook."""

    @pipec_ir.hookimpl
    def pipec_register(self, registry):
        import pipec

        pipec.get_registry()


class Observer:
    @pipec_ir.hookimpl
    def pipec_stage_finished(self, stage, name, document, seconds):
        pass


class WrapperHook:
    @pipec_ir.hookimpl(hookwrapper=True)
    def pipec_register(self, registry):
        yield


class BadConfigure:
    """Wraps the runtime, then fails: the wrapping must be undone."""

    @pipec_ir.hookimpl
    def pipec_configure(self, registry):
        registry.wrap("runtime", "launch", lambda inner: inner.__class__())
        raise RuntimeError("configure broke")


recursing, observer, wrapper_hook, bad_configure = Recursing(), Observer(), WrapperHook(), BadConfigure()
