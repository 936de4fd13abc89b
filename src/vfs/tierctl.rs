//! Live control of a mount's tiers: the operator's `pause`, `resume`, `drain`, `weight`
//! and `status` of `.tierfs/control` (parsed in [`crate::control`]), and the drain that
//! moves a tier's files to the others.
//!
//! A write's tier commands are checked first, in order, against the states the earlier
//! ones leave, so a write that would leave no tier taking new data is refused whole before
//! anything changes; one lock serializes control writes, so two writers cannot each pause
//! a different last tier. What the commands set is on each tier ([`crate::tier::admin`]);
//! placement reads it on every create (`Tier::takes_new_data`) and the shares are
//! recomputed at once (`adapt::recompute_shares`).
//!
//! A drain reuses the eager move (`data::migrate::relocate`, off a tier as for a full or
//! failed one): the daemon's drain thread calls [`drain_step`] about twice a second, which
//! moves every file with a piece on each draining tier, one after another, at the
//! migration's I/O class (behind the application's own requests). A file that cannot move
//! now (written past the daemon, no room) is counted as a failure, named in the status,
//! and tried again on the next pass. While a tier drains no new open of its files goes to
//! kernel passthrough or the direct path (their pieces would be held out of reach), and
//! when no file is left on it the tier is `drained`: it takes no new data until resumed.

use crate::control::TierCommand;
use crate::data::migrate;
use crate::error::{Error, Result};
use crate::inodes::file::FileNode;
use crate::inodes::tree::NodeData;
use crate::tier::admin::AdminState;
use crate::tier::Tier;
use crate::tierio::Piece;
use crate::units::fmt_bytes;
use crate::vfs::backing;
use crate::vfs::state::TierFs;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Serializes control writes that hold tier commands, from their check to their effect.
static OPS: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// Held while a control write's tier commands are checked and applied.
pub(crate) fn serialize() -> parking_lot::MutexGuard<'static, ()> {
    OPS.lock()
}

/// A refusal of line `line`, with the errno the write fails with.
fn refuse(errno: i32, line: usize, reason: String) -> Error {
    Error::Refused {
        errno,
        reason: format!("line {line}: {reason}"),
    }
}

/// Whether a tier takes new data, with `state` for its operator state.
fn taker(t: &Tier, state: AdminState) -> bool {
    t.is_healthy() && !t.missing && state.takes_new_data()
}

/// The index of the tier named `name`; ENOENT naming the mount's tiers if none.
fn tier_index(fs: &TierFs, line: usize, name: &str) -> Result<usize> {
    fs.tiers.iter().position(|t| t.name == name).ok_or_else(|| {
        let names: Vec<&str> = fs.tiers.iter().map(|t| t.name.as_str()).collect();
        refuse(
            libc::ENOENT,
            line,
            format!(
                "no tier '{}' in this mount (its tiers: {})",
                name.escape_debug(),
                names.join(", ")
            ),
        )
    })
}

/// Checks a write's tier commands in order, each against the states the ones before it
/// leave; the tier each names (None for `status`). Nothing changes here.
pub(crate) fn plan(fs: &TierFs, cmds: &[(usize, &TierCommand)]) -> Result<Vec<Option<usize>>> {
    let mut states: Vec<AdminState> = fs.tiers.iter().map(|t| t.admin.state()).collect();
    let mut out = Vec::with_capacity(cmds.len());
    for (line, cmd) in cmds {
        let line = *line;
        let name = match cmd {
            TierCommand::Pause(n)
            | TierCommand::Resume(n)
            | TierCommand::Drain(n)
            | TierCommand::Weight(n, _) => n,
            TierCommand::Status => {
                out.push(None);
                continue;
            }
        };
        let i = tier_index(fs, line, name)?;
        let t = &fs.tiers[i];
        let others = (0..fs.tiers.len()).any(|j| j != i && taker(&fs.tiers[j], states[j]));
        match cmd {
            TierCommand::Pause(_) if taker(t, states[i]) && !others => {
                return Err(refuse(
                    libc::EBUSY,
                    line,
                    format!(
                        "cannot pause tier '{name}': it is the last tier taking new data \
                         (resume another tier first)"
                    ),
                ))
            }
            TierCommand::Pause(_) => {
                if states[i] != AdminState::Drained {
                    states[i] = AdminState::Paused;
                }
            }
            TierCommand::Drain(_) => {
                check_drain(fs, &states, line, i, others)?;
                states[i] = AdminState::Draining;
            }
            TierCommand::Resume(_) => states[i] = AdminState::Active,
            TierCommand::Weight(..) | TierCommand::Status => {}
        }
        out.push(Some(i));
    }
    Ok(out)
}

