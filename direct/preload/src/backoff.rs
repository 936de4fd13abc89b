//! When to stop asking a mount's daemon for a while: a mount whose daemon keeps saying no
//! by policy (its config turns the direct path off, or a root mount hands DeepSpeed's swap
//! files to kernel passthrough, which is as fast) would otherwise cost every open a round
//! trip to the daemon for nothing, so that a root training under `tierfs run` ran slower
//! than without it. After [`QUIET_AFTER`] such answers in a row, the library stops asking
//! that mount for [`QUIET_NS`], then asks once again; a grant, or any other answer, starts
//! the count afresh. A file it does not ask for goes through FUSE, exactly as without the
//! library.

use crate::fdtable::Spin;

pub const QUIET_AFTER: u32 = 8;
pub const QUIET_NS: u64 = 5_000_000_000;

struct State {
    dev: u64,
    /// Policy refusals in a row.
    refused: u32,
    /// Asking is quiet until then (`CLOCK_MONOTONIC` ns; 0: not quiet).
    until: u64,
}

struct Table {
    lock: Spin,
    list: std::cell::UnsafeCell<Vec<State>>,
}

// SAFETY: `list` is only touched with `lock` held.
unsafe impl Sync for Table {}

static TABLE: Table = Table {
    lock: Spin::new(),
    list: std::cell::UnsafeCell::new(Vec::new()),
};

fn with<R>(dev: u64, f: impl FnOnce(&mut State) -> R) -> R {
    TABLE.lock.lock();
    // SAFETY: the lock is held.
    let list = unsafe { &mut *TABLE.list.get() };
    let i = match list.iter().position(|s| s.dev == dev) {
        Some(i) => i,
        None => {
            list.push(State {
                dev,
                refused: 0,
                until: 0,
            });
            list.len() - 1
        }
    };
    let r = f(&mut list[i]);
    TABLE.lock.unlock();
    r
}

/// Whether to ask `dev`'s daemon for an open at time `now`.
pub fn asking(dev: u64, now: u64) -> bool {
    with(dev, |s| s.until == 0 || now >= s.until)
}

/// The daemon's answer to an open at time `now`: `policy` when it said no by policy.
pub fn answered(dev: u64, policy: bool, now: u64) {
    with(dev, |s| {
        if !policy {
            s.refused = 0;
            s.until = 0;
            return;
        }
        s.refused = s.refused.saturating_add(1);
        if s.refused >= QUIET_AFTER {
            // Past a quiet spell, one more policy answer starts the next.
            s.until = now + QUIET_NS;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_refusals_in_a_row_quiet_the_asking_for_a_while() {
        let dev = 0xb0ff;
        for i in 0..QUIET_AFTER {
            assert!(asking(dev, 100), "quiet after {i} refusals");
            answered(dev, true, 100);
        }
        assert!(
            !asking(dev, 100),
            "still asking after {QUIET_AFTER} refusals"
        );
        assert!(!asking(dev, 100 + QUIET_NS - 1));
        assert!(asking(dev, 100 + QUIET_NS), "never asks again");
        // The one probe refused again: quiet again at once.
        answered(dev, true, 100 + QUIET_NS);
        assert!(!asking(dev, 100 + QUIET_NS + 1));
        // A grant (or another answer) starts afresh.
        answered(dev, false, 100 + 2 * QUIET_NS);
        assert!(asking(dev, 100 + 2 * QUIET_NS));
        answered(dev, true, 100 + 2 * QUIET_NS);
        assert!(asking(dev, 100 + 2 * QUIET_NS), "quiet after one refusal");
        assert!(asking(0xb0ff + 1, 0), "another mount is quieted too");
    }
}
