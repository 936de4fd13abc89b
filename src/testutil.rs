//! Unit-test support: the one way a unit test may skip, as in `tests/common` (the rule is
//! the same in both places, and `tools/check-skips.sh` holds the tests to it). A missing
//! prerequisite prints `SKIP: <test>: <reason>`; with `TIERFS_REQUIRE_ALL=1` (CI) it panics,
//! so a passing CI run skipped nothing.

/// True when `ok`; otherwise prints `SKIP: <test>: <why>` and returns false, or panics
/// under `TIERFS_REQUIRE_ALL=1`.
#[track_caller]
pub fn have(ok: bool, why: &str) -> bool {
    if ok {
        return true;
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    if std::env::var_os("TIERFS_REQUIRE_ALL").is_some_and(|v| v == "1") {
        panic!("{test}: {why} (TIERFS_REQUIRE_ALL=1: nothing may be skipped)");
    }
    eprintln!("SKIP: {test}: {why}");
    false
}

/// Returns from the calling test unless `cond` holds (see [`have`]).
macro_rules! require {
    ($cond:expr, $($why:tt)+) => {
        if !$crate::testutil::have($cond, &format!($($why)+)) {
            return;
        }
    };
}
pub(crate) use require;

mod tests {
    use super::*;

    #[test]
    fn have_passes_what_is_there() {
        assert!(have(true, "never printed"));
    }

    /// Under CI's setting a missing prerequisite fails the test: checked in a child run of
    /// this binary, since the variable is process-wide.
    #[test]
    fn require_all_turns_a_skip_into_a_failure() {
        if std::env::var_os("TIERFS_TESTUTIL_CHILD").is_some() {
            have(false, "a prerequisite the child lacks");
        } else {
            check_both_settings();
        }
    }

    fn check_both_settings() {
        let run = |require_all: &str| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "testutil::tests::require_all_turns_a_skip_into_a_failure",
                    "--nocapture",
                ])
                .env("TIERFS_TESTUTIL_CHILD", "1")
                .env("TIERFS_REQUIRE_ALL", require_all)
                .output()
                .unwrap()
        };
        let skipped = run("0");
        let text = String::from_utf8_lossy(&skipped.stderr);
        assert!(skipped.status.success(), "{text}");
        assert!(
            text.contains(
                "SKIP: testutil::tests::require_all_turns_a_skip_into_a_failure: \
                 a prerequisite the child lacks"
            ),
            "{text}"
        );
        let failed = run("1");
        let text = String::from_utf8_lossy(&failed.stderr);
        assert!(!failed.status.success(), "{text}");
        assert!(
            text.contains("TIERFS_REQUIRE_ALL=1: nothing may be skipped"),
            "{text}"
        );
    }
}
