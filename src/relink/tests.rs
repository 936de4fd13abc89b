//! The journals and the re-link rule, tested: journals round-trip and a torn one is refused;
//! the verdict for each state a crash can leave a move in (with several names, and a one-name
//! file's keeps); `finish` on real folders, including a temporary that cannot be stat-ed.

use super::journal::{hex, MAGIC};
use super::*;
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

/// Primary `d/a` moves from tiers 0 and 1 (old pieces 10, 11) to tiers 1 and 2 (new
/// pieces 21, 22); other names `b` and one with a newline and a non-UTF-8 byte.
fn journal() -> Journal {
    Journal {
        primary: "d/a".into(),
        names: vec![
            "b".into(),
            PathBuf::from(OsString::from_vec(b"c\nx\xff".to_vec())),
        ],
        new: vec![(1, 21), (2, 22)],
        old: vec![(0, 10), (1, 11)],
        keeps: false,
        pending: vec![],
    }
}

#[test]
fn the_journal_round_trips_and_a_torn_one_is_refused() {
    let j = journal();
    let s = j.encode();
    assert_eq!(Journal::decode(&s), Some(j));
    let torn = &s[..s.len() - 4];
    assert_eq!(Journal::decode(torn), None);
    assert_eq!(Journal::decode("garbage"), None);
    assert_eq!(Journal::decode(&s.replace("new 1 21", "new x 21")), None);
}

type State = HashMap<(Option<usize>, usize), u64>;

fn plan_of(j: &Journal, state: &State) -> Verdict {
    plan(j, |n, t| state.get(&(n, t)).copied())
}

#[test]
fn a_move_cut_short_after_the_primary_relinks_every_name() {
    let j = journal();
    // The primary's old piece on tier 0 is still there; b is done on tier 1 and has
    // its old piece on tier 0; c has its old pieces only.
    let state: State = [
        ((None, 0), 10),
        ((None, 1), 21),
        ((None, 2), 22),
        ((Some(0), 0), 10),
        ((Some(0), 1), 21),
        ((Some(1), 0), 10),
        ((Some(1), 1), 11),
    ]
    .into();
    let Verdict::Finish(p) = plan_of(&j, &state) else {
        panic!("not finished")
    };
    assert_eq!(
        p.steps,
        vec![
            Step::Link { name: 0, tier: 2 },
            Step::Unlink { name: 0, tier: 0 },
            Step::Link { name: 1, tier: 1 },
            Step::Link { name: 1, tier: 2 },
            Step::Unlink { name: 1, tier: 0 },
            Step::UnlinkPrimary { tier: 0 },
        ]
    );
    assert!(p.foreign.is_empty());
}

#[test]
fn a_move_not_begun_or_torn_is_not_finished() {
    let j = journal();
    // The primary holds its old pieces: the move never took effect.
    let state: State = [((None, 0), 10), ((None, 1), 11), ((Some(0), 1), 11)].into();
    assert_eq!(plan_of(&j, &state), Verdict::NotStarted(Plan::default()));
    // Neither old nor new pieces (the primary moved since): cannot be settled.
    let state: State = [((None, 1), 31), ((None, 2), 32)].into();
    assert_eq!(plan_of(&j, &state), Verdict::Unsettled);
    // The primary gone: not "never took effect" either.
    let state: State = [((Some(0), 0), 10), ((Some(0), 1), 11)].into();
    assert_eq!(plan_of(&j, &state), Verdict::Unsettled);
    // New on tier 1, not on tier 2: torn between the primary's own renames, and no
    // other name holds the old piece it lost on tier 1.
    let state: State = [((None, 0), 10), ((None, 1), 21)].into();
    assert_eq!(plan_of(&j, &state), Verdict::Unsettled);
}

