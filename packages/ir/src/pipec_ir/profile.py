"""Where a compilation's time goes: `CompileProfile`, one recorder handed to every stage.

A profile is *open* while a window measures (`measure()`: pipec.explain and `pipec bench`
open one around a model's first call). Inside it, code times its work with `part(name)`;
parts are exclusive: a part timed inside another is taken out of the outer one (codegen's
time is not also AOTAutograd's, though AOTAutograd calls the pipeline), so the parts add
up to at most the window's wall time and `other` is the rest, shown, never hidden. Outside
a window every call is a no-op, so stages may record unconditionally, and a compile
after the first call (a recompile, a new size bucket) does not disturb the first call's sums.

The pipeline times the compile stages itself; the runtime gets the recorder in its
`LoadContext` (`profile`), never in the cache-keyed options. A part's time must be part of the
window's wall time: the thread that opened the window records, and another thread records only
while that thread is in no part of its own, one such thread at a time. That other thread is
the autograd engine's on a GPU: a training step's backward graph is compiled there, during the
first `loss.backward()`, while the window's thread waits for it (BERT base's backward compile
was 10-20 s of "other" before). Counts are kept from any thread while the window is open.

Parts written by pipec (README, "Compile-time profile"): imports, dynamo, aot_autograd,
device_checks, capture, fusion, codegen, runtime_load, triton_compile, autotune, first_run.
Counts: graphs, kernels, unique_kernels, triton_compiles, kernels_timed, configs_tried,
choice_groups_timed, alternatives_timed, configs_from_table, choices_from_table (decisions the
runtime's shipped tuning table made without timing).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

PARTS = ("imports", "dynamo", "aot_autograd", "device_checks", "capture", "fusion", "codegen", "runtime_load",
         "triton_compile", "autotune", "first_run")
COUNTS = ("graphs", "kernels", "unique_kernels", "triton_compiles", "kernels_timed", "configs_tried",
          "choice_groups_timed", "alternatives_timed", "configs_from_table", "choices_from_table")


class CompileProfile:
    """Exclusive seconds per part and counts, recorded while a window is open (module docstring)."""

    def __init__(self) -> None:
        self.wall = 0.0  # seconds measured by windows, in all
        self.windows = 0  # windows measured
        self.seconds: dict[str, float] = {}  # part -> exclusive seconds
        self.inclusive: dict[str, float] = {}  # part -> seconds from entering to leaving its outermost use
        self.counts: dict[str, int] = {}
        self._seen: dict[str, set] = {}  # count name -> keys counted (`distinct`)
        self._stacks: dict[int, list[list]] = {}  # thread -> [part, running since] entered and not left
        self._owner: int | None = None  # the thread whose window is open
        self._guest: int | None = None  # the other thread recording parts now (module docstring)
        self._lock = threading.Lock()

    @property
    def _stack(self) -> list[list]:
        return self._stacks.setdefault(threading.get_ident(), [])

    @property
    def recording(self) -> bool:
        """A window is open and the calling thread may record time in it: the one that opened it,
        or another while that one is in no part and no third thread records (module docstring)."""
        me = threading.get_ident()
        if me == self._owner:
            return True
        with self._lock:
            return self._guest_may(me)

    def _guest_may(self, me: int) -> bool:
        """May thread `me`, not the window's, record now? (The caller holds the lock.)"""
        return self._owner is not None and self._guest in (None, me) and not self._stacks.get(self._owner)

    @contextlib.contextmanager
    def measure(self) -> Iterator[CompileProfile]:
        """Open the window for the block (nested windows add nothing: the outermost measures)."""
        if self._owner is not None:
            yield self
            return
        self._owner = threading.get_ident()
        start = time.perf_counter()
        try:
            yield self
        finally:
            self.wall += time.perf_counter() - start
            self.windows += 1
            self._stacks.clear()
            self._owner = self._guest = None

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Time the block as `name`, minus the parts timed inside it."""
        me = threading.get_ident()
        if me == self._owner:
            yield from self._timed(name)
            return
        with self._lock:  # another thread holds the guest's place until its outermost part ends
            allowed = self._guest_may(me)
            if allowed:
                self._guest = me
        if not allowed:
            yield
            return
        try:
            yield from self._timed(name)
        finally:
            if not self._stack:
                self._guest = None

    def _timed(self, name: str) -> Iterator[None]:
        now = time.perf_counter()
        outer = self._stack[-1] if self._stack else None
        if outer is not None:  # the outer part pauses
            self.seconds[outer[0]] = self.seconds.get(outer[0], 0.0) + now - outer[1]
        outermost = all(entry[0] != name for entry in self._stack)
        entry = [name, now]
        self._stack.append(entry)
        try:
            yield
        finally:
            end = time.perf_counter()
            self.seconds[name] = self.seconds.get(name, 0.0) + end - entry[1]
            if outermost:
                self.inclusive[name] = self.inclusive.get(name, 0.0) + end - now
            if self._stack and self._stack[-1] is entry:
                self._stack.pop()
            if self._stack:  # the outer part resumes
                self._stack[-1][1] = end

    def add(self, name: str, seconds: float) -> None:
        """Seconds of `name` measured some other way (Dynamo's own timer), while the window is open."""
        if self.recording and seconds > 0:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def count(self, name: str, n: int = 1) -> None:
        if self._owner is not None:  # from any thread (module docstring)
            with self._lock:
                self.counts[name] = self.counts.get(name, 0) + n

    def distinct(self, name: str, key) -> None:
        """Count `key` under `name` once (e.g. kernel bodies: identical layers are one)."""
        if self._owner is not None:
            with self._lock:
                seen = self._seen.setdefault(name, set())
                if key in seen:
                    return
                seen.add(key)
            self.count(name)

    def parts(self) -> dict[str, float]:
        """Seconds per part, every pipec part present (0.0 when nothing ran), then `other`:
        the window's wall time that no part claimed (never below 0)."""
        out = {p: self.seconds.get(p, 0.0) for p in PARTS}
        out.update((p, s) for p, s in self.seconds.items() if p not in out)  # a plugin's own parts
        out["other"] = max(0.0, self.wall - sum(out.values()))
        return out

    def to_dict(self) -> dict:
        """{"wall_s", "seconds": {part: s, ..., "other": s}, "counts": {name: n}} (empty when nothing
        was measured)."""
        if not self.windows:
            return {}
        counts = {c: self.counts.get(c, 0) for c in COUNTS}
        counts.update((c, n) for c, n in self.counts.items() if c not in counts)
        return {"wall_s": self.wall, "seconds": self.parts(), "counts": counts}

    def __repr__(self) -> str:  # stable: CompileOptions.key() reprs option values
        return "CompileProfile()"


__all__ = ["COUNTS", "PARTS", "CompileProfile"]
