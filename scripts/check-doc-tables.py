#!/usr/bin/env python3
"""Fails when a Markdown table in the repository's tracked .md files is malformed.

A table is a run of lines starting with '|' outside fenced code blocks. Every row must have as
many cells as its header, and the second line must be the delimiter row (|---|...). Pipes inside
inline code spans and escaped pipes (\\|) are not cell borders. Benchmark tables are edited by
scripts and by hand, and a row with a stray cell renders as a wrong table (benchmarks.md's AMD
table carried another run's column for a day). Standard library only.
"""
import re
import subprocess
import sys

CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)*?\1")
DELIMITER_CELL = re.compile(r"^\s*:?-{3,}:?\s*$")


def cells(line):
    text = CODE_SPAN.sub("x", line.strip()).replace("\\|", "x")
    return text.strip("|").split("|")


def check(path):
    problems = []
    in_fence = False
    header = None  # (line number, cell count) of the current table's header
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                in_fence = not in_fence
                header = None
                continue
            if in_fence or not line.startswith("|"):
                header = None
                continue
            row = cells(line)
            if header is None:
                header = (number, len(row))
                continue
            if number == header[0] + 1 and not all(DELIMITER_CELL.match(c) for c in row):
                problems.append(f"{path}:{number}: the line after a table's header is not its "
                                "delimiter row (|---|...)")
            if len(row) != header[1]:
                problems.append(f"{path}:{number}: {len(row)} cells, the header (line "
                                f"{header[0]}) has {header[1]}")
    return problems


def main():
    files = subprocess.run(["git", "ls-files", "*.md"], capture_output=True, text=True,
                           check=True).stdout.split()
    problems = [p for path in files for p in check(path)]
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    print(f"check-doc-tables: {len(files)} files, every table well formed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
