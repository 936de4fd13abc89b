//! Build script: records which commit the binary was built from, for `tierfs --version`.
//!
//! The commit comes from `git` when the source is a git checkout; a build without git (a
//! source tarball, a vendored copy) still works and says so. `TIERFS_BUILD_COMMIT` in the
//! build environment overrides both, for packagers that know the commit but ship no `.git`.
//!
//! Only the files git moves on a commit or checkout are watched (HEAD, the branch's ref,
//! packed-refs), plus the sources: watching the index or the whole tree would rebuild the
//! crate after every `git status`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

fn watch(p: &Path) {
    if p.exists() {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=TIERFS_BUILD_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=Cargo.toml");
    println!("cargo:rerun-if-changed=Cargo.lock");

    let commit = match std::env::var("TIERFS_BUILD_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => from_git().unwrap_or_else(|| "unknown commit: built without git".to_string()),
    };
    println!("cargo:rustc-env=TIERFS_GIT_COMMIT={commit}");
}

/// `commit 0123abcd4567` (`+modified` when the sources that make the binary differ from it),
/// or None outside a git checkout or without git.
fn from_git() -> Option<String> {
    let dir = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    let in_repo = |args: &[&str]| {
        let mut all = vec!["-C", dir.as_str()];
        all.extend_from_slice(args);
        git(&all)
    };
    // A copy of the sources inside some other repository is not a checkout of tierfs.
    let top = in_repo(&["rev-parse", "--show-toplevel"])?;
    let canon = |p: &str| std::fs::canonicalize(p).ok();
    if canon(&top).is_none() || canon(&top) != canon(&dir) {
        return None;
    }
    let hash = in_repo(&["rev-parse", "--short=12", "HEAD"])?;
    // Rerun when HEAD moves: HEAD itself (checkout), the branch it names (commit), and
    // packed-refs (a gc that packs the branch). A worktree keeps HEAD in its own git dir
    // and the refs in the common one.
    let abs = |p: String| {
        let p = PathBuf::from(p);
        if p.is_absolute() {
            p
        } else {
            Path::new(&dir).join(p)
        }
    };
    if let Some(gd) = in_repo(&["rev-parse", "--git-dir"]).map(abs) {
        watch(&gd.join("HEAD"));
    }
    if let Some(cd) = in_repo(&["rev-parse", "--git-common-dir"]).map(abs) {
        watch(&cd.join("packed-refs"));
        if let Some(r) = in_repo(&["symbolic-ref", "-q", "HEAD"]) {
            watch(&cd.join(r));
        }
    }
    // Only what goes into the binary counts as a modification (docs and tests do not).
    let modified = in_repo(&[
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        "src",
        "build.rs",
        "Cargo.toml",
        "Cargo.lock",
    ])
    .is_some();
    Some(format!(
        "commit {hash}{}",
        if modified { "+modified" } else { "" }
    ))
}
