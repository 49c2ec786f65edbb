#!/usr/bin/env python3
"""The tables of docs/results.md, generated from the claims in bench/results/*.json.

Each JSON file holds one topic:

    {"topic": "...", "order": N, "note": "docs/notes/NAME.md",
     "claims": [{"claim": "...", "figure": "...", "command": "...", "commit": "...",
                 "host": "...", "date": "...", "section": "a heading of the note"}]}

Every claim is one row: what is claimed, the figure as measured, the command that measured it,
the commit and host it ran on, the date, and a link to the heading of the note that tells how
it was reached. A commit, host or date the measurement did not record says "not recorded".

usage: bench/results_table.py            rewrite docs/results.md between its markers
       bench/results_table.py --check    exit 1 if docs/results.md differs from the JSON
       bench/results_table.py --check-links
                                         exit 1 if a relative link in README.md or
                                         docs/**/*.md names a missing file or heading
Python standard library only.
"""

import argparse
import glob
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(REPO, "bench", "results")
RESULTS_MD = os.path.join(REPO, "docs", "results.md")
BEGIN = "<!-- results_table.py: generated from bench/results/*.json; edit those, then run it -->"
END = "<!-- results_table.py: end of generated tables -->"
FIELDS = ("claim", "figure", "command", "commit", "host", "date", "section")
NOT_RECORDED = "not recorded"


class Failure(Exception):
    pass


