#!/usr/bin/env python3
"""Every link and reference in the user docs must lead somewhere.

README.md and docs/ point at each other, at sections of each other and at files of the
repository; a renamed heading or a moved script leaves a reference that says nothing. This
check reads README.md, every docs/*.md, tools/deepspeed/README.md, and the comments of the
configs users copy (docs/jobs/*, mount-configs/*.toml), and fails on:

  - a markdown link `[text](target)` or image whose relative target is not in the
    repository, or whose `#anchor` is no heading of the target (GitHub's anchors: lower
    case, punctuation dropped, spaces as hyphens, `-1`, `-2` for repeats);
  - a repository path that is not there: in `inline code` or a code block, a path whose
    first part is a top-level entry of the repository (`tools/demo.sh`, `docs/JOBS.md`, the
    first word of `tools/demo.sh --unmount`); in prose, `docs/NAME.md`-like paths under
    such an entry. Paths with placeholders (`<target>`, `*`, `$`, `{`) are left alone;
  - a section named in quotes that no heading starts with: `README "Install"`,
    `docs/DESIGN.md, "The direct path"`, `docs/JOBS.md ("When a daemon is killed")`, and
    within one file `see "Troubleshooting"`;
  - a key of the config file (the serde structs of src/config/raw.rs) that docs/CONFIG.md
    does not list in its section's table, or a key listed there that the file does not take.

CHANGELOG.md is history: the names it uses were right when written, so it is not read.
Repository files are the ones git tracks (a link to an untracked file breaks in a clone).

Usage: tools/check-links.py [--root DIR]     exit 0, or 1 with one line per problem
       tools/check-links.py --self-test      checks the checker on a made-up tree
"""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The files read, as globs relative to the root. Markdown ones get every check; the others
# (configs and scripts users copy) only the path and section checks of their comments.
MARKDOWN = ["README.md", "docs/*.md", "tools/deepspeed/README.md"]
OTHER = ["docs/jobs/*", "mount-configs/*.toml"]

LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(`+)(?P<code>.+?)\1")
PATHLIKE = re.compile(r"^(?:\./)?[A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)*/?$")
PLACEHOLDER = re.compile(r"[<>*${}\[\]|]")
# A file named in prose and a quoted section after it: README "X", docs/A.md, "X",
# docs/A.md ("X"), docs/A.md's "X", README.md, section "X".
DOC_NAME = r"(?P<doc>README(?:\.md)?|(?:docs|tools)/[\w./-]*?\.md)"
SECTION_IN = re.compile(
    DOC_NAME + r"(?:'s)?(?:,|:)?\s*(?:\(\s*)?(?:section\s+)?\"(?P<section>[^\"\n]{2,120})\""
)
SECTION_HERE = re.compile(r"\b(?:[Ss]ee|section)\s+\"(?P<section>[^\"\n]{2,120})\"")


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading's text (before the numbering of repeats)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w keeps letters, digits and '_'
    return text.replace(" ", "-")


def headings(text: str):
    """(heading text, line number) of the ATX headings outside code blocks."""
    out = []
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            out.append((m.group(2), n))
    return out


def anchors(text: str) -> set:
    seen = {}
    result = set()
    for h, _ in headings(text):
        a = github_anchor(h)
        k = seen.get(a, 0)
        result.add(a if k == 0 else f"{a}-{k}")
        seen[a] = k + 1
    return result


def normalize(s: str) -> str:
    return re.sub(r"\s+", " ", s.replace("`", "")).strip().lower()


def normalize_ws(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def has_section(text: str, section: str) -> bool:
    """Whether a heading of `text` is `section` or starts with it (a citation may give a
    heading's opening words: "Contention" for "Contention: the pfs tier slows ...")."""
    want = normalize(section)
    return any(normalize(h).startswith(want) for h, _ in headings(text))


class Repo:
    """The files of the repository (tracked by git where it is a git checkout)."""

    def __init__(self, root: Path):
        self.root = root
        files = None
        if (root / ".git").exists():
            try:
                out = subprocess.run(
                    ["git", "-C", str(root), "ls-files", "-z"],
                    check=True,
                    capture_output=True,
                ).stdout.decode()
                files = {f for f in out.split("\0") if f}
            except (OSError, subprocess.CalledProcessError):
                files = None
        if files is None:
            files = set()
            for d, dirs, names in os.walk(root):
                dirs[:] = [x for x in dirs if x not in (".git", "target")]
                for name in names:
                    files.add(os.path.relpath(os.path.join(d, name), root))
        # Only files that are really there: a tracked file deleted in the work tree is gone.
        self.files = {f for f in files if (root / f).is_file()}
        self.dirs = set()
        for f in self.files:
            parts = f.split("/")
            for i in range(1, len(parts)):
                self.dirs.add("/".join(parts[:i]))
        self.top = {f.split("/")[0] for f in self.files}

    def exists(self, rel: str) -> bool:
        rel = os.path.normpath(rel)
        return rel in self.files or rel in self.dirs

    def text(self, rel: str) -> str:
        return (self.root / rel).read_text(encoding="utf-8")

    def matching(self, globs):
        out = []
        for g in globs:
            out += sorted(str(p.relative_to(self.root)) for p in self.root.glob(g) if p.is_file())
        return [f for f in dict.fromkeys(out) if f in self.files]


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def prose_and_code(text: str):
    """The text with fenced code blocks blanked (prose) and the code blocks' lines."""
    prose, code = [], []
    fenced = False
    for n, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            prose.append("")
            continue
        if fenced or (line.startswith("    ") and not line.strip().startswith(("-", "|"))):
            prose.append("")
            code.append((n, line))
        else:
            prose.append(line)
    return "\n".join(prose), code


def check_path(repo: Repo, path: str, problems, where: str, how: str):
    if "..." in path:  # crash-...: a placeholder
        return
    path = path.rstrip(".,;:)")
    if path.startswith("./"):
        path = path[2:]
    if not path or path.startswith("/") or PLACEHOLDER.search(path):
        return
    if path.split("/")[0] not in repo.top:
        return
    if not repo.exists(path):
        problems.append(f"{where}: {how} {path!r} is not in the repository")


def code_paths(code: str):
    """The repository-path candidates of a piece of code: each word that looks like a path
    with a '/' in it (a command's script, its file arguments), or a lone file name."""
    words = code.split()
    if len(words) == 1 and PATHLIKE.match(words[0]):
        return [words[0]]
    return [w for w in words if "/" in w and PATHLIKE.match(w)]


def link_as_name(m, here: Path) -> str:
    """A link in prose, for the section check: a link to a whole markdown file reads as that
    file's path (`[docs/X.md](X.md), "Section"` names a section of docs/X.md); any other link
    as blanks. Newlines are kept, so line numbers stay right."""
    target = m.group("target")
    keep = "\n" * m.group(0).count("\n")
    if target.endswith(".md") and not re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return " " + os.path.normpath(str(here / target)) + keep
    return " " + keep


def check_file(repo: Repo, rel: str, markdown: bool, problems):
    text = repo.text(rel)
    here = Path(rel).parent
    prose, code_lines = prose_and_code(text) if markdown else (text, [])

    if markdown:
        for m in LINK.finditer(prose):
            target = m.group("target")
            where = f"{rel}:{line_of(prose, m.start())}"
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(str(here / path)) if path else rel
            if path and not repo.exists(dest):
                problems.append(f"{where}: link {target!r}: {dest} is not in the repository")
                continue
            if anchor:
                if not dest.endswith(".md") or dest not in repo.files:
                    problems.append(f"{where}: link {target!r}: an anchor on a non-markdown file")
                elif anchor not in anchors(repo.text(dest)):
                    problems.append(
                        f"{where}: link {target!r}: {dest} has no heading with anchor #{anchor}"
                    )

    # Paths in code: inline spans of the prose and the lines of code blocks.
    for m in CODE_SPAN.finditer(prose):
        for p in code_paths(m.group("code")):
            check_path(repo, p, problems, f"{rel}:{line_of(prose, m.start())}", "path")
    for n, line in code_lines:
        for p in code_paths(line):
            check_path(repo, p, problems, f"{rel}:{n}", "path")
    # Paths in prose, outside code spans: docs/NAME.md, tools/name.sh, ...
    bare = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), prose)
    named = LINK.sub(lambda m: link_as_name(m, here), bare)
    bare = LINK.sub(lambda m: " " * len(m.group(0)), bare)
    for m in re.finditer(r"(?<![\w./-])((?:[\w-]+/)+[\w.-]*\.(?:md|sh|py|rs|toml|sbatch|pbs))\b", bare):
        check_path(repo, m.group(1), problems, f"{rel}:{line_of(bare, m.start())}", "file")

    # Quoted sections. Lines are joined so a quotation broken over two lines is found.
    flat = re.sub(r"\n[ \t#]*", lambda m: " " * len(m.group(0)), named)
    for m in SECTION_IN.finditer(flat):
        doc = m.group("doc")
        doc = "README.md" if doc == "README" else doc
        where = f"{rel}:{line_of(named, m.start())}"
        if doc not in repo.files:
            problems.append(f"{where}: {doc} is not in the repository")
        elif not has_section(repo.text(doc), m.group("section")):
            problems.append(f"{where}: {doc} has no section \"{normalize_ws(m.group('section'))}\"")
    if markdown:
        for m in SECTION_HERE.finditer(flat):
            before = flat[max(0, m.start() - 60) : m.start()]
            if re.search(DOC_NAME + r"[^\"]*$", before):
                continue  # names another file: SECTION_IN's
            if not has_section(text, m.group("section")):
                where = f"{rel}:{line_of(named, m.start())}"
                problems.append(f"{where}: no section \"{normalize_ws(m.group('section'))}\" in {rel}")


