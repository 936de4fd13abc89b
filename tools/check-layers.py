#!/usr/bin/env python3
"""Check the module structure of src/: no import cycle between source files, the layers call
only downward, and the size limits of issue #16 (files, functions, `use super::*`). Cycles
between top-level modules (a folder of src/ or a file at its root) fail the check too: a
folder is one concept, and two that import each other are one tangle split over folders.

A file's references are every `crate::...` path in it (in `use` trees too) and every
`super::...` path, resolved to the deepest source file that defines that module; test
modules are left out, since tests may reach anywhere: those in a file
(`#[cfg(test)] mod ... { }`) and those in a file of their own (`#[cfg(test)] mod tests;`,
the sibling `tests.rs`), which is left out whole, limits included, as in-file tests are.

Usage: tools/check-layers.py [--graph]     (exit 1 and a list of what is wrong)
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "src")

# Layers, bottom up. A module may use modules of its own layer or lower ones, never higher;
# within a layer the files must still not form a cycle. Each entry is a module path prefix
# (the longest matching prefix decides). Keep in step with docs/DESIGN.md.
LAYERS = [
    # 0: leaves: units, errors (the core's errno error; error::failure, a command's exit
    # code), libc wrappers
    ["units", "error", "sys"],
    # 1: configuration, on-disk and wire formats, logging
    ["config", "layout", "control", "logging", "fuse::abi"],
    # 2: a tier folder (who holds it: tier::lock; every backing call: tier::beneath; what
    # the tiers hold at one name: tier::resolve), the only way to its bytes, its bandwidth
    ["tier", "tierio", "probe"],
    # 3: decisions and bookkeeping with no I/O on a tier: where bytes go (policy),
    # shared-tier coordination, the cache's books, the daemon's own
    # counters and the formats that show them (stats: the CPU ledger, request counts, the
    # snapshot's types and renderings, the metrics and their node_exporter file), and the
    # inode table (inode types, the tree, an open file's state, its pieces' paths, failed
    # inodes); a moved file's re-linking journal
    ["policy", "coord", "cache", "stats", "inodes", "relink"],
    # 4: the data path below a handle: an open file's bytes through its layout, the cache,
    # migrations, write-back, prefetch, and which opens the kernel serves itself; handed
    # what it works on (`data::Parts`), it calls nothing above it
    ["data"],
    # 5: the core's shared state (the struct the façade wraps) and a request's panic caught
    ["vfs::state", "vfs::contain"],
    # 6: what every operation needs: backing paths, attributes, handles
    ["vfs::backing", "vfs::attr", "vfs::handles"],
    # 7: the operations: namespace, open files, folders, reads and writes of a handle, the
    # mount-time scan, the .tierfs/ files; adaptation (vfs::adapt: the shares refreshed from
    # the estimates and the ledger)
    ["vfs::readwrite", "vfs::files", "vfs::namespace", "vfs::links", "vfs::dirs", "vfs::scan",
     "vfs::held", "vfs::statsdir", "vfs::tierctl", "vfs::snapshot", "vfs::direct", "vfs::appio",
     "vfs::adapt"],
    # 8: the façade and the filesystem's construction and shutdown
    ["vfs::lifecycle", "vfs"],
    # 9: what reads the core or its files from outside: the on-disk tools, monitors, advice
    ["ondisk", "tune", "client"],
    # 10: the kernel side and the process (fuse::reply: the dispatcher's reply conversions;
    # cli::mount_helper: the binary as mount(8)'s helper)
    ["fuse", "fuse::reply", "direct", "daemon", "cli", "main", "lib", "testutil"],
]

# Limits from issue #16.
MAX_FILE_LINES = 800  # outside the file's #[cfg(test)] part
MAX_FN_LINES = 120
# Functions allowed to be longer: argument parsing tables.
LONG_FN_ALLOWED = {
    ("cli", "parse_args"),
    ("mount_helper", "parse_args"),
}


def module_of(path):
    rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel == ["lib"] or rel == ["main"]:
        return rel
    return rel


def strip_comments_and_strings(text):
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            close = '"' + m.group(1)
            j = text.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # a char literal ('a', '\n', '\u{..}') or a lifetime ('a)
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(text, open_brace):
    depth = 0
    for j in range(open_brace, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def strip_tests(text):
    """Blank out #[cfg(test)] items (modules and functions); return (text, test_lines)."""
    test_lines = 0
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s*)?(mod|fn|impl|use)\b", text)
        if not m:
            return text, test_lines
        if m.group(3) == "use":
            j = text.find(";", m.end()) + 1
        else:
            brace = text.find("{", m.end())
            semi = text.find(";", m.end())
            if semi >= 0 and (brace < 0 or semi < brace):
                j = semi + 1
            else:
                j = block_end(text, brace)
        chunk = text[m.start():j]
        test_lines += chunk.count("\n")
        text = text[:m.start()] + re.sub(r"[^\n]", " ", chunk) + text[j:]


def expand_use_tree(tree):
    """'a::{b, c::{d, e}}' -> ['a::b', 'a::c::d', 'a::c::e']"""
    tree = re.sub(r"\s+", "", tree)
    if "{" not in tree:
        return [tree]
    k = tree.index("{")
    prefix = tree[:k]
    inner = tree[k + 1:block_end(tree, k) - 1]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if not p:
            continue
        for e in expand_use_tree(p):
            out.append(prefix + e if e != "self" else prefix.rstrip(":"))
    return out


def strongly_connected(nodes, edges):
    """Tarjan's strongly connected components of more than one node, each sorted."""
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return sccs