#[test]
fn a_move_torn_between_the_primarys_pieces_is_undone_from_the_other_names() {
    let j = journal();
    let names_old = [
        ((Some(0), 0), 10),
        ((Some(0), 1), 11),
        ((Some(1), 0), 10),
        ((Some(1), 1), 11),
    ];
    // The new piece renamed in on tier 1 (over the old one), not yet on tier 2.
    let state: State = names_old
        .into_iter()
        .chain([((None, 0), 10), ((None, 1), 21)])
        .collect();
    let Verdict::RollBack(p) = plan_of(&j, &state) else {
        panic!("not undone")
    };
    assert_eq!(p.steps, vec![Step::RestorePrimary { name: 0, tier: 1 }]);
    // On tier 2 first (a tier the old layout did not use): that entry goes.
    let state: State = names_old
        .into_iter()
        .chain([((None, 0), 10), ((None, 1), 11), ((None, 2), 22)])
        .collect();
    let Verdict::RollBack(p) = plan_of(&j, &state) else {
        panic!("not undone")
    };
    assert_eq!(p.steps, vec![Step::UnlinkPrimary { tier: 2 }]);
    // An entry of the primary that is neither old nor new: not the move's to undo.
    let state: State = names_old
        .into_iter()
        .chain([((None, 0), 77), ((None, 1), 21)])
        .collect();
    assert_eq!(plan_of(&j, &state), Verdict::Unsettled);
}

/// The same tears with the move's temporaries still where the journal says: finished
/// instead (each temporary renamed in first, then every name re-linked), as the new
/// pieces hold writes the old ones never saw. A temporary that is not the new piece
/// (gone, or another file since), or a primary entry that is neither old nor new, and
/// the rule is the one above.
#[test]
fn a_torn_move_whose_temporaries_are_left_is_finished_from_them() {
    let j = Journal {
        pending: vec![(1, "m/t1".into()), (2, "m/t2".into())],
        ..journal()
    };
    let names_old = [
        ((Some(0), 0), 10),
        ((Some(0), 1), 11),
        ((Some(1), 0), 10),
        ((Some(1), 1), 11),
    ];
    let tmps = [((Some(PENDING), 1), 21), ((Some(PENDING), 2), 22)];
    let state = |primary: &[((Option<usize>, usize), u64)], tmps: &[_]| -> State {
        names_old
            .into_iter()
            .chain(primary.iter().copied())
            .chain(tmps.iter().copied())
            .collect()
    };
    let relinked = |first: Vec<Step>| {
        let mut steps = first;
        for name in 0..2 {
            steps.push(Step::Link { name, tier: 1 });
            steps.push(Step::Link { name, tier: 2 });
            steps.push(Step::Unlink { name, tier: 0 });
        }
        steps.push(Step::UnlinkPrimary { tier: 0 });
        steps
    };
    // Tier 1 renamed in; tier 2's temporary still in limbo.
    let s = state(&[((None, 0), 10), ((None, 1), 21)], &tmps[1..]);
    let Verdict::Finish(p) = plan_of(&j, &s) else {
        panic!("not finished")
    };
    assert_eq!(p.steps, relinked(vec![Step::Install { tier: 2 }]));
    // Nothing renamed yet (a crash right after the journal): both go in.
    let s = state(&[((None, 0), 10), ((None, 1), 11)], &tmps);
    let Verdict::Finish(p) = plan_of(&j, &s) else {
        panic!("not finished")
    };
    let both = vec![Step::Install { tier: 1 }, Step::Install { tier: 2 }];
    assert_eq!(p.steps, relinked(both));
    // Tier 2's temporary gone, or another file's: undone as before.
    let s = state(&[((None, 0), 10), ((None, 1), 21)], &[]);
    assert!(matches!(plan_of(&j, &s), Verdict::RollBack(_)));
    let s = state(
        &[((None, 0), 10), ((None, 1), 21)],
        &[((Some(PENDING), 2), 99)],
    );
    assert!(matches!(plan_of(&j, &s), Verdict::RollBack(_)));
    // The primary's entry on tier 2 is neither old nor new: not installed over.
    let s = state(&[((None, 0), 10), ((None, 1), 21), ((None, 2), 77)], &tmps);
    assert_eq!(plan_of(&j, &s), Verdict::Unsettled);
    // The primary gone from a tier of the old layout (unlinked or renamed since: a
    // journal that outlived its move): nothing brought back under its name.
    let s = state(&[((None, 1), 21)], &tmps);
    assert_eq!(plan_of(&j, &s), Verdict::Unsettled);
    let s = state(&[], &tmps);
    assert!(!matches!(plan_of(&j, &s), Verdict::Finish(_)));
    // A keep journal the same: installed, then the keep goes.
    let k = Journal {
        pending: j.pending.clone(),
        ..keep_journal()
    };
    let s: State = [((None, 0), 10), ((None, 1), 21), ((Some(0), 1), 11)]
        .into_iter()
        .chain(tmps[1..].iter().copied())
        .collect();
    let Verdict::Finish(p) = plan_of(&k, &s) else {
        panic!("not finished")
    };
    let want = [
        Step::Install { tier: 2 },
        Step::UnlinkPrimary { tier: 0 },
        Step::Unlink { name: 0, tier: 1 },
    ];
    assert_eq!(p.steps, want);
    // The journal carries them.
    assert_eq!(Journal::decode(&k.encode()), Some(k));
}