def config_keys_in_source(text: str) -> dict:
    """Section -> keys of the config file, from the serde structs of src/config/raw.rs:
    `struct RawTier` is `[[tier]]`, `RawMount` `[mount]`, ...; `RawConfig` holds the
    sections themselves."""
    out = {}
    for m in re.finditer(r"struct Raw(\w+)\s*\{(.*?)\n\}", text, re.S):
        keys = re.findall(r"^\s*pub\(super\)\s+(\w+)\s*:", m.group(2), re.M)
        out[m.group(1).lower()] = keys
    return out


def config_keys_in_doc(text: str) -> dict:
    """Section -> keys docs/CONFIG.md lists: the first cell of each table row under a
    heading that names the section (`[mount]`, `[[tier]]`)."""
    out = {}
    section = None
    for line in text.splitlines():
        h = re.match(r"^#+\s.*?\[\[?(\w+)\]\]?", line)
        if h:
            section = h.group(1)
            out.setdefault(section, [])
            continue
        if line.startswith("#"):
            section = None
        k = re.match(r"^\|\s*`(\w+)`\s*\|", line)
        if k and section:
            out[section].append(k.group(1))
    return out


def check_config_keys(repo: Repo, problems):
    """docs/CONFIG.md lists every key the config file takes, and no other."""
    src, doc = "src/config/raw.rs", "docs/CONFIG.md"
    if src not in repo.files or doc not in repo.files:
        return
    code = config_keys_in_source(repo.text(src))
    listed = config_keys_in_doc(repo.text(doc))
    for section in code.pop("config", []):
        if section not in listed:
            problems.append(f"{doc}: no section for [{section}] ({src})")
        for key in code.get(section, []):
            if key not in listed.get(section, []):
                problems.append(f"{doc}: [{section}] {key} is not listed ({src} takes it)")
        for key in listed.get(section, []):
            if key not in code.get(section, []):
                problems.append(f"{doc}: [{section}] {key} is listed, but {src} has no such key")


def check(root: Path):
    repo = Repo(root)
    problems = []
    check_config_keys(repo, problems)
    for rel in repo.matching(MARKDOWN):
        check_file(repo, rel, True, problems)
    for rel in repo.matching(OTHER):
        check_file(repo, rel, False, problems)
    return problems


