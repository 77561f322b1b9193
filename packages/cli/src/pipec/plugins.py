"""The plugin manager: pluggy project "pipec", plugins from entry-point group `pipec`.

Every stage implementation, built-in or third-party, arrives the same way: an
entry point in group `pipec` names a module (or object) holding `pipec_register`,
`pipec_configure` and/or `pipec_stage_finished` hook implementations (pipec_ir.hookspecs).

- Order (deterministic, whatever `sys.path` says): entry points of the built-in
  distributions (`BUILTIN_DISTRIBUTIONS`) first, then the others sorted by distribution
  name and entry-point name, then plugins registered in-process (`register_plugin`) in
  the order they came. Every `pipec_register` runs in that order (hooks marked
  `tryfirst` before all, `trylast` after all), then every `pipec_configure` in the same
  order. A name registered twice keeps the later implementation, with a warning.
- A plugin whose import, registration or configuration raises is named in one warning
  and skipped: what that hook had changed is undone and it is unregistered (its later hooks,
  observers included, do not run; the stages a failed `pipec_configure`'s own
  `pipec_register` added stay); `plugin_infos()` and `pipec plugins` list it with the error.
- `PIPEC_DISABLE_PLUGINS=a,b` blocks plugins by name; `PIPEC_LOAD_PLUGINS=a,b`
  loads only those (an allow-list). A name matches an entry-point name, or a
  distribution (blocking/allowing all its entry points): its full name
  ("pipec-example-plugin") or its short name without the `pipec-` prefix and
  `-plugin` suffix ("example"; the built-ins' short names are their entry-point names).
- The plugin manager and the registry are built once per process;
  `reset_plugins()` forgets them (tests, or after installing a plugin). A hook that
  calls `get_registry()` while the registry is being built gets a `PipecPluginError`
  (the hook's `registry` argument is the registry).
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
import warnings
from dataclasses import dataclass, field, replace

import pluggy
import pipec_ir
from pipec_ir import hookspecs

from .errors import PipecPluginError, PipecPluginWarning

GROUP = "pipec"
DISABLE_ENV = "PIPEC_DISABLE_PLUGINS"
ALLOW_ENV = "PIPEC_LOAD_PLUGINS"
# The distributions whose entry points are pipec's own stages: they register before any other.
BUILTIN_DISTRIBUTIONS = frozenset({"pipec", "pipec-ir", "pipec-capture", "pipec-fusion", "pipec-codegen-triton",
                                   "pipec-runtime-cudagraph"})
REGISTRATION_HOOKS = ("pipec_register", "pipec_configure")


@dataclass(frozen=True)
class PluginInfo:
    """One plugin as `pipec plugins` lists it.

    `status`: "loaded"; "failed" (its import raised); "failed to register" / "failed to
    configure" (that hook raised; `error` says what); "disabled" (PIPEC_DISABLE_PLUGINS);
    "not allowed" (PIPEC_LOAD_PLUGINS). `hooks`: the pipec hooks it implements; `stages`:
    what it registered ("fusion cautious"); `wraps`: what it wrapped ("runtime launch").
    """

    name: str  # entry-point name (or the name given to register_plugin)
    distribution: str
    version: str
    status: str
    error: str | None = None
    hooks: tuple[str, ...] = ()
    stages: tuple[str, ...] = ()
    wraps: tuple[str, ...] = ()

    @property
    def role(self) -> str:
        """What it does, in words: "stages", "wraps", "stages, wraps", "observer" or "nothing"."""
        parts = [word for word, has in (("stages", self.stages), ("wraps", self.wraps)) if has]
        if not parts and "pipec_stage_finished" in self.hooks:
            return "observer"
        return ", ".join(parts) or "nothing"


@dataclass
class _State:
    manager: pluggy.PluginManager
    plugins: list[PluginInfo]  # entry points, in load order
    registry: pipec_ir.Registry | None = None
    building: bool = False
    in_process: list[str] = field(default_factory=list)  # register_plugin names, in order
    # what the last registry build found, per plugin name: stages, wraps, failures
    outcomes: dict[str, PluginInfo] = field(default_factory=dict)
    in_process_objects: dict[str, object] = field(default_factory=dict)
    hooks: dict[str, tuple[str, ...]] = field(default_factory=dict)  # per plugin name, taken at load


_STATE: _State | None = None
_LOCK = threading.RLock()  # one registry build at a time; a hook re-entering is caught by `building`


def _name_list(value: str | None) -> set[str] | None:
    if value is None:
        return None
    return {n.strip() for n in value.split(",") if n.strip()}


def _dist_of(ep) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown", "0"
    name = dist.metadata["Name"] if dist.metadata is not None else None
    return name or getattr(dist, "name", "unknown"), dist.version or "0"


def _normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def names_of(ep_name: str, dist: str) -> set[str]:
    """The names PIPEC_DISABLE_PLUGINS / PIPEC_LOAD_PLUGINS can use for an entry point."""
    names = {_normalize(ep_name)}
    if dist != "unknown":
        d = _normalize(dist)
        short = d.removeprefix("pipec-").removesuffix("-plugin")
        names |= {d, short}
    return names


def _entry_points() -> list:
    return list(importlib.metadata.entry_points(group=GROUP))


def load_order(eps: list) -> list:
    """`eps` in the order plugins load and register: built-in distributions first, then by
    (distribution, entry-point name); entry points that are the same (one distribution
    found twice on sys.path) once, the first found."""
    def key(ep):
        dist = _dist_of(ep)[0]
        return (_normalize(dist) not in BUILTIN_DISTRIBUTIONS, _normalize(dist), ep.name)

    seen, ordered = set(), []
    for ep in sorted(eps, key=key):  # stable: of two copies, the one earlier on sys.path wins
        ident = (ep.name, ep.value, _dist_of(ep)[0])
        if ident not in seen:
            seen.add(ident)
            ordered.append(ep)
    return ordered


def _warn(message: str) -> None:
    warnings.warn(message, PipecPluginWarning, stacklevel=3)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def load_plugins(disabled: set[str] | None = None, allowed: set[str] | None = None) -> _State:
    """Build a fresh plugin manager from the installed entry points (no caching)."""
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    infos: list[PluginInfo] = []
    for ep in load_order(_entry_points()):
        dist, version = _dist_of(ep)
        names = names_of(ep.name, dist)
        if disabled and names & {_normalize(n) for n in disabled}:
            infos.append(PluginInfo(ep.name, dist, version, "disabled"))
            continue
        if allowed is not None and not names & {_normalize(n) for n in allowed}:
            infos.append(PluginInfo(ep.name, dist, version, "not allowed"))
            continue
        try:
            plugin = ep.load()
            manager.register(plugin, name=ep.name)
        except Exception as exc:  # a broken plugin never breaks pipec
            _warn(f"pipec: plugin {ep.name!r} (dist {dist}) failed to load: {_one_line(exc)}; skipped")
            infos.append(PluginInfo(ep.name, dist, version, "failed", _one_line(exc)))
            continue
        infos.append(PluginInfo(ep.name, dist, version, "loaded"))
    hooks = {name: _hooks_of(manager, plugin) for name, plugin in manager.list_name_plugin() if plugin is not None}
    return _State(manager, infos, hooks=hooks)


def hook_order(manager: pluggy.PluginManager, hook: str) -> list:
    """The implementations of `hook` in the order pipec calls registration hooks: `tryfirst`
    ones, then the others, then `trylast` ones; within each, in plugin registration order
    (built-ins, then third-party plugins by distribution, then in-process ones)."""
    rank = {name: i for i, (name, _) in enumerate(manager.list_name_plugin())}

    def key(impl):
        tier = 0 if impl.tryfirst else 2 if impl.trylast else 1
        return tier, rank.get(impl.plugin_name, len(rank))

    return sorted(getattr(manager.hook, hook).get_hookimpls(), key=key)


def build_registry(manager: pluggy.PluginManager,
                   origins: dict[str, tuple[str, str]] | None = None,
                   outcomes: dict[str, PluginInfo] | None = None) -> pipec_ir.Registry:
    """Call every plugin's `pipec_register`, then every `pipec_configure`, into one Registry.

    Hooks run one by one in `hook_order`, so a plugin whose hook raises is named,
    its changes undone, and it is unregistered from `manager`, without losing the
    others' stages. `origins` maps a plugin (entry-point) name to its (distribution,
    version): a stage is credited to the distribution whose entry point registered it,
    even when its class comes from another package (a plugin's fusion policy
    built with pipec_fusion.fusion_from_heuristics is the plugin's, not pipec-fusion's).
    `outcomes`, when given, receives per plugin name a PluginInfo with what it
    registered and wrapped, or why it failed (distribution and version left blank).
    """
    origins = origins or {}
    outcomes = {} if outcomes is None else outcomes
    registry = pipec_ir.Registry()
    failed: set[str] = set()
    for hook in REGISTRATION_HOOKS:
        for impl in hook_order(manager, hook):
            if impl.plugin_name not in failed and not _run_hook(hook, impl, registry, origins, outcomes):
                failed.add(impl.plugin_name)
    for name in failed:
        plugin = manager.get_plugin(name)
        if plugin is not None:
            manager.unregister(plugin)  # skipped: its observers do not run either
    return registry


def _run_hook(hook: str, impl, registry: pipec_ir.Registry, origins: dict, outcomes: dict) -> bool:
    """Call one plugin's registration hook; False (warned, recorded, undone) when it raised."""
    name = impl.plugin_name
    info = outcomes.get(name) or PluginInfo(name, "", "", "loaded")
    verb = "register" if hook == "pipec_register" else "configure"
    before = registry.snapshot()
    registry.current_plugin = name
    try:
        if impl.hookwrapper or getattr(impl, "wrapper", False):
            raise PipecPluginError(f"{hook} cannot be a hook wrapper; wrap a stage with registry.wrap(...) "
                                   "in pipec_configure")
        impl.function(**{arg: registry for arg in impl.argnames})
    except Exception as exc:  # a broken plugin never breaks pipec
        registry.restore(before)
        _warn(f"pipec: plugin {name!r} failed to {verb}: {_one_line(exc)}; skipped")
        outcomes[name] = replace(info, status=f"failed to {verb}", error=_one_line(exc), stages=(), wraps=())
        return False
    finally:
        registry.current_plugin = None
    stages, wraps = list(info.stages), list(info.wraps)
    for e in registry.entries():
        old = before.get((e.stage, e.name))
        if old is not None and old.impl is e.impl:
            continue
        if old is not None and e.wrapped_by[:len(old.wrapped_by)] == old.wrapped_by and \
                len(e.wrapped_by) > len(old.wrapped_by):
            wraps.append(f"{e.stage} {e.name}")  # registry.wrap: same entry, one more layer
            continue
        if old is not None:
            _warn(f"pipec: plugin {name!r} replaces {e.stage} {e.name!r} "
                  f"(from {old.distribution} {old.version})")
        stages.append(f"{e.stage} {e.name}")
        _credit(registry, e, origins.get(name))
    outcomes[name] = replace(info, stages=tuple(stages), wraps=tuple(wraps))
    return True


