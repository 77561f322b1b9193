"""CompileProfile: exclusive parts inside a window, counts, and nothing recorded outside it."""

import threading
import time

import pytest

from pipec_ir import CompileOptions, CompileProfile, LoadContext, RecompileBudget
from pipec_ir.profile import PARTS


def test_parts_are_exclusive_and_sum_to_the_window():
    profile = CompileProfile()
    with profile.measure():
        with profile.part("aot_autograd"):
            time.sleep(0.02)
            with profile.part("codegen"):
                time.sleep(0.03)
            with profile.part("aot_autograd"):  # the same part nested: its time once
                time.sleep(0.01)
        time.sleep(0.01)  # in no part: `other`
    parts = profile.parts()
    assert parts["codegen"] == pytest.approx(0.03, abs=0.02)
    assert parts["aot_autograd"] == pytest.approx(0.03, abs=0.02)  # 0.02 + 0.01, without codegen's 0.03
    assert profile.inclusive["aot_autograd"] == pytest.approx(0.06, abs=0.03)  # from entering to leaving
    assert parts["other"] >= 0.005
    assert sum(parts.values()) == pytest.approx(profile.wall, rel=1e-9)
    assert list(parts)[:len(PARTS)] == list(PARTS) and list(parts)[-1] == "other"


def test_nothing_is_recorded_outside_a_window():
    profile = CompileProfile()
    with profile.part("codegen"):
        profile.count("kernels")
    assert profile.to_dict() == {} and not profile.seconds and not profile.counts

    with profile.measure():
        profile.count("kernels", 2)
        profile.distinct("unique_kernels", "body-a")
        profile.distinct("unique_kernels", "body-a")
        profile.distinct("unique_kernels", "body-b")
        profile.add("dynamo", 0.0)  # nothing
    data = profile.to_dict()
    assert data["counts"]["kernels"] == 2 and data["counts"]["unique_kernels"] == 2
    assert set(data) == {"wall_s", "seconds", "counts"}


def test_another_thread_records_only_while_the_window_waits_for_it():
    """A GPU's backward runs in the autograd engine's thread while the window's thread waits in
    `backward()`: that thread's parts are the window's time. Parts of a thread running beside a
    part of the window's own thread are not (they would be counted twice)."""
    profile = CompileProfile()

    def compile_elsewhere(part):
        with profile.part(part):
            with profile.part("codegen"):
                time.sleep(0.02)
            profile.count("graphs")

    with profile.measure():
        worker = threading.Thread(target=compile_elsewhere, args=("fusion",))
        worker.start()
        worker.join()  # waits outside any part: the worker's time is the window's
        with profile.part("first_run"):
            worker = threading.Thread(target=compile_elsewhere, args=("capture",))
            worker.start()
            worker.join()  # inside a part of its own: that part has the time already
    data = profile.to_dict()
    seconds = data["seconds"]
    assert seconds["codegen"] >= 0.02 and seconds["fusion"] > 0 and seconds["capture"] == 0.0
    assert seconds["first_run"] >= 0.02
    assert data["counts"]["graphs"] == 2  # counts from any thread
    assert sum(seconds.values()) == pytest.approx(data["wall_s"])


def test_nested_windows_measure_once():
    profile = CompileProfile()
    with profile.measure(), profile.measure():
        time.sleep(0.01)
    assert profile.windows == 1 and profile.wall >= 0.01


def test_live_state_travels_in_the_load_context_and_options_keys_can_exclude_names():
    """The profile and the budget are a loaded model's live state (LoadContext), not options;
    a runtime's load-time options can be left out of a key by name."""
    profile, budget = CompileProfile(), RecompileBudget(2)
    context = LoadContext(budget=budget, profile=profile)
    assert context.budget is budget and context.profile is profile
    assert context.memo("m", dict) is context.memo("m", dict) is not LoadContext().memo("m", dict)
    plain = CompileOptions()
    assert plain.with_extra(bucket="exact").key(exclude={"bucket"}) == plain.key()
    assert plain.with_extra(bucket="exact").key() != plain.key()
    assert plain.with_extra(a=1, b=2).without("a") == plain.with_extra(b=2)


def test_load_with_passes_the_context_only_to_a_load_that_takes_it():
    from pipec_ir import load_with

    context = LoadContext()

    class Old:  # written before LoadContext
        def load(self, program, options):
            return ("old", program, options)

    class New:
        def load(self, program, options, context=None):
            return ("new", context)

    class Wrapper:
        def __init__(self, inner):
            self.inner = inner

        def load(self, program, options, **more):
            return load_with(self.inner, program, options, more.get("context"))

    assert load_with(Old(), "p", "o", context) == ("old", "p", "o")
    assert load_with(New(), "p", "o", context) == ("new", context)
    assert load_with(New(), "p", "o") == ("new", None)
    assert load_with(Wrapper(Old()), "p", "o", context) == ("old", "p", "o")
    assert load_with(Wrapper(New()), "p", "o", context) == ("new", context)