def self_test() -> int:
    """The checker on a made-up tree: each kind of broken reference must be reported, and
    nothing else."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "docs/jobs").mkdir(parents=True)
        (root / "tools").mkdir()
        (root / "tools/demo.sh").write_text("#!/bin/sh\n")
        (root / "docs/A.md").write_text(
            "# A\n\n## The direct path (`tierfs run`)\n\n## Repeat\n\n## Repeat\n\n"
            "Back to [the README](../README.md#install-and-run).\n"
        )
        (root / "README.md").write_text(
            "# Title\n\n## Install and run\n\n"
            "Good: [a](docs/A.md), [b](docs/A.md#the-direct-path-tierfs-run), "
            "[c](#install-and-run), [d](docs/A.md#repeat-1), [e](https://example.com/x), "
            "`tools/demo.sh --unmount`, docs/A.md, `/etc/fstab`, `fuzz/<target>/`,\n"
            'docs/A.md, "The direct path", see "Install and run", [A](docs/A.md), "Repeat".\n\n'
            "Bad: [f](docs/B.md), [g](docs/A.md#no-such), [h](#nowhere),\n"
            "`tools/gone.sh`, `docs/C.md`, docs/D.md, README \"Placement and layouts\",\n"
            'docs/A.md ("When a job\n'
            'dies"), see "Semantics", [the A doc](docs/A.md), "Nope".\n\n'
            "```sh\ntools/missing.sh --flag\ntools/demo.sh\n```\n"
        )
        (root / "src/config").mkdir(parents=True)
        (root / "src/config/raw.rs").write_text(
            "struct RawConfig {\n    pub(super) tier: Vec<RawTier>,\n"
            "    pub(super) mount: RawMount,\n}\n"
            "struct RawTier {\n    pub(super) name: String,\n    pub(super) path: String,\n}\n"
            "struct RawMount {\n    #[serde(default)]\n    pub(super) threads: Option<i64>,\n}\n"
        )
        (root / "docs/CONFIG.md").write_text(
            "# Config\n\n## `[[tier]]`\n\n| key | default |\n|---|---|\n| `name` | - |\n"
            "| `size` | - |\n"
        )
        (root / "docs/jobs/node.toml").write_text(
            '# see README "Install and run" and README "Layouts"; docs/E.md\n'
        )
        got = sorted(check(root))
    want_parts = [
        "README.md:8: link 'docs/B.md'",
        "README.md:8: link 'docs/A.md#no-such'",
        "README.md:8: link '#nowhere'",
        "README.md:9: path 'tools/gone.sh'",
        "README.md:9: path 'docs/C.md'",
        "README.md:9: file 'docs/D.md'",
        'README.md:9: README.md has no section "Placement and layouts"',
        'README.md:10: docs/A.md has no section "When a job dies"',
        'README.md:11: no section "Semantics" in README.md',
        'README.md:11: docs/A.md has no section "Nope"',
        "README.md:14: path 'tools/missing.sh'",
        'docs/jobs/node.toml:1: README.md has no section "Layouts"',
        "docs/jobs/node.toml:1: file 'docs/E.md'",
        "docs/CONFIG.md: no section for [mount]",
        "docs/CONFIG.md: [tier] path is not listed",
        "docs/CONFIG.md: [mount] threads is not listed",
        "docs/CONFIG.md: [tier] size is listed, but",
    ]
    missing = [w for w in want_parts if not any(g.startswith(w) for g in got)]
    extra = [g for g in got if not any(g.startswith(w) for w in want_parts)]
    if missing or extra or len(got) != len(want_parts):
        print("check-links self-test FAILED")
        for w in missing:
            print(f"  not reported: {w}")
        for g in extra:
            print(f"  reported wrongly: {g}")
        return 1
    print(f"check-links self-test: all {len(want_parts)} broken references found, no others")
    return 0


def main() -> int:
    args = sys.argv[1:]
    if args == ["--self-test"]:
        return self_test()
    root = ROOT
    if len(args) == 2 and args[0] == "--root":
        root = Path(args[1]).resolve()
    elif args:
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        return 2
    problems = check(root)
    if problems:
        print(f"{len(problems)} broken link(s) or reference(s):")
        for p in problems:
            print(f"  {p}")
        print(
            "Fix the reference (or the heading or file it names); anchors are GitHub's: the "
            "heading in lower case, punctuation dropped, spaces as hyphens."
        )
        return 1
    n = len(Repo(root).matching(MARKDOWN)) + len(Repo(root).matching(OTHER))
    print(f"check-links: every link, path and section reference in {n} files leads somewhere")
    return 0


if __name__ == "__main__":
    sys.exit(main())
