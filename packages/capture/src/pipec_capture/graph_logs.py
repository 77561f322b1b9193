"""AOTAutograd's graph printouts, made only when someone reads them.

AOTAutograd prints the joint, forward and backward graphs of every training compile as Python
source (`print_readable`, strides and devices included), whether or not a log or a trace will
read them, and keeps the text in its cache entry. Nothing in `aot_module_simplified` turns that
off (its `AOTConfig.enable_log` is always on). The printouts cost 0.28 s of a cold 4-layer BERT
step under cProfile on this 2-core CPU (docs/performance.md, "Session 25"), and more with depth.

`graph_logs_when_read()` makes them only when `TORCH_LOGS` asks for `aot_graphs` or
`aot_joint_graph`, or a structured trace (`TORCH_TRACE`, tlparse) is being written; then torch's
functions run as they are. An entry stored without them has no graph text, so a later cache hit
with logging on logs no graph "from cache"; the graphs are what pipec's `explain` shows anyway.
Where torch's layout differs (another version), nothing changes.
"""

from __future__ import annotations

import contextlib
import logging
import os


def _graph_compile():
    try:
        from torch._functorch._aot_autograd import graph_compile
    except ImportError:
        return None
    names = ("_log_joint_graph", "_log_fw_bw_graphs", "aot_joint_log", "aot_graphs_log")
    return graph_compile if all(hasattr(graph_compile, n) for n in names) else None


def _tracing() -> bool:
    """Whether a structured trace is being written. torch always installs its trace handler, and
    it writes nothing without a directory (TORCH_TRACE, or `set_logs`'s) outside Meta's cluster;
    other handlers on the trace log (pytest's capture) are not a trace."""
    from torch._logging._internal import trace_log

    return bool(os.environ.get("TORCH_TRACE") or os.environ.get("MAST_HPC_JOB_NAME")) or \
        any(getattr(handler, "root_dir", None) is not None for handler in trace_log.handlers)


def _read(module) -> bool:
    """Whether a log or a structured trace would read the graphs' text."""
    return _tracing() or module.aot_joint_log.isEnabledFor(logging.INFO) \
        or module.aot_graphs_log.isEnabledFor(logging.INFO)


@contextlib.contextmanager
def graph_logs_when_read():
    module = _graph_compile()
    if module is None or _read(module):
        yield
        return
    joint, fw_bw = module._log_joint_graph, module._log_fw_bw_graphs
    module._log_joint_graph = lambda *args, **kwargs: None
    module._log_fw_bw_graphs = lambda *args, **kwargs: (None, None)
    try:
        yield
    finally:
        module._log_joint_graph, module._log_fw_bw_graphs = joint, fw_bw
