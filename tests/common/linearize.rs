//! What a concurrent history allows, for `tests/model_concurrent.rs`: per-register
//! linearizability over timed events, and the size a file may end with.
//!
//! A register is one block of a shared file, or one name of the shared folder. Every
//! operation that changed it is an [`Ev`]: the interval in which it ran (nanoseconds on one
//! monotonic clock, taken just before the system call and just after it returned) and its
//! [`Effect`]. Two events are ordered only when one ended before the other began; events
//! whose intervals overlap may have taken effect in either order. A read over [rs, re] may
//! see the value set by an event E if E began before the read ended, and no other event
//! began after E ended and ended before the read began (that one would have replaced E's
//! value in every order). The final value (all threads joined) is a read after everything.
//!
//! This is the check for an atomic register, applied block by block: a write of several
//! blocks is atomic per block only, as POSIX buffered I/O gives nothing stronger that
//! Linux keeps. It is kept apart from the test so its own tests can show it rejects what
//! it should (a stale read, a lost write, a value from the future, a size no order gives).

/// What an event did to a register. `None` as a seen value means zeros (a block never
/// written, or cut by a truncate) or, for a name, that the name did not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Set this value (a write's stamp, a create's identity).
    Set(u64),
    /// Set some value the test cannot know (a name bound by rename or link from another).
    SetUnknown,
    /// Cleared it: zeros for a block (truncate), no such name (unlink).
    Clear,
    /// Either kept or changed it, the test cannot know which (rename from a name that is a
    /// hard link of its target does nothing, as POSIX says).
    Unknown,
}

impl Effect {
    fn allows(self, seen: Option<u64>) -> bool {
        match (self, seen) {
            (Effect::Set(a), Some(b)) => a == b,
            (Effect::SetUnknown, Some(_)) => true,
            (Effect::Clear, None) => true,
            (Effect::Unknown, _) => true,
            _ => false,
        }
    }
}

/// One operation's effect on one register, and when it ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ev {
    pub start: u64,
    pub end: u64,
    pub effect: Effect,
}

/// Whether a read that ran over [rs, re] may have seen `seen`, given every event of the
/// register (its starting value included, as an event at the start of the history).
pub fn could_read(evs: &[Ev], seen: Option<u64>, rs: u64, re: u64) -> bool {
    // The latest start among events that ended before the read began: an event that
    // ended before that start was overwritten before the read in every order.
    let latest = evs.iter().filter(|e| e.end < rs).map(|e| e.start).max();
    evs.iter()
        .any(|e| e.effect.allows(seen) && e.start <= re && latest.is_none_or(|l| e.end >= l))
}

/// Whether the register may hold `seen` once every event has ended.
pub fn could_end_with(evs: &[Ev], seen: Option<u64>) -> bool {
    could_read(evs, seen, u64::MAX, u64::MAX)
}

/// Why a read over [rs, re] may not have seen `seen`: the events that set it, and the
/// event that replaced them before the read began (the latest to begin of those that
/// ended before the read began).
pub fn explain_read(evs: &[Ev], seen: Option<u64>, rs: u64, re: u64) -> String {
    let show = |e: &Ev| format!("[{}..{}] {:?}", e.start, e.end, e.effect);
    let setters: Vec<String> = evs
        .iter()
        .filter(|e| e.effect.allows(seen))
        .map(show)
        .collect();
    let last = evs.iter().filter(|e| e.end < rs).max_by_key(|e| e.start);
    let during: Vec<String> = evs
        .iter()
        .filter(|e| e.start <= re && e.end >= rs)
        .map(show)
        .collect();
    format!(
        "set by {setters:?}; the last event to begin of those that ended before the read: {}; during the read: {during:?}",
        last.map_or_else(|| "none".into(), show)
    )
}

/// The events a failure message should show: the last `n` to begin.
pub fn describe(evs: &[Ev], n: usize) -> String {
    let mut v: Vec<&Ev> = evs.iter().collect();
    v.sort_by_key(|e| (e.start, e.end));
    let from = v.len().saturating_sub(n);
    v[from..]
        .iter()
        .map(|e| format!("[{}..{}] {:?}", e.start, e.end, e.effect))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An operation that set a file's size: a truncate (to `size`), or a write ending at
/// `size`, which extends the file to there if it was shorter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeEv {
    pub start: u64,
    pub end: u64,
    pub size: u64,
    pub truncate: bool,
}