def top_level_cycles(edges):
    """Cycles between top-level modules (a folder of src/, or a file at its root), each as
    a warning naming, per edge of the cycle, how many file imports make it and one of them.
    Warnings only, not yet problems: issue 41 removes the remaining ones."""
    files_between = {}
    for a, targets in edges.items():
        for b in targets:
            if a[0] != b[0]:
                files_between.setdefault((a[0], b[0]), []).append((a, b))
    top_edges = {}
    for ta, tb in files_between:
        top_edges.setdefault(ta, set()).add(tb)
    out = []
    for comp in strongly_connected(sorted(top_edges), top_edges):
        members = set(comp)
        parts = []
        for ta in comp:
            for tb in sorted(top_edges.get(ta, ())):
                if tb in members:
                    pairs = sorted(files_between[(ta, tb)])
                    a, b = pairs[0]
                    parts.append(f"  {ta} -> {tb}: {len(pairs)} file import(s), e.g. {'::'.join(a)} -> {'::'.join(b)}")
        out.append(f"warning: cycle between top-level modules {{{', '.join(comp)}}}:\n" + "\n".join(parts))
    return out


def main():
    files = {}
    for dirpath, _, names in os.walk(SRC):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(dirpath, name)
                files[tuple(module_of(path))] = path
    modules = set(files)
    test_files = set()
    for mod, path in files.items():
        text = strip_comments_and_strings(open(path).read())
        for tm in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s*)?mod\s+(\w+)\s*;", text):
            # a/mod.rs and a.rs alike declare a::NAME; lib.rs and main.rs the root's NAME.
            parent = () if mod in (("lib",), ("main",)) else mod
            test_files.add(parent + (tm.group(1),))

    def resolve(segments):
        for k in range(len(segments), 0, -1):
            if tuple(segments[:k]) in modules:
                return tuple(segments[:k])
        return None

    problems = []
    edges = {}
    for mod, path in sorted(files.items()):
        if mod in test_files:
            continue
        raw = open(path).read()
        text = strip_comments_and_strings(raw)
        text, test_lines = strip_tests(text)
        code_lines = raw.count("\n") - test_lines
        rel = os.path.relpath(path, ROOT)
        if code_lines > MAX_FILE_LINES:
            problems.append(f"{rel}: {code_lines} lines outside its tests (limit {MAX_FILE_LINES})")
        if re.search(r"\buse\s+super::\*", text):
            problems.append(f"{rel}: `use super::*` outside tests")
        for fm in re.finditer(r"\bfn\s+(\w+)[^;{]*\{", text):
            end = block_end(text, fm.end() - 1)
            lines = text[fm.start():end].count("\n") + 1
            if lines > MAX_FN_LINES and (mod[-1], fm.group(1)) not in LONG_FN_ALLOWED:
                line = text[:fm.start()].count("\n") + 1
                problems.append(f"{rel}:{line}: fn {fm.group(1)} is {lines} lines (limit {MAX_FN_LINES})")

        refs = []
        for um in re.finditer(r"\buse\s+([^;]+);", text):
            refs += expand_use_tree(um.group(1))
        refs += re.findall(r"\b(?:crate|super)(?:::\w+)+\b(?!::)", text)
        # `self::child` and plain child module names in a mod.rs are downward: not edges.
        for ref in refs:
            segs = [s for s in ref.split("::") if s]
            if not segs:
                continue
            if segs[0] == "crate":
                target = resolve(segs[1:])
            elif segs[0] == "super":
                # `super` of a/b.rs and of b/mod.rs alike is the parent of the module.
                base = list(mod[:-1])
                segs = segs[1:]
                while segs and segs[0] == "super":
                    segs, base = segs[1:], base[:-1]
                target = resolve(base + segs) or (tuple(base) if tuple(base) in modules else None)
            elif segs[0] == "tierfs":
                target = resolve(segs[1:])
            else:
                continue
            if target and target != mod:
                edges.setdefault(mod, set()).add(target)

    # Cycles between files: always a problem.
    for comp in strongly_connected(sorted(files), edges):
        members = set(comp)
        inner = sorted(f"{'::'.join(a)} -> {'::'.join(b)}" for a in comp for b in edges.get(a, ()) if b in members)
        problems.append("import cycle: " + "; ".join(inner))
    problems.extend(c.replace("warning: cycle", "cycle", 1) for c in top_level_cycles(edges))
    name = "::".join

    def layer(m):
        best, rank = -1, None
        for r, prefixes in enumerate(LAYERS):
            for p in prefixes:
                ps = tuple(p.split("::"))
                if m[:len(ps)] == ps and len(ps) > best:
                    best, rank = len(ps), r
        return rank

    for a in sorted(edges):
        la = layer(a)
        if la is None:
            problems.append(f"{name(a)}: in no layer (add it to LAYERS in tools/check-layers.py)")
            continue
        for b in sorted(edges[a]):
            lb = layer(b)
            if lb is not None and lb > la:
                problems.append(f"upward call: {name(a)} (layer {la}) -> {name(b)} (layer {lb})")

    if "--graph" in sys.argv:
        for a in sorted(edges):
            print(f"{name(a)} -> {', '.join(name(b) for b in sorted(edges[a]))}")
    for p in problems:
        print(p)
    if problems:
        print(f"check-layers: {len(problems)} problem(s)")
        return 1
    print(f"check-layers: {len(files)} files, {sum(len(v) for v in edges.values())} edges, no cycle "
          "between files or top-level modules, layers respected, limits held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
