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

  - daemon CPU, "0.002 CPU-s/GB", "0.27 CPU-s a step";

Each figure must name where it comes from: its paragraph (or list item, or table row) links
the section of docs/PERFORMANCE.md that measured it (`[...](docs/PERFORMANCE.md#anchor)`),
and the figure must appear in that section (the heading down to the next heading of the same
or a higher level; with several links, in one of them). So a figure cannot be kept from an
older run once the README cites the newer one, and a reader finds the command behind it.
Ratios and percentages are looked for with their unit (spaces before "%" do not matter), the
other numbers as whole numbers (PERFORMANCE's tables give seconds and MB/s in columns
without the unit). Exit 0 when all are found; otherwise 1, listing each figure with its
README line and what is wrong.

Usage: tools/check-figures.py [README] [PERFORMANCE]   (from anywhere)
       tools/check-figures.py --self-test              the check on made-up files
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

NUM = r"\d+(?:[.,]\d+)*"
# A figure: a number or a range of two, then a unit that makes it a measurement.
FIGURE = re.compile(
    rf"(?<![\w.])(?P<num>{NUM}(?:\s*[-–]\s*{NUM})?)\s*"
    r"(?P<unit>x(?!\w)|%|MB/s|GB/s|(?:CPU[-\s]+)?s/GB|CPU-s(?![\w/])|s(?![\w/]))"
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


CITE = re.compile(r"\]\((?:\.?/?docs/)?PERFORMANCE\.md#(?P<anchor>[\w-]+)\)")


def anchor_of(heading: str) -> str:
    """GitHub's anchor for a heading (tools/check-links.py has the same rule)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def sections(perf: str) -> dict:
    """Anchor -> the text of that section: its heading down to the next heading of the
    same or a higher level (subsections included)."""
    lines = perf.splitlines()
    heads = []
    fenced = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"^(#{1,6})\s+(.*?)\s*$", line)
        if m:
            heads.append((i, len(m.group(1)), m.group(2)))
    out, seen = {}, {}
    for k, (i, level, title) in enumerate(heads):
        end = next((j for j, lv, _ in heads[k + 1 :] if lv <= level), len(lines))
        a = anchor_of(title)
        n = seen.get(a, 0)
        seen[a] = n + 1
        out[a if n == 0 else f"{a}-{n}"] = "\n".join(lines[i:end])
    return out


def blocks(text: str):
    """The README's prose in blocks that each cite on their own: paragraphs, list items and
    table rows, as (first line number, [(line number, line), ...])."""
    cur = []
    for n, line in prose(text):
        starts = re.match(r"^\s*(?:[-*] |\d+\. |\||#)", line)
        if not line.strip() or starts:
            if cur:
                yield cur
            cur = []
        if line.strip():
            cur.append((n, line))
    if cur:
        yield cur


def raw_lines(text: str) -> dict:
    return dict(enumerate(text.splitlines(), 1))


def check(readme_text: str, perf: str):
    """(figures checked, problems as (line, figure, what is wrong, line text))."""
    secs = sections(perf)
    raw = raw_lines(readme_text)
    problems = []
    checked = 0
    for block in blocks(readme_text):
        # Links are read from the raw lines: prose() blanks `code`, never a link target.
        cited = [m.group("anchor") for n, _ in block for m in CITE.finditer(raw[n])]
        for a in cited:
            if a not in secs:
                problems.append((block[0][0], "#" + a, "docs/PERFORMANCE.md has no such section", ""))
        texts = [secs[a] for a in cited if a in secs]
        for n, line in block:
            for m in figures(re.sub(r"\]\([^)]*\)", "]", line)):
                checked += 1
                fig = m.group(0).strip()
                if not cited:
                    problems.append(
                        (n, fig, "names no source: link the docs/PERFORMANCE.md section", line)
                    )
                elif not any(found(m.group("num"), m.group("unit"), t) for t in texts):
                    where = ", ".join("#" + a for a in cited)
                    problems.append((n, fig, f"is not in the section it cites ({where})", line))
    return checked, problems


def self_test() -> int:
    perf = (
        "# Performance\n\n## Old run\n\n| a | 0.79x | 1.70 s |\n\n"
        "## New run (session 19)\n\n| b | 0.88x | 0.80x | 1114 MB/s | 0.002 |\n\n"
        "### Detail\n\n35.6 % -> 8.3 %\n"
    )
    readme = (
        "# R\n\nNew: 0.88x and 0.80x, 1114 MB/s at 0.002 CPU-s/GB, 35.6 %\n"
        "([here](docs/PERFORMANCE.md#new-run-session-19)).\n\n"
        "Old figure cited as new: 0.79x ([here](docs/PERFORMANCE.md#new-run-session-19)).\n\n"
        "- No source: 0.88x.\n"
        "- Wrong anchor: 0.88x ([x](docs/PERFORMANCE.md#newest)).\n\n"
        "`0.5x in code` is a setting, and so is every 5 s.\n"
    )
    checked, got = check(readme, perf)
    want = [
        (6, "0.79x", "is not in the section"),
        (8, "0.88x", "names no source"),
        (9, "#newest", "no such section"),
        (9, "0.88x", "is not in the section"),
    ]
    ok = checked == 8 and len(got) == len(want) and all(
        any(g[0] == n and g[1] == f and w in g[2] for g in got) for n, f, w in want
    )
    if not ok:
        print(f"check-figures self-test FAILED: {checked} figures checked (8 expected)")
        for g in got:
            print(f"  got: line {g[0]}: {g[1]!r} {g[2]}")
        return 1
    print(f"check-figures self-test: {len(want)} problems found in {checked} figures, as expected")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    readme = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "README.md"
    perf_path = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "docs/PERFORMANCE.md"
    perf = perf_path.read_text(encoding="utf-8")
    checked, problems = check(readme.read_text(encoding="utf-8"), perf)
    if problems:
        print(f"{readme}: {len(problems)} figure(s) without their source in {perf_path}:")
        for n, fig, what, line in problems:
            print(f"  line {n}: {fig!r} {what}" + (f": {line.strip()}" if line else ""))
        print(
            "Quote figures from the newest docs/PERFORMANCE.md section that measured them and "
            "link it in the same paragraph (or add the measurement there, with its command); "
            "'Nx' is the time relative to the nvme tier alone."
        )
        return 1
    print(f"{readme.name}: all {checked} figures appear in the {perf_path.name} sections cited")
    return 0


if __name__ == "__main__":
    sys.exit(main())