/// Whether some order of the events ends with size `fin`. In any order the final size is
/// that of the last truncate T (the starting size counts as one), raised to the end of
/// every write ordered after T. So some T must be last among truncates (none began after
/// it ended), `fin` must be at least T's size and at least the end of every write that
/// began after T ended, and be T's size or the end of a write that may follow T.
pub fn size_could_be(evs: &[SizeEv], fin: u64) -> bool {
    let truncs: Vec<&SizeEv> = evs.iter().filter(|e| e.truncate).collect();
    let writes: Vec<&SizeEv> = evs.iter().filter(|e| !e.truncate).collect();
    truncs.iter().any(|t| {
        let last = truncs.iter().all(|o| o.start <= t.end);
        let after_ok = writes
            .iter()
            .filter(|w| w.start > t.end)
            .all(|w| w.size <= fin);
        let reached = fin == t.size || writes.iter().any(|w| w.end >= t.start && w.size == fin);
        last && fin >= t.size && after_ok && reached
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(start: u64, end: u64, effect: Effect) -> Ev {
        Ev { start, end, effect }
    }

    const INIT: Ev = Ev {
        start: 0,
        end: 0,
        effect: Effect::Clear,
    };

    #[test]
    fn sequential_writes_allow_only_the_current_value() {
        let evs = [INIT, ev(10, 20, Effect::Set(1)), ev(30, 40, Effect::Set(2))];
        assert!(could_read(&evs, Some(1), 21, 25));
        assert!(could_read(&evs, None, 1, 5));
        // Stale: write 2 ended before the read began.
        assert!(!could_read(&evs, Some(1), 50, 60));
        // Zeros after a write ended: lost.
        assert!(!could_read(&evs, None, 21, 25));
        // From the future: write 2 began after the read ended.
        assert!(!could_read(&evs, Some(2), 21, 25));
        // During write 2 either value.
        assert!(could_read(&evs, Some(1), 35, 36));
        assert!(could_read(&evs, Some(2), 35, 36));
        assert!(could_end_with(&evs, Some(2)));
        assert!(!could_end_with(&evs, Some(1)));
        assert!(!could_end_with(&evs, Some(3)));
    }

    #[test]
    fn overlapping_writes_may_end_either_way() {
        let evs = [INIT, ev(10, 30, Effect::Set(1)), ev(20, 40, Effect::Set(2))];
        assert!(could_end_with(&evs, Some(1)));
        assert!(could_end_with(&evs, Some(2)));
        assert!(!could_end_with(&evs, None));
    }

    #[test]
    fn truncate_clears_and_is_ordered_like_a_write() {
        let evs = [INIT, ev(10, 20, Effect::Set(1)), ev(30, 40, Effect::Clear)];
        assert!(could_end_with(&evs, None));
        assert!(!could_end_with(&evs, Some(1)));
        let overlapping = [INIT, ev(10, 35, Effect::Set(1)), ev(30, 40, Effect::Clear)];
        assert!(could_end_with(&overlapping, Some(1)));
    }

    #[test]
    fn unknown_effects() {
        let evs = [
            ev(0, 0, Effect::Set(7)),
            ev(10, 20, Effect::Unknown),
            ev(30, 40, Effect::SetUnknown),
        ];
        assert!(could_end_with(&evs, Some(9)));
        assert!(!could_end_with(&evs, None));
        let evs = [ev(0, 0, Effect::Set(7)), ev(10, 20, Effect::Unknown)];
        assert!(could_end_with(&evs, None));
        assert!(could_end_with(&evs, Some(7)));
        let evs = [ev(0, 0, Effect::Set(7)), ev(10, 20, Effect::Clear)];
        assert!(!could_end_with(&evs, Some(7)));
    }

    fn sz(start: u64, end: u64, size: u64, truncate: bool) -> SizeEv {
        SizeEv {
            start,
            end,
            size,
            truncate,
        }
    }

    #[test]
    fn sizes() {
        let init = sz(0, 0, 0, true);
        // A write to 8, then a truncate to 4: 4; a write after that to 6: 6.
        let evs = [init, sz(10, 20, 8, false), sz(30, 40, 4, true)];
        assert!(size_could_be(&evs, 4));
        assert!(!size_could_be(&evs, 8));
        let evs = [
            init,
            sz(10, 20, 8, false),
            sz(30, 40, 4, true),
            sz(50, 60, 6, false),
        ];
        assert!(size_could_be(&evs, 6));
        assert!(!size_could_be(&evs, 4));
        assert!(!size_could_be(&evs, 8));
        // A write overlapping the truncate may land before or after it.
        let evs = [init, sz(10, 35, 8, false), sz(30, 40, 4, true)];
        assert!(size_could_be(&evs, 4));
        assert!(size_could_be(&evs, 8));
        // A write never shrinks a file.
        let evs = [sz(0, 0, 12, true), sz(10, 20, 8, false)];
        assert!(size_could_be(&evs, 12));
        assert!(!size_could_be(&evs, 8));
    }
}
