#!/usr/bin/env python3
"""Every measured figure README.md quotes must appear in docs/PERFORMANCE.md.

README.md is for users and keeps only a few figures; docs/PERFORMANCE.md holds every
measurement with the command that made it. When the two drift apart (a figure from an old
run, a ratio written the other way round), the README is wrong. This check finds, in the
README's running text and tables (code blocks and `inline code` are left out: they hold
commands and config values), every number that looks like a measurement:

  - a ratio, "0.74x";
  - a percentage, "35.6 %" or "26%";
  - seconds with a decimal point, "1.70 s";
  - a rate, "1215 MB/s", "0.02 CPU s/GB" ("0.4 s per GB" counts as seconds);
  - a range of such, "4.3-4.8x";

and looks for each in docs/PERFORMANCE.md: ratios and percentages with their unit (spaces
before "%" do not matter), the other numbers as whole numbers (PERFORMANCE's tables give
seconds and MB/s in columns without the unit). Exit 0 when all are found; otherwise 1,
listing each missing figure with its README line.

Usage: tools/check-figures.py [README] [PERFORMANCE]   (from anywhere)
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

NUM = r"\d+(?:[.,]\d+)*"
# A figure: a number or a range of two, then a unit that makes it a measurement.
FIGURE = re.compile(
    rf"(?<![\w.])(?P<num>{NUM}(?:\s*[-–]\s*{NUM})?)\s*"
    r"(?P<unit>x(?!\w)|%|MB/s|GB/s|(?:CPU\s+)?s/GB|s(?![\w/]))"
)


def figures(line: str):
    """The measurement-like figures of one line of prose."""
    for m in FIGURE.finditer(line):
        # Seconds only with a decimal point: "1.70 s" is a measurement, "every 5 s" a setting.
        if m.group("unit") == "s" and "." not in m.group("num"):
            continue
        yield m


def prose(text: str):
    """(line number, line) of the text outside fenced code, with inline code removed."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            continue
        yield n, re.sub(r"`[^`]*`", " ", line)


def numbers(s: str):
    return re.findall(NUM, s)


def found(num: str, unit: str, perf: str) -> bool:
    unit = unit.strip()
    if unit in ("x", "%"):
        # The whole figure with its unit, as written (a range too), allowing a space
        # before % and either dash in a range.
        parts = [re.escape(p) for p in numbers(num)]
        body = r"\s*[-–]\s*".join(parts)
        pat = rf"(?<![\w.]){body}\s*{re.escape(unit)}"
        if re.search(pat, perf):
            return True
        # A range's ends may stand apart in PERFORMANCE (a table's min and max).
        if len(parts) > 1:
            return all(
                re.search(rf"(?<![\w.]){p}\s*{re.escape(unit)}", perf) for p in parts
            )
        return False
    return all(re.search(rf"(?<![\w.]){re.escape(p)}(?![\d])", perf) for p in numbers(num))


def main() -> int:
    readme = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "README.md"
    perf_path = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "docs/PERFORMANCE.md"
    perf = perf_path.read_text(encoding="utf-8")
    missing = []
    checked = 0
    for n, line in prose(readme.read_text(encoding="utf-8")):
        for m in figures(line):
            checked += 1
            if not found(m.group("num"), m.group("unit"), perf):
                missing.append((n, m.group(0).strip(), line.strip()))
    if missing:
        print(f"{readme}: {len(missing)} figure(s) not in {perf_path}:")
        for n, fig, line in missing:
            print(f"  line {n}: {fig!r} in: {line}")
        print(
            "Quote figures from docs/PERFORMANCE.md (or add the measurement there, with its "
            "command); 'Nx' is the time relative to the nvme tier alone."
        )
        return 1
    print(f"{readme.name}: all {checked} figures appear in {perf_path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
