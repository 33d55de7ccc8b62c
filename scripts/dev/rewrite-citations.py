#!/usr/bin/env python3
"""Rewrites citations of the external design note "ALGORITHMS.md" into citations of the
repository's own docs/algorithms.md (and of ARCHITECTURE.md / STYLE-EXAMPLES.md into
CONTRIBUTING.md), and removes stale "issue N" references from comments.

    scripts/dev/rewrite-citations.py            # dry run: unified diff of what would change
    scripts/dev/rewrite-citations.py --write    # apply in place
    scripts/dev/rewrite-citations.py --map      # one line per change: file:line, old -> new
    scripts/dev/rewrite-citations.py --check    # exit 1 if any old citation or issue ref is left

Options: --root DIR (default: the checkout containing this script).

Rules are matched by content, not by path or line number, so the script works after files
move (issue 10 reorganizes service/). A rule may be restricted to files whose name ends with
a given suffix. The rules are ordered: specific phrasings first, then generic patterns. Every
section and equation a rewrite cites is checked against the headings and equation numbers of
docs/algorithms.md before anything is written; a citation of something that does not exist
stops the run. The output never contains "ALGORITHMS.md" or "issue N", so a second run
changes nothing (idempotent). Markdown files get links relative to their own directory.
Lines that are "-- title ----" separators keep their length (the dash run is adjusted).

Only files tracked by git with the extensions below are touched (code, proto, docs, Python).
"""
import argparse
import difflib
import os
import re
import subprocess
import sys

EXTENSIONS = (".cc", ".h", ".proto", ".md", ".py")
DOC = "docs/algorithms.md"
# Files that describe the rewrite itself and must keep the old text.
EXCLUDE = {"docs/citation-map.txt", "scripts/dev/rewrite-citations.py", "CHANGELOG.md"}

# The separator between "ALGORITHMS.md" and what follows, possibly across a comment line break.
SEP = r"(?P<sep>[ \t]*(?:\n[ \t]*(?://|#)[ \t]*)?)"


