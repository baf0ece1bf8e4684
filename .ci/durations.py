"""Each test file's time in one CI run, from the junit reports .ci/run writes, as a Markdown table
(docs/measurements.md keeps one before and after each change to CI's time):

    python .ci/durations.py NEW.xml [NEW.xml ...] [--before OLD.xml ...]

Times are pytest's per test (setup, call and teardown), summed per file; a file's tests run side
by side under pytest-xdist count each at its own time, so the sum of a run that used two workers
is more than its wall time. Files are listed slowest first, then the tests' count and total.
"""
from __future__ import annotations

import argparse
import collections
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def per_file(reports: list[Path]) -> tuple[dict[str, float], dict[str, int]]:
    seconds: dict[str, float] = collections.defaultdict(float)
    tests: dict[str, int] = collections.defaultdict(int)
    for report in reports:
        try:
            root = ET.parse(report).getroot()
        except (OSError, ET.ParseError) as exc:
            raise SystemExit(f"durations: cannot read the junit report {report}: {exc}") from None
        for case in root.iter("testcase"):
            name = case.get("file") or case.get("classname", "?")
            seconds[name] += float(case.get("time") or 0.0)
            tests[name] += 1
    return seconds, tests


def table(after: list[Path], before: list[Path]) -> str:
    new, new_n = per_file(after)
    old, old_n = per_file(before) if before else ({}, {})
    files = sorted(set(new) | set(old), key=lambda f: -max(new.get(f, 0.0), old.get(f, 0.0)))
    if before:
        rows = ["| test file | before: tests | before: s | after: tests | after: s |", "| --- | --- | --- | --- | --- |"]
        rows += [f"| {f} | {old_n.get(f, 0)} | {old.get(f, 0.0):.1f} | {new_n.get(f, 0)} | {new.get(f, 0.0):.1f} |"
                 for f in files]
        rows.append(f"| **all** | {sum(old_n.values())} | {sum(old.values()):.0f} | {sum(new_n.values())} | "
                    f"{sum(new.values()):.0f} |")
    else:
        rows = ["| test file | tests | s |", "| --- | --- | --- |"]
        rows += [f"| {f} | {new_n[f]} | {new[f]:.1f} |" for f in files]
        rows.append(f"| **all** | {sum(new_n.values())} | {sum(new.values()):.0f} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("after", type=Path, nargs="+", help="junit reports of the run to show")
    p.add_argument("--before", type=Path, nargs="+", default=[], help="junit reports of the run to compare with")
    args = p.parse_args(argv)
    sys.stdout.write(table(args.after, args.before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
