"""`PIPEC_LOGS`: what each stage decided, printed as it happens (Inductor's `TORCH_LOGS` artifacts).

    PIPEC_LOGS=output_code,fusion,tuning,graph_breaks,recompiles,aot_cache   (or "all")

Each name is a logger (`pipec.<name>`) the code that decides writes to at INFO; this module,
run by the front end (`configure_logs`, from `make_backend`: every pipec.compile, explain,
torch.compile(backend="pipec") and CLI compile goes through it), turns the requested ones on
with a handler that prints to stderr. Only this module reads the variable; stages just log.

The same names under `TORCH_LOGS` (or torch._logging.set_logs) turn them on too, through
torch's own artifact registry, where four of them are torch's (Dynamo's and Inductor's)
names already: output_code, fusion, graph_breaks, recompiles. `tuning` is not a torch name,
and torch parses TORCH_LOGS while `import torch` runs, before pipec could register one (an
unknown name fails that import), so under TORCH_LOGS it is torch's `autotuning`.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

ENV = "PIPEC_LOGS"

ARTIFACTS = {
    "output_code": "each graph's Program after codegen: its steps and every kernel's Triton source",
    "fusion": "each graph's kernels and the ops each holds, every fusion made (kind, score) and every "
              "fusion rejected, with its reason",
    "tuning": "the launch config autotuning picked for each kernel and size bucket (with every config's "
              "time), and each GEMM choice group's timings",
    "graph_breaks": "each graph break, with Dynamo's reason and the user's source line",
    "recompiles": "each recompile of a frame, and what the recompile budget was charged for",
    "aot_cache": "what AOTAutograd's cache did with each graph: a hit, a miss, the entry stored, or the "
                 "graph passed over and torch's reason",
}

# the TORCH_LOGS name that turns each on (torch's artifact registry)
TORCH_NAMES = {"output_code": "output_code", "fusion": "fusion", "tuning": "autotuning",
               "graph_breaks": "graph_breaks", "recompiles": "recompiles"}


def logger(name: str) -> logging.Logger:
    """The logger of the artifact `name` (`pipec.fusion`...)."""
    return logging.getLogger(f"pipec.{name}")


class _Stderr(logging.StreamHandler):
    """Writes to the sys.stderr of the moment (pytest's capture, a redirected stream)."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("[%(name)s] %(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def parse(text: str | None) -> tuple[set[str], list[str]]:
    """(artifact names, unknown names) of a PIPEC_LOGS value: comma separated, "all" for every one;
    a leading "+" (TORCH_LOGS's "more") is accepted and means the same."""
    names, unknown = set(), []
    for part in (text or "").split(","):
        part = part.strip().lstrip("+")
        if not part:
            continue
        if part == "all":
            names |= set(ARTIFACTS)
        elif part in ARTIFACTS:
            names.add(part)
        else:
            unknown.append(part)
    return names, unknown


def torch_enabled() -> set[str]:
    """The artifacts whose TORCH_NAMES torch's logging state has on (TORCH_LOGS, set_logs); empty
    where torch's private registry is not what this expects (checked on torch 2.11 and 2.13)."""
    try:
        from torch._logging import _internal

        state = _internal.log_state
        return {name for name, torch_name in TORCH_NAMES.items() if state.is_artifact_enabled(torch_name)}
    except Exception:  # noqa: BLE001 - a torch without this registry: PIPEC_LOGS still works
        return set()


_handler = _Stderr()
_applied: tuple | None = None  # (PIPEC_LOGS value, names turned on): what the last call did


def configure_logs(env=None) -> set[str]:
    """Turn on the artifacts PIPEC_LOGS (in `env`, default os.environ) and torch's logging state
    ask for, and off those no longer asked for; the names on. Cheap when nothing changed. An
    unknown name is warned about once, never an error: a typo in a variable must not stop a run."""
    global _applied
    env = os.environ if env is None else env
    text = env.get(ENV, "")
    names, unknown = parse(text)
    names |= torch_enabled()
    if _applied is not None and _applied == (text, frozenset(names)):
        return names
    if unknown and (_applied is None or _applied[0] != text):
        warnings.warn(f"pipec: {ENV}: unknown name(s) {', '.join(unknown)} (known: all, {', '.join(ARTIFACTS)})",
                      stacklevel=2)
    _applied = (text, frozenset(names))
    for name in ARTIFACTS:
        log = logger(name)
        if name in names:
            log.setLevel(logging.INFO)
            if _handler not in log.handlers:
                log.addHandler(_handler)
            log.propagate = False  # printed once, by the handler above, whatever the root logger does
        elif _handler in log.handlers:  # on before, not asked for now
            log.removeHandler(_handler)
            log.setLevel(logging.NOTSET)
            log.propagate = True
    return names


# ---------------------------------------------------------------- what the front end logs itself

def stage_logged(stage: str) -> bool:
    """Whether `log_stage` would read the document of `stage`."""
    name = {"fusion": "fusion", "codegen": "output_code"}.get(stage)
    return name is not None and logger(name).isEnabledFor(logging.INFO)


def log_stage(stage: str, graph: str, document, units: list[dict] | None = None) -> None:
    """After a stage ran on `graph`: the fusion stage's decisions (read off the KernelPlan, where
    fusion records every one of them; `units`: pipeline.plan_units of it) and codegen's output
    code. Called where `stage_logged(stage)` (the pipeline asks first: the plan's units are read
    only for a fusion log)."""
    if stage == "fusion":
        logger("fusion").info("%s", describe_plan(graph, document, units or []))
    elif stage == "codegen":
        from pipec_ir.text import format_program

        logger("output_code").info("Output code of graph %s:\n%s", graph, format_program(document))


def describe_plan(graph: str, plan, units: list[dict]) -> str:
    """The fusion log of one KernelPlan: each kernel with its compute ops (`units`), each merge,
    each rejection."""
    lines = [f"graph {graph}: {len(plan.kernels)} kernels (policy {plan.policy})"]
    for unit in units:
        lines.append(f"  kernel {unit['name']} ({unit['kind']}): {', '.join(unit['ops']) or '-'}")
    for f in plan.fusions:
        lines.append(f"  fused ({f.kind}, score {f.score:g}) into {f.kernel}: {_nodes(f.first)} + {_nodes(f.second)}")
    for r in plan.rejected:
        lines.append(f"  not fused: {r.first} + {r.second}: {r.reason}")
    return "\n".join(lines)


def _nodes(names, shown: int = 4) -> str:
    """A group's nodes, the first few of a large one: a merge late in a big kernel names dozens."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" (+{more} more)" if more > 0 else "")


__all__ = ["ARTIFACTS", "ENV", "TORCH_NAMES", "configure_logs", "describe_plan", "log_stage", "logger", "parse"]
