"""`pipec plugins`: the registered stage implementations and the plugins (pipec.plugins)."""

from __future__ import annotations

import json

from rich.table import Table

from ..render import stdout
from .arguments import JsonOpt


def plugins_cmd(json_out: JsonOpt = False) -> None:
    """List every registered stage implementation with its distribution and version, then every plugin:
    what it registers, wraps or observes, and those skipped (failed to load, register or configure)."""
    from ..plugins import get_registry, plugin_infos

    entries = get_registry().entries()
    infos = plugin_infos()
    skipped = [p for p in infos if p.status != "loaded"]
    if json_out:
        print(json.dumps({
            "stages": [{"stage": e.stage, "name": e.name, "distribution": e.distribution, "version": e.version}
                       for e in entries],
            "skipped": [{"plugin": p.name, "distribution": p.distribution, "status": p.status, "error": p.error}
                        for p in skipped],
            "plugins": [{"plugin": p.name, "distribution": p.distribution, "version": p.version, "status": p.status,
                         "error": p.error, "role": p.role, "hooks": list(p.hooks), "stages": list(p.stages),
                         "wraps": list(p.wraps)} for p in infos],
        }, indent=2))
        return
    table = Table("stage", "name", "distribution", "version", title="pipec stages", title_justify="left")
    for e in entries:
        wrapped = f" (wrapped by {', '.join(e.wrapped_by)})" if e.wrapped_by else ""
        table.add_row(e.stage, e.name + wrapped, e.distribution, e.version)
    stdout.print(table)
    table = Table("plugin", "distribution", "version", "status", "does", title="pipec plugins", title_justify="left")
    for p in infos:
        does = "; ".join(filter(None, [", ".join(p.stages), ", ".join(f"wraps {w}" for w in p.wraps)]))
        does = does or ("observer" if p.role == "observer" else "-")
        table.add_row(p.name, p.distribution, p.version, p.status, does)
    stdout.print(table)
    for p in skipped:
        why = f": {p.error}" if p.error else ""
        stdout.print(f"skipped plugin {p.name!r} ({p.distribution} {p.version}): {p.status}{why}", markup=False)