def _credit(registry: pipec_ir.Registry, entry: pipec_ir.Entry, origin: tuple[str, str] | None) -> None:
    """Record the registering plugin's distribution on `entry` (the Registry guesses from the class)."""
    if origin is None or origin[0] == "unknown":
        return
    if (entry.distribution, entry.version) != origin:
        registry.credit(entry.stage, entry.name, *origin)


def _state() -> _State:
    global _STATE
    with _LOCK:
        if _STATE is None:
            _STATE = load_plugins(_name_list(os.environ.get(DISABLE_ENV)), _name_list(os.environ.get(ALLOW_ENV)))
        return _STATE


def get_plugin_manager() -> pluggy.PluginManager:
    """The process's pluggy PluginManager (project "pipec"), loading the entry points on first use."""
    return _state().manager


def get_registry() -> pipec_ir.Registry:
    """The process's Registry of stage implementations, built on first use (see the module docstring).

    Raises PipecPluginError when called from a plugin's `pipec_register` or `pipec_configure`
    (the registry is being built; the hook's `registry` argument is the one to use).
    """
    with _LOCK:
        state = _state()
        if state.building:
            raise PipecPluginError(
                "pipec.get_registry() was called while the registry is being built (from a pipec_register "
                "or pipec_configure hook): use the hook's `registry` argument; to wrap or look up another "
                "plugin's stage, do it in pipec_configure(registry), which runs after every registration")
        if state.registry is None:
            origins = {p.name: (p.distribution, p.version) for p in state.plugins if p.status == "loaded"}
            outcomes = {n: i for n, i in state.outcomes.items() if i.status.startswith("failed to")}
            state.building = True
            try:
                state.registry = build_registry(state.manager, origins, outcomes)
            finally:
                state.building = False
            state.outcomes = outcomes
        return state.registry


