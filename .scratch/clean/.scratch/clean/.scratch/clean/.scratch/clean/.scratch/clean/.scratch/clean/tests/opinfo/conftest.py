"""Print the OpInfo sweep's summary line (counts by Core ATen overload and by op_db entry)."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_terminal_summary(terminalreporter):
    import opinfo_harness as h

    results = []
    for reports in terminalreporter.stats.values():
        for report in reports:
            for key, value in getattr(report, "user_properties", ()):
                if key == "opinfo" and getattr(report, "when", "call") == "call":
                    results.append(_entry(h, json.loads(value)))
    if not results:
        return
    overloads = h.overload_statuses(results)
    line = h.summary_line(collections.Counter(r.status for r in results), collections.Counter(overloads.values()),
                          "float32", "cpu")
    terminalreporter.write_line(line)


def _entry(h, d):
    samples = [h.SampleResult(s["status"], tuple(s["overloads"]), tuple(tuple(e) for e in s["externs"]))
               for s in d["samples"]]
    return h.EntryResult(d["name"], d["status"], (), samples)