def slug(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`|\*\*|\*", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path):
    """Every heading anchor of a markdown file, numbered as GitHub numbers repeats."""
    seen = {}
    result = set()
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                in_code = not in_code
                continue
            m = None if in_code else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                result.add(base if n == 0 else f"{base}-{n}")
    return result


def headings(path, levels):
    out = []
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                in_code = not in_code
            elif not in_code:
                m = re.match(r"(#+) (.*)", line)
                if m and len(m.group(1)) in levels:
                    out.append(m.group(2).strip())
    return out


def load_topics():
    files = sorted(glob.glob(os.path.join(RESULTS_DIR, "*.json")))
    if not files:
        raise Failure(f"no claims: expected JSON files in {RESULTS_DIR}, found none")
    topics = []
    for path in files:
        rel = os.path.relpath(path, REPO)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise Failure(f"{rel}: not valid JSON: {e}")
        for key in ("topic", "order", "note", "claims"):
            if key not in data:
                raise Failure(f"{rel}: expected a '{key}' field, found only {sorted(data)}")
        note = os.path.join(REPO, data["note"])
        if not os.path.isfile(note):
            raise Failure(f"{rel}: note {data['note']} does not exist")
        note_anchors = anchors(note)
        if not data["claims"]:
            raise Failure(f"{rel}: expected at least one claim, found none")
        for i, claim in enumerate(data["claims"]):
            missing = [k for k in FIELDS if not str(claim.get(k, "")).strip()]
            extra = sorted(set(claim) - set(FIELDS))
            if missing or extra:
                raise Failure(f"{rel}: claim {i + 1} ({claim.get('claim', '?')!r}): "
                              f"missing {missing}, unknown {extra}; expected exactly {list(FIELDS)}")
            commit = claim["commit"]
            if commit != NOT_RECORDED and not re.fullmatch(r"[0-9a-f]{7,40}( \(.*\))?", commit):
                raise Failure(f"{rel}: claim {i + 1}: commit {commit!r} is neither a hash "
                              f"(optionally with a remark in parentheses) nor '{NOT_RECORDED}'")
            if slug(claim["section"]) not in note_anchors:
                raise Failure(f"{rel}: claim {i + 1}: section {claim['section']!r} is no heading "
                              f"of {data['note']}")
        if not isinstance(data["order"], int):
            raise Failure(f"{rel}: 'order' must be an integer, found {data['order']!r}")
        topics.append((os.path.basename(path), data))
    orders = [d["order"] for _, d in topics]
    if len(set(orders)) != len(orders):
        raise Failure(f"two topics share an order: {sorted(orders)}")
    return sorted(topics, key=lambda t: t[1]["order"])


def cell(text):
    return str(text).replace("\n", " ").replace("|", "\\|")


def render(topics):
    out = [BEGIN, ""]
    for name, data in topics:
        note = os.path.relpath(os.path.join(REPO, data["note"]), os.path.dirname(RESULTS_MD))
        out += [f"## {data['topic']}", "",
                f"Claims: `bench/results/{name}`; how they were reached: [{note}]({note}).", "",
                "| claim | figure | command | commit | host | date |",
                "|---|---|---|---|---|---|"]
        for c in data["claims"]:
            link = f"{note}#{slug(c['section'])}"
            out.append(f"| [{cell(c['claim'])}]({link}) | {cell(c['figure'])} | `{cell(c['command'])}` "
                       f"| {cell(c['commit'])} | {cell(c['host'])} | {cell(c['date'])} |")
        out.append("")
    out += ["## The notes", "",
            "Each note tells how its figures were reached; its sections:", ""]
    for name, data in topics:
        note_path = os.path.join(REPO, data["note"])
        note = os.path.relpath(note_path, os.path.dirname(RESULTS_MD))
        title = headings(note_path, (1,))
        if not title:
            raise Failure(f"{data['note']}: expected a '# ' title line, found none")
        sections = headings(note_path, (2, 3))
        out.append(f"- [{title[0]}]({note})" + (": " if sections else "") +
                   "; ".join(f"[{s}]({note}#{slug(s)})" for s in sections))
    out += ["", END]
    return "\n".join(out)


def splice(text, tables):
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise Failure(f"{os.path.relpath(RESULTS_MD, REPO)}: expected the markers\n  {BEGIN}\n  {END}\n"
                      "in this order, found " + ("neither" if start < 0 and end < 0 else "one or misplaced"))
    return text[:start] + tables + text[end + len(END):]


def check_links():
    files = [os.path.join(REPO, "README.md")]
    files += sorted(glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True))
    broken = []
    count = 0
    for path in files:
        in_code = False
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for number, line in enumerate(lines, 1):
            if line.lstrip().startswith("```"):
                in_code = not in_code
                continue
            if in_code:
                continue
            # Inline code may hold brackets and parentheses that are no link.
            line = re.sub(r"`[^`]*`", "", line)
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+:", target):
                    continue
                count += 1
                file_part, _, anchor = target.partition("#")
                resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                where = f"{os.path.relpath(path, REPO)}:{number}: ({target})"
                if not os.path.exists(resolved):
                    broken.append(f"{where}: no file {os.path.relpath(resolved, REPO)}")
                elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                    broken.append(f"{where}: no heading with anchor #{anchor} in "
                                  f"{os.path.relpath(resolved, REPO)}")
    if broken:
        raise Failure(f"{len(broken)} of {count} relative links are broken:\n  " + "\n  ".join(broken))
    print(f"{count} relative links in {len(files)} files resolve")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if docs/results.md is out of date")
    ap.add_argument("--check-links", action="store_true",
                    help="fail if a relative link in README.md or docs/**/*.md is broken")
    args = ap.parse_args()
    try:
        if args.check_links:
            check_links()
            if not args.check:
                return 0
        topics = load_topics()
        with open(RESULTS_MD, encoding="utf-8") as f:
            text = f.read()
        wanted = splice(text, render(topics))
        if args.check:
            if wanted != text:
                have, want = text.split("\n"), wanted.split("\n")
                line = next((i for i, (a, b) in enumerate(zip(have, want)) if a != b), min(len(have), len(want)))
                raise Failure(f"docs/results.md is out of date with bench/results/*.json (first difference "
                              f"at line {line + 1}); run bench/results_table.py")
            print(f"docs/results.md matches {sum(len(d['claims']) for _, d in topics)} claims "
                  f"in {len(topics)} files")
        elif wanted != text:
            with open(RESULTS_MD, "w", encoding="utf-8") as f:
                f.write(wanted)
    except Failure as e:
        print(f"results_table.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