/// Whether tier `i` can be drained now: its files readable, another tier taking new data,
/// and room for its bytes on those.
fn check_drain(
    fs: &TierFs,
    states: &[AdminState],
    line: usize,
    i: usize,
    others: bool,
) -> Result<()> {
    let t = &fs.tiers[i];
    if t.missing {
        return Err(refuse(
            libc::EBUSY,
            line,
            format!(
                "cannot drain tier '{}': it is missing from this (degraded) mount, so its \
                 files cannot be read to move them",
                t.name
            ),
        ));
    }
    if !others {
        return Err(refuse(
            libc::EBUSY,
            line,
            format!(
                "cannot drain tier '{}': no other tier takes new data (resume one first)",
                t.name
            ),
        ));
    }
    let bytes = t.counters.used.load(Ordering::Relaxed);
    let room: u64 = fs
        .tiers
        .iter()
        .enumerate()
        .filter(|(j, u)| *j != i && taker(u, states[*j]))
        .map(|(_, u)| u.room())
        .sum();
    if bytes > room {
        return Err(refuse(
            libc::ENOSPC,
            line,
            format!(
                "cannot drain tier '{}': its {} do not fit in the {} the other tiers have free",
                t.name,
                fmt_bytes(bytes),
                fmt_bytes(room)
            ),
        ));
    }
    Ok(())
}

/// Runs one checked tier command (the write's lock held); its reply line(s).
pub(crate) fn apply(fs: &TierFs, cmd: &TierCommand, tier: Option<usize>) -> String {
    let Some(i) = tier else {
        return status(fs);
    };
    let t = &fs.tiers[i];
    let held = held_text(t);
    let reply = match cmd {
        TierCommand::Pause(_) => {
            if t.admin.state() != AdminState::Drained {
                t.admin.set_state(AdminState::Paused);
            }
            format!(
                "tier '{}' {}: no new data goes to it; its {held} stay readable and writable \
                 where they are",
                t.name,
                t.admin.state().name()
            )
        }
        TierCommand::Resume(_) => {
            t.admin.set_state(AdminState::Active);
            format!("tier '{}' resumed: it takes new data again", t.name)
        }
        TierCommand::Drain(_) => {
            if t.admin.state() != AdminState::Draining {
                t.admin.reset_drain();
                t.admin.set_state(AdminState::Draining);
            }
            format!(
                "tier '{}' draining: no new data goes to it, and its {held} move to the other \
                 tiers (`status` shows what is left)",
                t.name
            )
        }
        TierCommand::Weight(_, w) => {
            t.admin.set_weight(*w);
            format!("tier '{}' weight {w}", t.name)
        }
        TierCommand::Status => unreachable!("status names no tier"),
    };
    log::info!("control: {reply}");
    crate::vfs::adapt::recompute_shares(fs);
    let share = fs.placer.shares()[i];
    format!(
        "ok {reply} (its share of new data now {:.1}%)\n",
        share * 100.0
    )
}

/// "N files (B)" a tier holds now.
fn held_text(t: &Tier) -> String {
    let files = t.counters.files.load(Ordering::Relaxed);
    format!(
        "{files} file{} ({})",
        if files == 1 { "" } else { "s" },
        fmt_bytes(t.counters.used.load(Ordering::Relaxed))
    )
}

/// The `status` reply: `ok`, then one `tier NAME key=value ...` line per tier. `files`
/// and `bytes` are what the tier holds now: for a draining tier, what is left to move.
pub(crate) fn status(fs: &TierFs) -> String {
    let shares = fs.placer.shares();
    let mut out = format!("ok {} tiers\n", fs.tiers.len());
    for (t, share) in fs.tiers.iter().zip(shares) {
        let a = &t.admin;
        out.push_str(&format!(
            "tier {} state={} weight={} share={:.1}% health={} files={} bytes={}",
            t.name,
            a.state().name(),
            a.weight(),
            share * 100.0,
            t.state(),
            t.counters.files.load(Ordering::Relaxed),
            t.counters.used.load(Ordering::Relaxed),
        ));
        if matches!(a.state(), AdminState::Draining | AdminState::Drained) {
            out.push_str(&format!(
                " moved_files={} moved_bytes={} failures={}",
                a.drained_files.load(Ordering::Relaxed),
                a.drained_bytes.load(Ordering::Relaxed),
                a.drain_failures.load(Ordering::Relaxed),
            ));
            if let Some(e) = &*a.drain_error.lock() {
                out.push_str(&format!(" last_error={e:?}"));
            }
        }
        out.push('\n');
    }
    out
}

/// What a call of [`drain_step`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DrainStep {
    /// Tiers that were draining when it began.
    pub draining: usize,
    /// Files it moved off them.
    pub moved: u64,
    /// Moves that failed (tried again on the next step).
    pub failed: u64,
}