/// A file with one name, `d/a`, moving from tiers 0 and 1 (old pieces 10, 11) to
/// tiers 1 and 2 (new 21, 22): the move kept its old entry on tier 1 (the only one a
/// rename replaces) as `d/.tierfs-tmp-1`.
fn keep_journal() -> Journal {
    Journal {
        primary: "d/a".into(),
        names: vec![format!("d/{TMP_PREFIX}1").into()],
        keeps: true,
        pending: vec![],
        ..journal()
    }
}

#[test]
fn a_keep_journal_round_trips_and_an_old_one_still_parses() {
    let j = keep_journal();
    assert_eq!(Journal::decode(&j.encode()), Some(j));
    // As the version before keeps wrote it.
    let old = format!(
        "{MAGIC}\nprimary {}\nname 62\nnew 1 21\nold 0 10\nend\n",
        hex(b"d/a")
    );
    let j = Journal::decode(&old).expect("an old journal parses");
    assert!(!j.keeps && j.names == [PathBuf::from("b")]);
}

/// Each state a crash can leave a keep journal's move in: the keeps never become
/// names, and go on every verdict.
#[test]
fn a_keep_journal_undoes_or_finishes_the_move_and_removes_its_keeps() {
    let j = keep_journal();
    let keep = ((Some(0), 1), 11);
    let drop_keep = Step::Unlink { name: 0, tier: 1 };
    // Before the first rename: nothing to do but remove the keep.
    let state: State = [((None, 0), 10), ((None, 1), 11), keep].into();
    let want = Plan {
        steps: vec![drop_keep.clone()],
        ..Plan::default()
    };
    assert_eq!(plan_of(&j, &state), Verdict::NotStarted(want));
    // Torn after tier 1's rename: its old entry back from the keep, then the keep goes.
    let state: State = [((None, 0), 10), ((None, 1), 21), keep].into();
    let Verdict::RollBack(p) = plan_of(&j, &state) else {
        panic!("not undone")
    };
    assert_eq!(
        p.steps,
        vec![Step::RestorePrimary { name: 0, tier: 1 }, drop_keep.clone()]
    );
    // Torn after tier 2's rename, where the file had no entry: that new piece goes.
    let state: State = [((None, 0), 10), ((None, 1), 11), ((None, 2), 22), keep].into();
    let Verdict::RollBack(p) = plan_of(&j, &state) else {
        panic!("not undone")
    };
    assert_eq!(
        p.steps,
        vec![Step::UnlinkPrimary { tier: 2 }, drop_keep.clone()]
    );
    // Every rename done: the old piece on the tier left, and the keep, go; nothing is
    // linked under the keep's name.
    let done = [((None, 0), 10), ((None, 1), 21), ((None, 2), 22)];
    let state: State = done.into_iter().chain([keep]).collect();
    let Verdict::Finish(p) = plan_of(&j, &state) else {
        panic!("not finished")
    };
    assert_eq!(p.steps, vec![Step::UnlinkPrimary { tier: 0 }, drop_keep]);
    assert!(p.missing.is_empty() && p.foreign.is_empty());
    // The keep removed already (a crash after the move's own removal of it).
    let state: State = done.into();
    let Verdict::Finish(p) = plan_of(&j, &state) else {
        panic!("not finished")
    };
    assert_eq!(p.steps, vec![Step::UnlinkPrimary { tier: 0 }]);
    // Torn, and the keep lost (or never made): neither finished nor undone.
    let state: State = [((None, 0), 10), ((None, 1), 21)].into();
    assert_eq!(plan_of(&j, &state), Verdict::Unsettled);
}

