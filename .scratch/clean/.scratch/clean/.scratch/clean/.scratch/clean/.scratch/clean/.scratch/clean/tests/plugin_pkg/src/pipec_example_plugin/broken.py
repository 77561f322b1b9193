"""A deliberately broken plugin: importing it fails (pipec must warn once and skip it)."""

raise ImportError("pipec_example_plugin.broken is broken on purpose (needs a missing dependency)")