# (file-suffix or None, regex, replacement). In a replacement, {doc} is the citation of
# docs/algorithms.md appropriate for the file (plain path in code, a relative link in
# Markdown); \g<sep> keeps the original separator.
RULES = [
    # ---- specific phrasings of ALGORITHMS.md citations ----
    (None, r'ALGORITHMS\.md' + SEP + r'section 1, "Uses of the learned operator"', r"{doc}\g<sep>§1.9"),
    (None, r'ALGORITHMS\.md' + SEP + r'section 1, "Uses"', r"{doc}\g<sep>§1.9"),
    (None, r"ALGORITHMS\.md" + SEP + r"section 1, last bullets", r"{doc}\g<sep>§1.10, (1.25)"),
    (None, r'ALGORITHMS\.md "one-sided"', r"{doc} §1.5"),
    (None, r"ALGORITHMS\.md §1 numerics", r"{doc} §1.7"),
    (None, r"relative jitter, ALGORITHMS\.md" + SEP + r"section 1\)", r"relative jitter, {doc}\g<sep>(1.18))"),
    (None, r"beta = W k_X\(x\) \(ALGORITHMS\.md section 1\)", r"beta = W k_X(x) ({doc} (1.24))"),
    ("bandwidth.h", r"ALGORITHMS\.md sec\. 1\)", r"{doc} §1.11)"),
    ("basins.py", r"ALGORITHMS\.md sec\. 1,", r"{doc} §1.10,"),
    ("duffing_demo.py", r"eigenfunctions \(ALGORITHMS\.md sec\. 1\)", r"eigenfunctions ({doc} §1.9-1.10)"),
    (None, r"ALGORITHMS\.md" + SEP + r"section 3, steps 1[–-]3", r"{doc}\g<sep>§3.3"),
    (None, r"statistics of ALGORITHMS\.md" + SEP + r"section 3\b", r"statistics of {doc}\g<sep>§3.2"),
    (None, r"P_h \+= h\(x\)h\(y\)\^T \(ALGORITHMS\.md section 3\)", r"P_h += h(x)h(y)^T ({doc} (3.2))"),
    ("feature_map.h", r"\(ALGORITHMS\.md section 3\)", r"({doc} §3.1)"),
    ("latent_model.h", r"\(ALGORITHMS\.md section 3\), so that", r"({doc} (3.1)), so that"),
    (None, r"ALGORITHMS\.md" + SEP + r"section 5 normalization", r"{doc}\g<sep>(5.8) normalization"),
    (None, r"ALGORITHMS\.md" + SEP + r"section 5 reports", r"{doc}\g<sep>§5.5 reports"),
    (None, r'ALGORITHMS\.md' + SEP + r'section 5, "finite-dimensional recipe"', r"{doc}\g<sep>§5"),
    (None, r"\(ALGORITHMS\.md" + SEP + r"(?:section |§)3 with the", r"({doc}\g<sep>§3.2 with the"),
    (None, r"Fits S1A, S1B, S2 \(ALGORITHMS\.md section 6\)", r"Fits S1A, S1B, S2 ({doc} §6.2)"),
    (None, r"\(ALGORITHMS\.md's chain gave", r"(The design prototype's chain, {doc} §4.8, gave"),
    (None, r"\(ALGORITHMS\.md §4's chain,", r"(The design prototype's chain of {doc} §4.8,"),
    (None, r"denoising option of ALGORITHMS\.md section 4\)", r"denoising option of {doc} §4.2)"),
    (None, r"k-means pre-clustering \(ALGORITHMS\.md section 4\)", r"k-means pre-clustering ({doc} §4.2)"),
    (None, r"best in ALGORITHMS\.md §4\)", r"best in {doc} §4.2)"),
    # CLI help text is printed to terminals: plain ASCII there.
    ("context.cc", r"\(ALGORITHMS\.md sections (\d)-(\d)\)", r"({doc} sections \1-\2)"),
    # ---- generic forms ----
    (None, r"ALGORITHMS\.md" + SEP + r"sections (?P<a>\d+)-(?P<b>\d+)", r"{doc}\g<sep>§\g<a>-\g<b>"),
    (None, r"ALGORITHMS\.md" + SEP + r"section (?P<s>\d+), step (?P<t>\d+)", r"{doc}\g<sep>§\g<s>.\g<t>"),
    (None, r"ALGORITHMS\.md" + SEP + r"section (?P<s>\d+(?:\.\d+)?)", r"{doc}\g<sep>§\g<s>"),
    (None, r"ALGORITHMS\.md" + SEP + r"sec\. (?P<s>\d+(?:\.\d+)?)", r"{doc}\g<sep>§\g<s>"),
    (None, r"ALGORITHMS\.md" + SEP + r"§(?P<s>\d+(?:\.\d+)?)", r"{doc}\g<sep>§\g<s>"),
    # ---- other design notes outside the repository: their rules now live in CONTRIBUTING.md ----
    (None, r'ARCHITECTURE\.md "Data flow"; STYLE-EXAMPLES(?:\.md)? item 7', r'CONTRIBUTING.md "Data flow", "Views are immutable"'),
    (None, r'ARCHITECTURE\.md "', r'CONTRIBUTING.md "'),
    (None, r'STYLE-EXAMPLES(?:\.md)? "Error tiers"', r'CONTRIBUTING.md "Error tiers"'),
    (None, r"STYLE-EXAMPLES(?:\.md)? item 11", r'CONTRIBUTING.md "Binary formats"'),
    # ---- stale issue references ----
    (None, r"\(issue 6; ", r"("),
    (None, r'\(issue 6, part 4: "', r'("'),
    (None, r"\(docs/benchmarks\.md, issue 4\)", r"(docs/benchmarks.md)"),
    (None, r"views of issues 3-5 through", r"views of {doc} §2-6 through"),
    (None, r"latent, forecast; issues 3-5\)", r"latent, forecast; {doc} §2-6)"),
    (None, r"views \(issues 3-5\)\.", r"views ({doc} §2-6)."),
    # "(issue 6, part 1)", "(issue 2 part 5)", "(issues 3, 4)", "(issue 3)": dropped.
    (None, r"[ \t]*\(issues? \d+(?:(?:, |-)\d+)*(?:,? part \d+)?\)", r""),
]

# What --check reports as left over.
LEFTOVER = [re.compile(r"ALGORITHMS\.md|ARCHITECTURE\.md|STYLE-EXAMPLES|BUILD-NOTES|shared/design"),
            re.compile(r"\bissues? [0-9]", re.IGNORECASE)]


def repo_root():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", ".."))


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], check=True, capture_output=True, text=True).stdout
        files = out.splitlines()
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, _, names in os.walk(root):
            if "/.git" in d or "/build" in d:
                continue
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(f for f in files if f.endswith(EXTENSIONS) and f not in EXCLUDE)