def plugin_infos() -> list[PluginInfo]:
    """Every plugin seen, entry points (in load order) then in-process ones, with its status,
    its hooks, and what it registered or wrapped (builds the registry if needed)."""
    get_registry()
    state = _state()
    infos = list(state.plugins) + [PluginInfo(n, *pipec_ir.registry.distribution_of(_module_of(state, n)), "loaded")
                                   for n in state.in_process]
    out = []
    for info in infos:
        outcome = state.outcomes.get(info.name)
        if info.status == "loaded" and outcome is not None:
            info = replace(info, status=outcome.status, error=outcome.error, stages=outcome.stages,
                           wraps=outcome.wraps)
        out.append(replace(info, hooks=state.hooks.get(info.name, ())))
    return out


def _module_of(state: _State, name: str) -> str:
    plugin = state.manager.get_plugin(name) or state.in_process_objects.get(name)
    return getattr(plugin, "__module__", None) or getattr(plugin, "__name__", "") or ""


def register_plugin(plugin: object, name: str | None = None) -> None:
    """Register a plugin object in this process (no entry point needed) and rebuild the registry.

    It comes after every entry-point plugin in the registration order."""
    with _LOCK:
        state = _state()
        name = state.manager.register(plugin, name=name)
        state.in_process.append(name)
        state.in_process_objects[name] = plugin
        state.hooks[name] = _hooks_of(state.manager, plugin)
        state.outcomes.pop(name, None)
        state.registry = None


def unregister_plugin(plugin: object) -> None:
    """Remove a plugin `register_plugin` added (or one that failed and was skipped); rebuild the registry."""
    with _LOCK:
        state = _state()
        if state.manager.is_registered(plugin):
            state.manager.unregister(plugin)
        for name, obj in list(state.in_process_objects.items()):
            if obj is plugin:
                del state.in_process_objects[name]
                state.in_process.remove(name)
                state.outcomes.pop(name, None)
                state.hooks.pop(name, None)
        state.registry = None


def _hooks_of(manager: pluggy.PluginManager, plugin: object) -> tuple[str, ...]:
    return tuple(sorted(h.name for h in manager.get_hookcallers(plugin) or ()))


def reset_plugins() -> None:
    """Forget the cached plugin manager and registry; the next use reloads entry points."""
    global _STATE
    with _LOCK:
        _STATE = None


# short names
registry = get_registry
manager = get_plugin_manager
reset = reset_plugins
