//! What an operator set for a tier through `.tierfs/control` (`tierfs ctl`): whether it
//! takes new data (paused, draining, drained), its weight in Eq. 1, and a drain's
//! progress.
//!
//! Apart from [`crate::tier::Tier::is_paused`], which the adaptation sets and clears from
//! the tier's measured bandwidth: an operator's pause is never lifted by a measurement,
//! and a measurement never pauses what the operator resumed. The state lives in memory for
//! the mount's life; a new mount starts with every tier active at weight 1 (the config is
//! the place for what should last).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Where a tier stands with its operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminState {
    /// Takes new data as its share says (the state at mount).
    Active,
    /// Takes no new data; what it holds stays readable and writable where it is.
    Paused,
    /// Takes no new data, and its files are being moved to the other tiers.
    Draining,
    /// A drain finished: it holds no file and takes no new data until resumed.
    Drained,
}

impl AdminState {
    /// Every state, in the order the metrics list them.
    pub const ALL: [AdminState; 4] = [
        AdminState::Active,
        AdminState::Paused,
        AdminState::Draining,
        AdminState::Drained,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AdminState::Active => "active",
            AdminState::Paused => "paused",
            AdminState::Draining => "draining",
            AdminState::Drained => "drained",
        }
    }

    /// Whether placement may give the tier new data.
    pub fn takes_new_data(self) -> bool {
        self == AdminState::Active
    }

    fn from_u8(v: u8) -> AdminState {
        match v {
            1 => AdminState::Paused,
            2 => AdminState::Draining,
            3 => AdminState::Drained,
            _ => AdminState::Active,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            AdminState::Active => 0,
            AdminState::Paused => 1,
            AdminState::Draining => 2,
            AdminState::Drained => 3,
        }
    }
}

/// One tier's operator state and a drain's counters; lock-free, read by placement on
/// every create.
#[derive(Debug)]
pub struct TierAdmin {
    state: AtomicU8,
    /// `f64` bits; 1.0 at mount.
    weight: AtomicU64,
    /// Since the last `drain`: files and bytes moved off, moves that failed (and are
    /// retried), and the last failure.
    pub drained_files: AtomicU64,
    pub drained_bytes: AtomicU64,
    pub drain_failures: AtomicU64,
    pub drain_error: parking_lot::Mutex<Option<String>>,
}

impl Default for TierAdmin {
    fn default() -> Self {
        TierAdmin {
            state: AtomicU8::new(AdminState::Active.to_u8()),
            weight: AtomicU64::new(1.0f64.to_bits()),
            drained_files: AtomicU64::new(0),
            drained_bytes: AtomicU64::new(0),
            drain_failures: AtomicU64::new(0),
            drain_error: parking_lot::Mutex::new(None),
        }
    }
}

impl TierAdmin {
    pub fn state(&self) -> AdminState {
        AdminState::from_u8(self.state.load(Ordering::Acquire))
    }

    pub fn set_state(&self, s: AdminState) {
        self.state.store(s.to_u8(), Ordering::Release);
    }

    /// Sets `to` only if the state is still `from` (a drain that finished while an
    /// operator paused or resumed the tier must not overwrite that).
    pub fn replace_state(&self, from: AdminState, to: AdminState) -> bool {
        self.state
            .compare_exchange(
                from.to_u8(),
                to.to_u8(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    pub fn weight(&self) -> f64 {
        f64::from_bits(self.weight.load(Ordering::Relaxed))
    }

    pub fn set_weight(&self, w: f64) {
        debug_assert!(w.is_finite() && (0.0..=crate::control::MAX_WEIGHT).contains(&w));
        self.weight.store(w.to_bits(), Ordering::Relaxed);
    }

    /// A new drain starts its counters from zero.
    pub fn reset_drain(&self) {
        self.drained_files.store(0, Ordering::Relaxed);
        self.drained_bytes.store(0, Ordering::Relaxed);
        self.drain_failures.store(0, Ordering::Relaxed);
        *self.drain_error.lock() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_only_active_takes_data() {
        let a = TierAdmin::default();
        assert_eq!(a.state(), AdminState::Active);
        assert_eq!(a.weight(), 1.0);
        for s in AdminState::ALL.into_iter().rev() {
            a.set_state(s);
            assert_eq!(a.state(), s);
            assert_eq!(s.takes_new_data(), s == AdminState::Active, "{}", s.name());
        }
    }

    #[test]
    fn a_finished_drain_does_not_overwrite_a_resume() {
        let a = TierAdmin::default();
        a.set_state(AdminState::Draining);
        a.set_state(AdminState::Active);
        assert!(!a.replace_state(AdminState::Draining, AdminState::Drained));
        assert_eq!(a.state(), AdminState::Active);
        a.set_state(AdminState::Draining);
        assert!(a.replace_state(AdminState::Draining, AdminState::Drained));
        assert_eq!(a.state(), AdminState::Drained);
    }
}