def slug(heading):
    """GitHub's anchor for a Markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)  # drops punctuation, keeps letters, digits, '_', '-', ' '
    return s.replace(" ", "-")


def load_targets(root):
    """Section numbers -> anchors, and the set of equation numbers, of docs/algorithms.md."""
    path = os.path.join(root, DOC)
    if not os.path.exists(path):
        sys.exit(f"rewrite-citations: {DOC} not found under {root}")
    sections, equations = {}, set()
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^(#{2,3}) ((\d+)(?:\.(\d+))?\.? .*)$", line.rstrip("\n"))
        if m:
            number = m.group(3) + (f".{m.group(4)}" if m.group(4) else "")
            sections[number] = slug(m.group(2))
        for e in re.findall(r"\((\d+\.\d+)\)\s*$", line.rstrip()):
            equations.add(e)
    return sections, equations


def doc_citation(path):
    """How a file cites docs/algorithms.md: a path in code, a relative link in Markdown."""
    if path.endswith(".md"):
        rel = os.path.relpath(DOC, os.path.dirname(path) or ".")
        return f"[{DOC}]({rel})", rel
    return DOC, None


def markdown_links(text, rel, sections):
    """In Markdown, '[docs/algorithms.md](rel) §S' becomes '[docs/algorithms.md §S](rel#anchor)'."""
    def link(m):
        number, rest = m.group(1), m.group(2) or ""
        anchor = sections.get(number)
        target = f"{rel}#{anchor}" if anchor else rel
        return f"[{DOC} §{number}{rest}]({target})"
    pattern = r"\[" + re.escape(DOC) + r"\]\(" + re.escape(rel) + r"\) §(\d+(?:\.\d+)?)((?:-\d+(?:\.\d+)?)?(?:, \(\d+\.\d+\))?)"
    return re.sub(pattern, link, text)


def check_targets(new_text, old_text, sections, equations, path, root):
    """Every § and (S.T) that the rewrite introduced must exist in docs/algorithms.md, and every
    'CONTRIBUTING.md "phrase"' must name a phrase that CONTRIBUTING.md contains."""
    bad = []
    quoted = re.findall(r'CONTRIBUTING\.md "([^"]+)"(?:, "([^"]+)")?', new_text)
    if quoted:
        contributing = os.path.join(root, "CONTRIBUTING.md")
        have = " ".join(open(contributing, encoding="utf-8").read().split()) if os.path.exists(contributing) else ""
        for phrase in (p for pair in quoted for p in pair if p):
            phrase = " ".join(re.sub(r"\s*(?://|#)\s*", " ", phrase).split())
            if phrase not in have:
                bad.append(f'CONTRIBUTING.md "{phrase}"')
    for ref in set(re.findall(r"§(\d+(?:\.\d+)?)", new_text)) - set(re.findall(r"§(\d+(?:\.\d+)?)", old_text)):
        if ref not in sections:
            bad.append(f"§{ref}")
    introduced = set(re.findall(r"(?:algorithms\.md|§[\d.]+,?)\s*(?://|#)?\s*\((\d+\.\d+)\)", new_text))
    for ref in introduced:
        if ref not in equations:
            bad.append(f"({ref})")
    if bad:
        sys.exit(f"rewrite-citations: {path} would cite {', '.join(sorted(bad))}, which does not exist")


def keep_separator_width(old, new):
    """'-- title ------' comment separators keep their original width."""
    old_lines, new_lines = old.split("\n"), new.split("\n")
    if len(old_lines) != len(new_lines):
        return new
    out = []
    for o, n in zip(old_lines, new_lines):
        if o != n and re.search(r" -{3,}$", o) and re.search(r" -{3,}$", n) and len(n) != len(o):
            body = n.rstrip("-")
            n = body + "-" * max(3, len(o) - len(body))
        out.append(n)
    return "\n".join(out)


def rewrite(path, text, sections, equations, root):
    doc, rel = doc_citation(path)
    new = text
    for suffix, pattern, repl in RULES:
        if suffix and not path.endswith(suffix):
            continue
        new = re.sub(pattern, repl.replace("{doc}", doc.replace("\\", "\\\\")), new)
    if rel is not None:
        new = markdown_links(new, rel, sections)
    new = keep_separator_width(text, new)
    if new != text:
        check_targets(new, text, sections, equations, path, root)
    return new


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=repo_root())
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="apply the changes in place")
    mode.add_argument("--map", action="store_true", help="print file:line, old -> new for each change")
    mode.add_argument("--check", action="store_true", help="exit 1 if old citations or issue refs remain")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    sections, equations = load_targets(root)

    if args.check:
        left = 0
        for path in tracked_files(root):
            for number, line in enumerate(open(os.path.join(root, path), encoding="utf-8"), 1):
                if any(p.search(line) for p in LEFTOVER):
                    print(f"{path}:{number}: {line.rstrip()}")
                    left += 1
        print(f"rewrite-citations: {left} line(s) left", file=sys.stderr)
        return 1 if left else 0

    # Every file is rewritten and checked in memory first: a bad target stops the run before
    # anything is written.
    changes = []
    for path in tracked_files(root):
        text = open(os.path.join(root, path), encoding="utf-8").read()
        new = rewrite(path, text, sections, equations, root)
        if new != text:
            changes.append((path, text, new))
    changed = len(changes)
    for path, text, new in changes:
        if args.write:
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(new)
        elif args.map:
            old_lines, new_lines = text.split("\n"), new.split("\n")
            sm = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
            for tag, i1, i2, j1, j2 in sm.get_opcodes():
                if tag == "equal":
                    continue
                print(f"{path}:{i1 + 1}")
                for line in old_lines[i1:i2]:
                    print(f"  - {line.strip()}")
                for line in new_lines[j1:j2]:
                    print(f"  + {line.strip()}")
        else:
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True),
                                                       f"a/{path}", f"b/{path}"))
    print(f"rewrite-citations: {changed} file(s) {'changed' if args.write else 'to change'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