#[test]
fn entries_that_are_not_the_files_and_names_removed_since_are_left_alone() {
    let j = journal();
    let state: State = [
        ((None, 1), 21),
        ((None, 2), 22),
        // b: another file's entry on tier 1 (not old, not new), new on tier 2, and
        // something else on tier 0, which is not removed.
        ((Some(0), 1), 99),
        ((Some(0), 2), 22),
        ((Some(0), 0), 98),
        // c: nothing of the file anywhere (its folder renamed since): not brought back.
        ((Some(1), 0), 97),
    ]
    .into();
    let Verdict::Finish(p) = plan_of(&j, &state) else {
        panic!("not finished")
    };
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert_eq!(p.foreign, vec![(0, 1)]);
    assert_eq!(p.missing, vec![1]);
}

/// `finish` on real folders: a torn move is undone from the other name and its journal
/// removed; a finished one is removed; one naming a tier that is not there, or torn
/// beyond undoing, is held in place; one that does not parse is set aside and never
/// listed again; one whose primary has its old pieces still (never took effect) is
/// removed.
#[test]
fn finish_removes_or_sets_aside_the_journal() {
    let d = tempfile::tempdir().unwrap();
    let roots: Vec<PathBuf> = (0..2).map(|t| d.path().join(format!("t{t}"))).collect();
    for r in &roots {
        std::fs::create_dir_all(r.join("data")).unwrap();
    }
    let ino = |t: usize, n: &str| {
        std::fs::metadata(roots[t].join("data").join(n))
            .unwrap()
            .ino()
    };
    // Old pieces of "a" on tiers 0 and 1, the name "b" linked to them; the move's new
    // piece on tier 1 is in place, on tier 0 it is not: torn.
    for r in &roots {
        std::fs::write(r.join("data/a"), b"old").unwrap();
        std::fs::hard_link(r.join("data/a"), r.join("data/b")).unwrap();
    }
    let old = vec![(0, ino(0, "a")), (1, ino(1, "a"))];
    std::fs::write(roots[1].join("data/new"), b"new").unwrap();
    std::fs::rename(roots[1].join("data/new"), roots[1].join("data/a")).unwrap();
    let j = Journal {
        primary: "a".into(),
        names: vec!["b".into()],
        new: vec![(0, 12345678), (1, ino(1, "a"))],
        old,
        keeps: false,
        pending: vec![],
    };
    let meta = d.path().join("meta");
    std::fs::create_dir(&meta).unwrap();
    let on = |t: usize| roots.get(t).map(|r| (Beneath::new(r), r.join("data")));
    let p = write(&meta, "torn", &j).unwrap();
    let done = finish(&p, on).unwrap();
    assert!(done.contains("undone"), "{done}");
    assert!(!p.exists());
    assert_eq!(std::fs::read(roots[1].join("data/a")).unwrap(), b"old");
    assert_eq!(ino(1, "a"), ino(1, "b"));
    // The same move finished on tier 1 only: b follows a there.
    std::fs::write(roots[1].join("data/new"), b"new").unwrap();
    std::fs::rename(roots[1].join("data/new"), roots[1].join("data/a")).unwrap();
    let j = Journal {
        new: vec![(1, ino(1, "a"))],
        ..j
    };
    let p = write(&meta, "done", &j).unwrap();
    let done = finish(&p, on).unwrap();
    assert!(done.contains("finished"), "{done}");
    assert_eq!(ino(1, "b"), ino(1, "a"));
    assert!(
        !roots[0].join("data/b").exists(),
        "the old piece of b on tier 0 stayed"
    );
    assert!(!p.exists());
    // A journal naming a tier that is not there.
    let j = Journal {
        new: vec![(5, 1)],
        ..j
    };
    let p = write(&meta, "missing", &j).unwrap();
    let not = finish(&p, on).unwrap_err();
    assert!(
        not.why.contains("tier 5") && not.why.contains("EIO"),
        "{not}"
    );
    assert_eq!(not.held.as_deref(), Some(&j), "not held");
    assert_eq!(
        list(&meta).unwrap().len(),
        1,
        "a held journal is not kept for later"
    );
    std::fs::remove_file(&p).unwrap();
    // Its primary torn with an old piece no name holds: held too, never set aside.
    std::fs::write(roots[0].join("data/c"), b"x").unwrap();
    let j = Journal {
        primary: "c".into(),
        new: vec![(0, 12345678), (1, 23456789)],
        old: vec![(0, 34567890)],
        ..j
    };
    let p = write(&meta, "torn-alone", &j).unwrap();
    let not = finish(&p, on).unwrap_err();
    assert!(not.held.is_some() && p.exists(), "{not}");
    std::fs::remove_file(&p).unwrap();
    // A journal that does not parse is set aside and never listed again.
    let p = meta.join(format!("{JOURNAL_PREFIX}garbage"));
    std::fs::write(&p, "not a journal").unwrap();
    let not = finish(&p, on).unwrap_err();
    assert!(
        not.held.is_none() && not.why.contains("unfinished"),
        "{not}"
    );
    assert!(
        list(&meta).unwrap().is_empty(),
        "a set-aside journal is listed again"
    );
    // The primary holds its (now) only piece, the old one of a move not begun.
    let j = Journal {
        primary: "a".into(),
        new: vec![(0, 12345678)],
        old: vec![(1, ino(1, "a"))],
        ..j
    };
    let p = write(&meta, "notbegun", &j).unwrap();
    assert!(finish(&p, on).unwrap().contains("never took effect"));
    assert!(!p.exists());
}

