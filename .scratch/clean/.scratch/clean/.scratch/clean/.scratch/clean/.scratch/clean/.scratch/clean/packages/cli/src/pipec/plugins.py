"""The plugin manager: pluggy project "pipec", plugins from entry-point group `pipec`.

Every stage implementation, built-in or third-party, arrives the same way: an
entry point in group `pipec` names a module (or object) holding `pipec_register`
and/or `pipec_stage_finished` hook implementations.

- A plugin whose import (or registration) raises is named in one warning and skipped.
- `PIPEC_DISABLE_PLUGINS=a,b` blocks plugins by name; `PIPEC_LOAD_PLUGINS=a,b`
  loads only those (an allow-list). A name matches an entry-point name, or a
  distribution (blocking/allowing all its entry points): its full name
  ("pipec-example-plugin") or its short name without the `pipec-` prefix and
  `-plugin` suffix ("example"; the built-ins' short names are their entry-point names).
- The plugin manager and the registry are built once per process;
  `reset_plugins()` forgets them (tests, or after installing a plugin).
"""

from __future__ import annotations

import importlib.metadata
import os
import warnings
from dataclasses import dataclass

import pluggy
import pipec_ir
from pipec_ir import hookspecs

from .errors import PipecPluginWarning

GROUP = "pipec"
DISABLE_ENV = "PIPEC_DISABLE_PLUGINS"
ALLOW_ENV = "PIPEC_LOAD_PLUGINS"


@dataclass(frozen=True)
class PluginInfo:
    name: str  # entry-point name
    distribution: str
    version: str
    status: str  # "loaded" | "failed" | "disabled" | "not allowed"
    error: str | None = None


@dataclass
class _State:
    manager: pluggy.PluginManager
    plugins: list[PluginInfo]
    registry: pipec_ir.Registry | None = None


_STATE: _State | None = None


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
    seen: set[str] = set()
    for ep in _entry_points():
        dist, version = _dist_of(ep)
        if ep.name in seen:  # the same distribution found twice on sys.path
            continue
        seen.add(ep.name)
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
    return _State(manager, infos)


def build_registry(manager: pluggy.PluginManager,
                   origins: dict[str, tuple[str, str]] | None = None) -> pipec_ir.Registry:
    """Call every plugin's `pipec_register` into one Registry.

    Plugins are called one by one (in registration order) so a plugin whose
    registration raises is named and skipped without losing the others' stages.
    `origins` maps a plugin (entry-point) name to its (distribution, version):
    a stage is credited to the distribution whose entry point registered it,
    even when its class comes from another package (a plugin's fusion policy
    built with pipec_fusion.fusion_from_heuristics is the plugin's, not pipec-fusion's).
    """
    origins = origins or {}
    registry = pipec_ir.Registry()
    impls = list(manager.hook.pipec_register.get_hookimpls())
    for impl in impls:
        name = impl.plugin_name
        before = {(e.stage, e.name): e for e in registry.entries()}
        try:
            impl.function(registry=registry)
        except Exception as exc:
            _warn(f"pipec: plugin {name!r} failed to register: {_one_line(exc)}; skipped")
            continue
        for e in registry.entries():
            old = before.get((e.stage, e.name))
            if old is not None and old.impl is e.impl:
                continue
            if old is not None:
                _warn(f"pipec: plugin {name!r} replaces {e.stage} {e.name!r} "
                      f"(from {old.distribution} {old.version})")
            _credit(registry, e, origins.get(name))
    return registry


def _credit(registry: pipec_ir.Registry, entry: pipec_ir.Entry, origin: tuple[str, str] | None) -> None:
    """Record the registering plugin's distribution on `entry` (the Registry guesses from the class)."""
    if origin is None or origin[0] == "unknown":
        return
    if (entry.distribution, entry.version) != origin:
        registry.credit(entry.stage, entry.name, *origin)


def _state() -> _State:
    global _STATE
    if _STATE is None:
        _STATE = load_plugins(_name_list(os.environ.get(DISABLE_ENV)), _name_list(os.environ.get(ALLOW_ENV)))
    return _STATE


def get_plugin_manager() -> pluggy.PluginManager:
    return _state().manager


def get_registry() -> pipec_ir.Registry:
    state = _state()
    if state.registry is None:
        origins = {p.name: (p.distribution, p.version) for p in state.plugins if p.status == "loaded"}
        state.registry = build_registry(state.manager, origins)
    return state.registry


def plugin_infos() -> list[PluginInfo]:
    """Every entry point seen, with whether it loaded."""
    return list(_state().plugins)


def register_plugin(plugin: object, name: str | None = None) -> None:
    """Register a plugin object in this process (no entry point needed) and rebuild the registry."""
    state = _state()
    state.manager.register(plugin, name=name)
    state.registry = None


def unregister_plugin(plugin: object) -> None:
    state = _state()
    state.manager.unregister(plugin)
    state.registry = None


def reset_plugins() -> None:
    """Forget the cached plugin manager and registry; the next use reloads entry points."""
    global _STATE
    _STATE = None


# short names
registry = get_registry
manager = get_plugin_manager
reset = reset_plugins
