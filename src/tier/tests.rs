//! A tier folder's unit tests: the lock, scratch removal, when a recovery probe runs and
//! what it folds in, and the room a capacity limit leaves.

use super::*;
use crate::tier::lock::Holder;

#[test]
fn second_open_of_a_tier_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let t = Tier::open(0, "a", d.path(), 1.0, 1.0, BandwidthSource::Config, None).unwrap();
    assert!(t.data.is_dir());
    let e = Tier::open(0, "a", d.path(), 1.0, 1.0, BandwidthSource::Config, None).unwrap_err();
    assert!(e.to_string().contains("in use by another tierfs"), "{e}");
    drop(t);
    Tier::open(0, "a", d.path(), 1.0, 1.0, BandwidthSource::Config, None).unwrap();
}

#[test]
fn scratch_removal_keeps_what_tierfs_did_not_make() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("t");
    std::fs::create_dir(&root).unwrap();
    let req = LockRequest {
        scratch: true,
        ..Default::default()
    };
    let t = Tier::open_for(0, "t", &root, None, &req).unwrap();
    std::fs::create_dir_all(t.data.join("zero_stage_3/rank0")).unwrap();
    std::fs::write(t.data.join("zero_stage_3/rank0/x.swp"), b"x").unwrap();
    discard_contents(&root).unwrap();
    assert!(!t.data.exists());
    assert!(root.join(META_DIR).join(crate::tier::lock::RECORD).exists());
    // Still locked: part two refuses.
    assert!(remove_folder(&root, true)
        .unwrap_err()
        .contains("locked again"));
    t.release_lock();
    remove_folder(&root, true).unwrap();
    assert!(!root.exists());

    // A folder the scratch mount did not create is kept, emptied of what it made.
    std::fs::create_dir(&root).unwrap();
    let t = Tier::open_for(0, "t", &root, None, &req).unwrap();
    std::fs::write(t.data.join("x.swp"), b"x").unwrap();
    discard_contents(&root).unwrap();
    t.release_lock();
    remove_folder(&root, false).unwrap();
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0, "emptied");
    std::fs::remove_dir(&root).unwrap();

    // A user's own file next to data/ keeps the folder.
    std::fs::create_dir(&root).unwrap();
    let t = Tier::open_for(0, "t", &root, None, &req).unwrap();
    std::fs::write(root.join("notes.txt"), b"mine").unwrap();
    discard_contents(&root).unwrap();
    t.release_lock();
    let e = remove_folder(&root, true).unwrap_err();
    assert!(e.contains("notes.txt"), "{e}");
    assert_eq!(std::fs::read(root.join("notes.txt")).unwrap(), b"mine");
    assert!(!root.join(META_DIR).exists() && !root.join(DATA_DIR).exists());
}

#[test]
fn a_stale_scratch_lock_takes_its_data_with_it() {
    let d = tempfile::tempdir().unwrap();
    let meta = d.path().join(META_DIR);
    std::fs::create_dir_all(d.path().join(DATA_DIR)).unwrap();
    std::fs::create_dir_all(&meta).unwrap();
    // A scratch daemon of this host that was killed: its record names a pid that is gone.
    let stale = || {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let mut h = Holder::me("mount", Some(Path::new("/mnt/old")), true);
        h.pid = c.id();
        c.wait().unwrap();
        std::fs::write(d.path().join(DATA_DIR).join("old.swp"), b"old").unwrap();
        std::fs::write(meta.join(crate::tier::lock::RECORD), h.to_text()).unwrap();
    };
    stale();
    let kept = Tier::open_for(0, "t", d.path(), None, &LockRequest::default()).unwrap();
    assert!(
        kept.data.join("old.swp").exists(),
        "a mount without scratch keeps the data"
    );
    drop(kept);
    stale();
    let scratch = LockRequest {
        scratch: true,
        ..Default::default()
    };
    let t = Tier::open_for(0, "t", d.path(), None, &scratch).unwrap();
    assert!(t.data.is_dir());
    assert!(
        !t.data.join("old.swp").exists(),
        "a scratch mount discards it"
    );
}

#[test]
fn probe_runs_only_when_cut_and_folds_its_result() {
    let d = tempfile::tempdir().unwrap();
    let t = Tier::open(0, "t", d.path(), 1e9, 1e9, BandwidthSource::Config, None).unwrap();
    // A share that was not cut never probes; a fresh tier has just been "sampled".
    assert!(!t.claim_probe(false));
    assert!(!t.claim_probe(true));
    t.last_sample_ns.store(0, Ordering::Relaxed);
    assert!(t.claim_probe(true));
    // One at a time, and not again right away.
    assert!(!t.claim_probe(true));
    // Its I/O is the tier I/O's (`tierio::recovery`, tested there); its result, folded
    // in, is capped at the stated figure (a probe this small says only that the tier
    // recovered).
    t.fold_probe(Ok((4e9, 5e8)));
    assert!(!t.claim_probe(true));
    assert_eq!(t.probes.load(Ordering::Relaxed), 1);
    let (r, w) = (t.est_read.get().unwrap(), t.est_write.get().unwrap());
    assert!(r > 0.0 && r <= 1e9 && w > 0.0 && w <= 5e8, "{r} {w}");
    // The next sampling reports the probe once.
    assert!(t.sample_bandwidth());
    assert!(!t.sample_bandwidth());
}

#[test]
fn capacity_limits_room() {
    let d = tempfile::tempdir().unwrap();
    let t = Tier::open(
        0,
        "a",
        d.path(),
        1.0,
        1.0,
        BandwidthSource::Config,
        Some(1000),
    )
    .unwrap();
    // The temp folder's file system has far more room than the cap, so the cap decides.
    let fs_room = t.space().unwrap().avail.saturating_sub(FREE_RESERVE);
    assert!(
        fs_room > 1000,
        "the temp file system is nearly full: {fs_room}"
    );
    assert_eq!(t.room(), 1000);
    t.add_used(900);
    assert_eq!(t.room(), 100);
    assert!(!t.has_room_for(200));
    // Growth of what is there is held to it too.
    assert!(t.may_grow(100) && !t.may_grow(101));
    assert!(!t.try_reserve(101));
    assert!(t.has_room_for(99));
    assert!(!t.has_room_for(100), "a file must fit with room to spare");
    t.add_used(200);
    assert_eq!(t.room(), 0, "over the cap: no room, no underflow");
    t.add_used(-5000);
    assert_eq!(
        t.room(),
        1000,
        "freed bytes come back, never below zero used"
    );
    assert!(t.has_room_for(200));
}
