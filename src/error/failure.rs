//! The one error type of a command: a message and the process exit code it ends with.
//!
//! Every command of the binary (mount, unmount, the offline tools, the mount helper) fails
//! through it, so it sits low enough that all of them, and the daemon's background child
//! that hands a failure back to its parent, can share one set of exit codes.

/// A failure with the process exit code it should give: 2 for what the user must fix in
/// the command line or config, 1 for everything that went wrong at run time.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

impl Failure {
    pub fn usage(m: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: m.into(),
        }
    }
    pub fn runtime(m: impl Into<String>) -> Failure {
        Failure {
            code: 1,
            message: m.into(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