/// A move torn between its own renames (tier 0 renamed, tier 1 not), its keep journal
/// naming tier 1's new piece at its temporary; at the next mount that temporary cannot
/// be stat-ed (here a symlink on its path: ELOOP; on a failing tier EIO or ESTALE).
/// What it holds cannot be told: the journal is held in place, nothing is changed.
///
/// Found (issue 38, point 4): a stat error counted as no entry, so the move was undone
/// from the keep and its journal removed; the mount then emptied limbo, and the writes
/// only the temporaries held (a lazy migration's) were lost.
#[test]
fn a_journal_whose_temporary_cannot_be_stat_ed_is_held() {
    let d = tempfile::tempdir().unwrap();
    let roots: Vec<PathBuf> = (0..2).map(|t| d.path().join(format!("t{t}"))).collect();
    let ino = |p: PathBuf| std::fs::symlink_metadata(p).unwrap().ino();
    for r in &roots {
        std::fs::create_dir_all(r.join("data")).unwrap();
        std::fs::create_dir_all(r.join("meta/real")).unwrap();
        std::fs::write(r.join("data/a"), b"old").unwrap();
        std::fs::hard_link(r.join("data/a"), r.join("data/k")).unwrap();
    }
    let old = vec![
        (0, ino(roots[0].join("data/a"))),
        (1, ino(roots[1].join("data/a"))),
    ];
    std::fs::write(roots[0].join("data/n"), b"new").unwrap();
    std::fs::rename(roots[0].join("data/n"), roots[0].join("data/a")).unwrap();
    std::fs::write(roots[1].join("meta/real/p"), b"new").unwrap();
    std::os::unix::fs::symlink("real", roots[1].join("meta/limbo")).unwrap();
    let new = vec![
        (0, ino(roots[0].join("data/a"))),
        (1, ino(roots[1].join("meta/real/p"))),
    ];
    let j = Journal {
        primary: "a".into(),
        names: vec!["k".into()],
        new: new.clone(),
        old,
        keeps: true,
        pending: vec![(1, "meta/limbo/p".into())],
    };
    let meta = d.path().join("journals");
    std::fs::create_dir(&meta).unwrap();
    let p = write(&meta, "torn", &j).unwrap();
    let on = |t: usize| roots.get(t).map(|r| (Beneath::new(r), r.join("data")));
    let not = finish(&p, on).unwrap_err();
    assert!(not.held.is_some() && p.exists(), "{not}");
    assert_eq!(ino(roots[0].join("data/a")), new[0].1, "undone");
    assert!(roots[0].join("data/k").exists(), "the keep went");
    // Its path readable again: finished from the temporary.
    std::fs::remove_file(roots[1].join("meta/limbo")).unwrap();
    std::fs::rename(roots[1].join("meta/real"), roots[1].join("meta/limbo")).unwrap();
    assert!(finish(&p, on).unwrap().contains("renamed in"));
    assert_eq!(ino(roots[1].join("data/a")), new[1].1, "not finished");
    assert!(!p.exists() && !roots[0].join("data/k").exists());
}
