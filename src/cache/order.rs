//! The learned access order of one directory: which files a step reads, in which order,
//! and which it will read next.
//!
//! DeepSpeed reads each rank's swap files in the same order every step (and a patched one
//! alternates ascending and descending). The order is learned from read-opens alone: a
//! *cycle* is the sequence of distinct files read between two reads of the same file, and
//! the last complete cycle is the reference. The current position in it, and the direction
//! the reader walks it, give both the files to prefetch next and, for every cached file,
//! how many reads away its next use is: the cache keeps the files needed soonest, which on
//! a cyclic scan larger than the cache is the head of the next pass (where LRU would keep
//! exactly the files needed last).

use crate::control::OrderHint;
use std::collections::{HashMap, HashSet};

/// Cycles shorter than this are not taken as the reference: a file re-read on its own
/// (a tool, a retry) must not erase a learned step.
const MIN_CYCLE: usize = 2;

/// What is known about one directory's read order.
#[derive(Debug, Clone)]
pub struct DirOrder {
    /// The last complete cycle, in the order it was read.
    prev: Vec<u64>,
    pos: HashMap<u64, usize>,
    /// The cycle being read now.
    cur: Vec<u64>,
    cur_set: HashSet<u64>,
    /// The last cycle ran opposite to the one before it.
    alternating: bool,
    /// Orientation of `prev` relative to the first cycle learned (+1 or -1), for the
    /// `ascending`/`descending` hints.
    orient: i8,
    /// Direction the current cycle walks `prev` (+1 forward, -1 backward).
    dir: i8,
    /// Index in `prev` of the file read last in this cycle.
    last: Option<usize>,
    hint: Option<OrderHint>,
    /// A `step` command: the next read starts a new cycle.
    step_mark: bool,
    cycles: u64,
    reads: u64,
}

/// A snapshot for `.tierfs/cache`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OrderView {
    /// "unknown" until one cycle was seen; then "ascending" (each step repeats the first
    /// order), "descending", or "alternate".
    pub mode: &'static str,
    pub hint: Option<OrderHint>,
    pub cycle_len: usize,
    pub cycles: u64,
    pub reads: u64,
    /// Position in the reference cycle of the last read, and the direction walked.
    pub position: Option<usize>,
    pub direction: i8,
}

impl Default for DirOrder {
    fn default() -> DirOrder {
        DirOrder {
            prev: Vec::new(),
            pos: HashMap::new(),
            cur: Vec::new(),
            cur_set: HashSet::new(),
            alternating: false,
            orient: 1,
            dir: 1,
            last: None,
            hint: None,
            step_mark: false,
            cycles: 0,
            reads: 0,
        }
    }
}

impl DirOrder {
    pub fn new() -> DirOrder {
        DirOrder::default()
    }

    /// Records a read-open of `ino`; `dup` when the file is already open for reading (several
    /// threads of one reader open it together): that is the same read, not a new one.
    pub fn access(&mut self, ino: u64, dup: bool) {
        self.reads += 1;
        if dup {
            return;
        }
        if self.step_mark || self.cur_set.contains(&ino) {
            self.close_cycle();
        }
        self.cur.push(ino);
        self.cur_set.insert(ino);
        let Some(&idx) = self.pos.get(&ino) else {
            return;
        };
        self.dir = match self.last {
            Some(l) if l != idx => {
                if idx > l {
                    1
                } else {
                    -1
                }
            }
            Some(_) => self.dir,
            None => self.start_dir(),
        };
        self.last = Some(idx);
    }

    /// A `step` command: the next read begins a cycle.
    pub fn mark_step(&mut self) {
        self.step_mark = true;
    }

    pub fn set_hint(&mut self, hint: OrderHint) {
        self.hint = (hint != OrderHint::Learned).then_some(hint);
    }

    fn close_cycle(&mut self) {
        self.step_mark = false;
        let cur = std::mem::take(&mut self.cur);
        self.cur_set.clear();
        self.last = None;
        if cur.len() < MIN_CYCLE {
            return;
        }
        self.cycles += 1;
        // Was it walked backwards through the reference? Judge by where its ends sit.
        let ends = (
            cur.first().and_then(|f| self.pos.get(f)),
            cur.last().and_then(|l| self.pos.get(l)),
        );
        let reversed = matches!(ends, (Some(a), Some(b)) if b < a);
        if !self.prev.is_empty() {
            self.alternating = reversed;
            if reversed {
                self.orient = -self.orient;
            }
        }
        self.pos = cur.iter().enumerate().map(|(i, &f)| (f, i)).collect();
        self.prev = cur;
    }

    /// The direction (in `prev`'s index space) the next cycle is expected to walk.
    fn start_dir(&self) -> i8 {
        match self.hint {
            Some(OrderHint::Alternate) => -1,
            Some(OrderHint::Ascending) => self.orient,
            Some(OrderHint::Descending) => -self.orient,
            _ if self.alternating => -1,
            _ => 1,
        }
    }

    /// Direction of the cycle after the current one, in `prev`'s index space.
    fn next_dir(&self) -> i8 {
        let cur = if self.last.is_some() {
            self.dir
        } else {
            self.start_dir()
        };
        match self.hint {
            Some(OrderHint::Ascending) => self.orient,
            Some(OrderHint::Descending) => -self.orient,
            Some(OrderHint::Alternate) => -cur,
            _ if self.alternating => -cur,
            _ => cur,
        }
    }