/// One pass over each draining tier: every file with a piece on it is moved off, while
/// `keep_going` says so (the daemon's stop); a tier found holding no file is `drained`.
/// `forget_if_gone` is what a release does last (`vfs::files::drop_if_gone`, passed in by
/// the façade: this module is below the open-file operations): a file unlinked and
/// forgotten by the kernel while its move held it open goes when the move lets go.
pub fn drain_step(
    fs: &TierFs,
    keep_going: &dyn Fn() -> bool,
    forget_if_gone: &dyn Fn(u64),
) -> DrainStep {
    let mut step = DrainStep::default();
    for t in &fs.tiers {
        if t.admin.state() != AdminState::Draining {
            continue;
        }
        step.draining += 1;
        let files = files_on(fs, t.index);
        if files.is_empty() {
            if t.admin
                .replace_state(AdminState::Draining, AdminState::Drained)
            {
                log::info!(
                    "tier '{}' drained: {} files ({}) moved off; it takes no new data until \
                     resumed",
                    t.name,
                    t.admin.drained_files.load(Ordering::Relaxed),
                    fmt_bytes(t.admin.drained_bytes.load(Ordering::Relaxed))
                );
            }
            continue;
        }
        for (ino, node) in files {
            if !keep_going() || t.admin.state() != AdminState::Draining {
                return step;
            }
            // The bytes of it on this tier: all of a whole file, its stripes' of a striped one.
            let bytes = node.layout().piece_len(t.index, node.size());
            let r = hold(fs, ino, &node).and_then(|()| {
                let r = migrate::relocate(&fs.parts(), ino, &node, Some(t.index), 0);
                if let_go(&node) {
                    forget_if_gone(ino);
                }
                r
            });
            if r.is_ok() && !on_tier(&node, t.index) {
                step.moved += 1;
                t.admin.drained_files.fetch_add(1, Ordering::Relaxed);
                t.admin.drained_bytes.fetch_add(bytes, Ordering::Relaxed);
            } else if let Err(e) = r {
                step.failed += 1;
                let what = match fs.tree.read().rel(ino) {
                    Some(rel) => format!("/{}: {e}", crate::stats::escape_path(&rel)),
                    None => format!("(inode {ino}, deleted): {e}"),
                };
                log::warn!(
                    "drain of tier '{}': cannot move {what}; tried again",
                    t.name
                );
                t.admin.drain_failures.fetch_add(1, Ordering::Relaxed);
                *t.admin.drain_error.lock() = Some(what);
            }
        }
    }
    step
}

/// Counts one open of the file for its move, opening its pieces if it has none open (a
/// closed file), as an open does: a release racing with the move then leaves them be.
/// [`let_go`] undoes it.
fn hold(fs: &TierFs, ino: u64, node: &FileNode) -> Result<()> {
    let tree = fs.tree.read();
    let mut st = node.state.write();
    if st.opens == 0 && st.cache.is_none() && st.migration.is_none() {
        for t in st.layout.tiers() {
            if fs.tiers[t].missing {
                // The move's read of it answers the missing tier's EIO.
                continue;
            }
            let p = backing::piece_path(fs, &tree, ino, t)?;
            let piece = Piece::open_in(&fs.tiers[t].root, &p, fs.tiers[t].direct_io)
                .map_err(|e| backing::tier_err(fs, t, "open", &p, e))?;
            st.pieces[t] = Some(Arc::new(piece));
        }
    }
    st.opens += 1;
    Ok(())
}

/// Undoes [`hold`]: the last open gone, the pieces close (the new ones after a move).
/// Whether it was the last open (then the caller forgets the file if it is gone, as a
/// release would).
fn let_go(node: &FileNode) -> bool {
    let mut st = node.state.write();
    st.opens = st.opens.saturating_sub(1);
    let last = st.opens == 0;
    if last && st.cache.is_none() && st.migration.is_none() {
        st.pieces.iter_mut().for_each(|p| *p = None);
    }
    last
}

/// Whether any piece of the file (or of its move under way) is on tier `tier`.
fn on_tier(node: &FileNode, tier: usize) -> bool {
    let st = node.state.read();
    st.layout.tiers().contains(&tier)
        || st
            .migration
            .as_ref()
            .is_some_and(|m| m.layout.tiers().contains(&tier))
}

/// The files with a piece on tier `tier` (those unlinked but still open too). Gathered
/// under the tree lock, then checked without it: a file that is moving holds its own lock
/// for as long as its copy takes.
fn files_on(fs: &TierFs, tier: usize) -> Vec<(u64, Arc<FileNode>)> {
    let all: Vec<(u64, Arc<FileNode>)> = {
        let tree = fs.tree.read();
        tree.nodes
            .iter()
            .filter_map(|(ino, n)| match &n.data {
                NodeData::File(f) => Some((*ino, f.clone())),
                _ => None,
            })
            .collect()
    };
    let mut on: Vec<(u64, Arc<FileNode>)> =
        all.into_iter().filter(|(_, f)| on_tier(f, tier)).collect();
    on.sort_by_key(|(ino, _)| *ino);
    on
}
