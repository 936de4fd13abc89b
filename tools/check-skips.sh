#!/usr/bin/env bash
# check-skips.sh: the tests may skip only through the one helper (`require!` / `have` in
# tests/common and src/testutil.rs), which prints `SKIP: <test>: <reason>` and fails under
# TIERFS_REQUIRE_ALL=1 (CI). Fails (exit 1, one line per finding) when test code
#   - has a string with SKIP outside those two files (a skip message of its own);
#   - returns from a #[test] function (`return`, `let .. else { return }`): a test that
#     ends early passes without checking anything;
#   - returns early from a helper of the tests (`return;`, `return None`, `return false`)
#     without saying why on that line with a `// not a skip: ...` comment.
# Test code: tests/*.rs, src/**/*.rs from their `#[cfg(test)] mod` on, and the whole of a
# src/**/tests.rs (a folder's unit tests in a file of their own). .ci/run runs this.
#
#   tools/check-skips.sh            (from any directory)
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

HELPERS='^(tests/common/mod\.rs|src/testutil\.rs)$'
mapfile -t FILES < <(git ls-files 'tests/*.rs' 'src/*.rs' 'src/**/*.rs' 2>/dev/null ||
    find tests src -name '*.rs')
fail=0

# Skip messages of their own (in strings; comments may talk about SKIP).
for f in "${FILES[@]}"; do
    [[ $f =~ $HELPERS ]] && continue
    if grep -nE '"[^"]*\bSKIP\b' "$f" | sed "s|^|$f:|; s|\$|  <- a SKIP message outside require!/have|"; then
        fail=1
    fi
done

# Early returns: a small Rust scanner (strings, raw strings, char literals and comments are
# blanked before looking for `return` and counting braces).
for f in "${FILES[@]}"; do
    [[ $f =~ $HELPERS ]] && continue
    awk -v file="$f" -v whole="$([[ $f == tests/* || $f == src/*/tests.rs ]] && echo 1 || echo 0)" '
    function code_of(line,    i, n, c, nx, out, m) {
        out = ""; n = length(line)
        for (i = 1; i <= n; i++) {
            c = substr(line, i, 1); nx = substr(line, i + 1, 1)
            if (st == "str") {
                if (c == "\\") { i++ } else if (c == "\"") { st = "code"; out = out "\"" }
                continue
            }
            if (st == "raw") {
                if (c == "\"" && substr(line, i + 1, hashes) == hashstr) {
                    st = "code"; i += hashes; out = out "\""
                }
                continue
            }
            if (st == "block") {
                if (c == "*" && nx == "/") { bdepth--; i++; if (bdepth == 0) st = "code" }
                else if (c == "/" && nx == "*") { bdepth++; i++ }
                continue
            }
            if (c == "/" && nx == "/") break
            if (c == "/" && nx == "*") { st = "block"; bdepth = 1; i++; continue }
            if (c == "\"") { st = "str"; out = out "\""; continue }
            if (c == "r" && (i == 1 || substr(line, i - 1, 1) !~ /[A-Za-z0-9_]/) &&
                match(substr(line, i), /^r#*"/)) {
                hashes = RLENGTH - 2; hashstr = substr(line, i + 1, hashes)
                st = "raw"; i += RLENGTH - 1; out = out "\""; continue
            }
            if (c == "'"'"'") {
                if (nx == "\\") {
                    m = index(substr(line, i + 2), "'"'"'")
                    if (m > 0) { i = i + 1 + m; out = out "_"; continue }
                } else if (substr(line, i + 2, 1) == "'"'"'") {
                    i += 2; out = out "_"; continue
                }
            }
            out = out c
        }
        return out
    }
    function braces(s,    t, o, cl) {
        t = s; o = gsub(/\{/, "", t); t = s; cl = gsub(/\}/, "", t)
        return o - cl
    }
    BEGIN { st = "code"; intest = whole + 0 }
    {
        raw = $0
        code = code_of(raw)
        if (!intest && code ~ /#\[cfg\(test\)\]/) cfgtest = 1
        else if (cfgtest && code ~ /^[ \t]*(pub(\([a-z]+\))? )?mod [a-z_]+/) intest = 1
        else if (code !~ /^[ \t]*$/) cfgtest = 0
        if (!intest) next
        if (code ~ /#\[test\]/) pending = 1
        if (pending && code ~ /(^|[^A-Za-z0-9_])fn[ \t]/) { pending = 0; infn = 1; depth = 0; started = 0 }
        hasret = (code ~ /(^|[^A-Za-z0-9_])return([^A-Za-z0-9_]|$)/)
        if (infn) {
            if (hasret) {
                printf "%s:%d: %s  <- an early return in a #[test]; skip with require! instead\n", file, NR, raw
                bad = 1
            }
            d = braces(code); depth += d
            if (code ~ /\{/) started = 1
            if (started && depth <= 0) infn = 0
        } else if (code ~ /(^|[^A-Za-z0-9_])return[ \t]*(;|None|false)/ && raw !~ /\/\/ not a skip/) {
            printf "%s:%d: %s  <- an early return in a test helper: skip with require!, or say \"// not a skip: why\"\n", file, NR, raw
            bad = 1
        }
    }
    END { exit bad }
    ' "$f" || fail=1
done

if [ "$fail" != 0 ]; then
    echo "check-skips: the tests above may pass without checking anything (see tests/common/mod.rs)" >&2
    exit 1
fi
echo "check-skips: ${#FILES[@]} files; every skip goes through require!/have"