    /// Reads until `ino` is read again, if the order knows it (1 = the very next read).
    pub fn distance(&self, ino: u64) -> Option<u64> {
        let q = *self.pos.get(&ino)? as i64;
        let n = self.prev.len() as i64;
        let (rem, here) = match self.last {
            Some(l) => {
                let l = l as i64;
                let d = self.dir as i64;
                let rem = if d > 0 { n - 1 - l } else { l };
                let ahead = (q - l) * d;
                (rem, (ahead > 0).then_some(ahead))
            }
            // At a cycle's start the whole cycle is ahead.
            None => {
                let s = self.start_dir();
                return Some(if s > 0 { q + 1 } else { n - q } as u64);
            }
        };
        if let Some(a) = here {
            return Some(a as u64);
        }
        let into_next = if self.next_dir() > 0 { q + 1 } else { n - q };
        Some((rem + into_next) as u64)
    }

    /// The next `k` files the order predicts, soonest first (wrapping into the next cycle).
    pub fn predict(&self, k: usize) -> Vec<u64> {
        let n = self.prev.len();
        if n == 0 || k == 0 {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(k);
        let push_walk = |start: Option<usize>, dir: i8, out: &mut Vec<u64>| {
            let idx: Box<dyn Iterator<Item = usize>> = match (start, dir > 0) {
                (Some(l), true) => Box::new(l + 1..n),
                (Some(l), false) => Box::new((0..l).rev()),
                (None, true) => Box::new(0..n),
                (None, false) => Box::new((0..n).rev()),
            };
            for i in idx {
                if out.len() >= k {
                    break;
                }
                if !self.cur_set.contains(&self.prev[i]) || start.is_none() {
                    out.push(self.prev[i]);
                }
            }
        };
        match self.last {
            Some(l) => {
                push_walk(Some(l), self.dir, &mut out);
                if out.len() < k {
                    push_walk(None, self.next_dir(), &mut out);
                }
            }
            None => push_walk(None, self.start_dir(), &mut out),
        }
        out.truncate(k);
        out
    }

    pub fn view(&self) -> OrderView {
        let mode = if self.prev.is_empty() {
            "unknown"
        } else if self.alternating {
            "alternate"
        } else if self.orient < 0 {
            "descending"
        } else {
            "ascending"
        };
        OrderView {
            mode,
            hint: self.hint,
            cycle_len: self.prev.len(),
            cycles: self.cycles,
            reads: self.reads,
            position: self.last,
            direction: self.dir,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(o: &mut DirOrder, files: impl IntoIterator<Item = u64>) {
        for f in files {
            o.access(f, false);
        }
    }

    #[test]
    fn learns_a_repeating_order_and_predicts_the_next_files() {
        let mut o = DirOrder::new();
        walk(&mut o, 1..=8);
        assert!(o.predict(3).is_empty(), "nothing known before a cycle ends");
        walk(&mut o, 1..=3);
        assert_eq!(o.view().mode, "ascending");
        assert_eq!(o.predict(3), vec![4, 5, 6]);
        assert_eq!(o.distance(4), Some(1));
        assert_eq!(o.distance(8), Some(5));
        // Read already this cycle: next needed in the following one, head first.
        assert_eq!(o.distance(1), Some(5 + 1));
        assert_eq!(o.distance(3), Some(5 + 3));
        assert_eq!(o.distance(99), None);
        walk(&mut o, 4..=8);
        assert_eq!(o.predict(2), vec![1, 2], "wraps into the next step");
    }

    #[test]
    fn learns_alternating_order() {
        let mut o = DirOrder::new();
        walk(&mut o, 1..=6);
        walk(&mut o, (1..=6).rev());
        walk(&mut o, [1, 2]);
        assert_eq!(o.view().mode, "alternate");
        // The step after this one runs backwards: 6 is read right after this step's end.
        assert_eq!(o.predict(2), vec![3, 4]);
        assert_eq!(
            o.distance(6),
            Some(4),
            "3,4,5,6 then 6 again: alternating tail"
        );
        assert_eq!(o.distance(1), Some(4 + 6));
        walk(&mut o, 3..=6);
        assert_eq!(o.predict(3), vec![6, 5, 4]);
    }

    #[test]
    fn duplicate_opens_do_not_break_a_cycle() {
        let mut o = DirOrder::new();
        for (f, dup) in [
            (1, false),
            (1, true),
            (2, false),
            (2, true),
            (3, false),
            (1, false),
            (1, true),
            (2, false),
        ] {
            o.access(f, dup);
        }
        assert_eq!(o.view().cycle_len, 3);
        assert_eq!(o.predict(1), vec![3]);
    }

    #[test]
    fn hints_refine_the_learned_order() {
        let mut o = DirOrder::new();
        walk(&mut o, 1..=5);
        o.set_hint(OrderHint::Alternate);
        walk(&mut o, 1..=5);
        // Alternate: the next step starts from 5 going down.
        assert_eq!(o.predict(2), vec![5, 4]);
        o.set_hint(OrderHint::Descending);
        assert_eq!(o.predict(2), vec![5, 4]);
        o.set_hint(OrderHint::Learned);
        assert_eq!(o.predict(2), vec![1, 2]);
        // `step` closes a cycle without a repeat.
        let mut s = DirOrder::new();
        walk(&mut s, [10, 11, 12]);
        s.mark_step();
        walk(&mut s, [10]);
        assert_eq!(s.view().cycles, 1);
        assert_eq!(s.predict(2), vec![11, 12]);
    }
}
