//! The coordination's unit tests: the split and the capacity on made-up ledgers
//! (`plan.rs`), staleness on the reader's clock, faulty files (`ledger.rs`), periods of
//! real [`SharedTier`]s on a temporary folder (`node.rs`) and the probe election
//! (`election.rs`).

use super::{
    allotment, capacity, held_capacity, is_valid_name, ledger_dir, read_entries, shared_probe,
    Counters, Entry, Listing, Liveness, Plan, ProbeOutcome, SharedProbeError, SharedTier, FORMAT,
    MIN_CAPACITY_FRACTION, RECOVER_RATE, STALE_AFTER,
};
use std::time::{Duration, Instant};

fn e(node: &str, seq: u64, rate: f64, demand: f64, saturated: bool) -> Entry {
    Entry {
        format: FORMAT,
        node: node.into(),
        seq,
        rate_bps: rate,
        busy_rate_bps: 0.0,
        demand_bps: demand,
        saturated,
        wall_ms: 0,
    }
}

#[test]
fn equal_nodes_split_the_tier_evenly() {
    let live = [
        e("a", 1, 100.0, 500.0, false),
        e("b", 1, 100.0, 500.0, false),
    ];
    let cap = capacity(400.0, 400.0, &live);
    assert_eq!(cap, 400.0);
    assert_eq!(allotment(cap, "a", &live), 200.0);
    assert_eq!(allotment(cap, "b", &live), 200.0);
    let four: Vec<Entry> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| e(n, 1, 0.0, 1.0, false))
        .collect();
    assert_eq!(allotment(400.0, "c", &four), 100.0);
}

#[test]
fn demand_weights_the_split_and_an_idle_node_leaves_it_to_the_busy() {
    // Both busy, one three times more: still peers (a phase within a step, not a
    // node doing less work).
    let live = [e("a", 1, 0.0, 300.0, false), e("b", 1, 0.0, 100.0, false)];
    assert_eq!(allotment(400.0, "a", &live), 200.0);
    assert_eq!(allotment(400.0, "b", &live), 200.0);
    // One doing a tenth of the other's: in proportion to its weight, 0.4 of a peer.
    let live = [e("a", 1, 0.0, 300.0, false), e("b", 1, 0.0, 30.0, false)];
    assert!((allotment(400.0, "a", &live) - 400.0 / 1.4).abs() < 1e-9);
    assert!((allotment(400.0, "b", &live) - 400.0 * 0.4 / 1.4).abs() < 1e-9);
    // One node idle: the busy one gets the whole tier, as if it were alone.
    let live = [e("a", 1, 0.0, 300.0, false), e("b", 1, 0.0, 0.0, false)];
    assert_eq!(allotment(400.0, "a", &live), 400.0);
    // The idle one is told what an even split would give it.
    assert_eq!(allotment(400.0, "b", &live), 200.0);
    // Nobody busy: even.
    let live = [e("a", 1, 0.0, 0.0, false), e("b", 1, 0.0, 0.0, false)];
    assert_eq!(allotment(400.0, "a", &live), 200.0);
    // Alone.
    assert_eq!(allotment(400.0, "a", &live[..1]), 400.0);
}

/// Counters with no busy time: the rates alone.
fn cn(tier_bytes: u64, all_bytes: u64) -> Counters {
    Counters {
        tier_bytes,
        tier_busy_ns: 0,
        all_bytes,
    }
}

#[test]
fn a_saturated_capacity_is_what_the_nodes_get_while_busy_not_their_average() {
    // Two nodes on a 400 MB/s tier, each busy a quarter of the period and at 200 while
    // busy: their rates over the period are 50 each.
    let mut a = e("a", 1, 50.0, 1.0, true);
    let mut b = e("b", 1, 50.0, 1.0, true);
    a.busy_rate_bps = 200.0;
    b.busy_rate_bps = 200.0;
    let cap = capacity(400.0, 400.0, &[a.clone(), b.clone()]);
    assert_eq!(cap, 400.0);
    // A period later the shares were cut by the ledger and each node sends less: what
    // it gets while busy has not changed, nor does the capacity (by the rates it
    // would have fallen to 50, then further with every period).
    a.rate_bps = 10.0;
    b.rate_bps = 10.0;
    let mut c = cap;
    for _ in 0..10 {
        c = capacity(c, 400.0, &[a.clone(), b.clone()]);
    }
    assert_eq!(c, 400.0);
    // An entry with no busy time (an older daemon, or no traffic) counts its rate.
    let old = e("c", 1, 30.0, 1.0, true);
    assert_eq!(capacity(400.0, 400.0, &[a, old]), 230.0);
}

#[test]
fn a_capacity_is_bounded_above_and_decays_to_the_probe() {
    // A period that ended a burst's requests with little of their busy time in it: a
    // busy rate of 8 GB/s on a 400 MB/s tier counts as twice the probe at most.
    let mut a = e("a", 1, 50.0, 1.0, true);
    a.busy_rate_bps = 8000.0;
    assert_eq!(capacity(400.0, 400.0, &[a]), 800.0);
    // Garbage from a buggy peer cannot make it infinite either.
    let mut g = e("g", 1, 1e308, 1.0, true);
    g.busy_rate_bps = 1e308;
    let cap = capacity(400.0, 400.0, &[g.clone(), g]);
    assert_eq!(cap, 800.0);
    // Unsaturated and quiet, a high figure goes back to the probe.
    let calm = [e("a", 2, 10.0, 1.0, false)];
    let mut c = cap;
    for _ in 0..200 {
        c = capacity(c, 400.0, &calm);
    }
    assert!((400.0..401.0).contains(&c), "{c}");
}

#[test]
fn a_short_busy_period_publishes_no_busy_rate() {
    let d = tempfile::tempdir().unwrap();
    let a = SharedTier::new(ledger_dir(d.path(), "j", "pfs"), "a", 400.0);
    let t0 = Instant::now();
    a.tick(t0, Counters::default(), false).unwrap();
    // 16 MiB completed in a period with 2 ms of busy time: no figure of the tier.
    let c = Counters {
        tier_bytes: 16 << 20,
        tier_busy_ns: 2_000_000,
        all_bytes: 16 << 20,
    };
    a.tick(t0 + Duration::from_secs(1), c, true).unwrap();
    let got = read_entries(&a.dir).unwrap().entries;
    assert_eq!(got[0].busy_rate_bps, 0.0);
    assert_eq!(got[0].rate_bps, (16 << 20) as f64);
}

#[test]
fn a_period_publishes_the_busy_rate() {
    let d = tempfile::tempdir().unwrap();
    let a = SharedTier::new(ledger_dir(d.path(), "j", "pfs"), "a", 400.0);
    let t0 = Instant::now();
    a.tick(t0, Counters::default(), false).unwrap();
    // 100 MB in a 2 s period, 0.5 s of it busy.
    let c = Counters {
        tier_bytes: 100_000_000,
        tier_busy_ns: 500_000_000,
        all_bytes: 300_000_000,
    };
    a.tick(t0 + Duration::from_secs(2), c, true).unwrap();
    let got = read_entries(&a.dir).unwrap().entries;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].rate_bps, 50e6);
    assert_eq!(got[0].busy_rate_bps, 200e6);
    assert_eq!(got[0].demand_bps, 150e6);
    // An entry without the field (as the first ledger format wrote) still parses.
    let text = br#"{"format":1,"node":"z","seq":3,"rate_bps":5.0,"demand_bps":1.0,"saturated":false,"wall_ms":0}"#;
    std::fs::write(a.dir.join("node-z.json"), text).unwrap();
    let got = read_entries(&a.dir).unwrap();
    assert!(got.bad.is_empty(), "{:?}", got.bad);
    assert!(got
        .entries
        .iter()
        .any(|e| e.node == "z" && e.busy_rate_bps == 0.0));
    // A field a later tierfs adds is ignored, not a reason to leave the node out.
    let text = br#"{"format":1,"node":"y","seq":3,"rate_bps":5.0,"demand_bps":1.0,"saturated":false,"wall_ms":0,"later":7}"#;
    std::fs::write(a.dir.join("node-y.json"), text).unwrap();
    let got = read_entries(&a.dir).unwrap();
    assert!(got.bad.is_empty(), "{:?}", got.bad);
    assert!(got.entries.iter().any(|e| e.node == "y"));
}

#[test]
fn saturation_sets_the_capacity_to_what_the_nodes_get_together() {
    // Probed at 400; a foreign writer takes half: the nodes see queueing and move
    // 100 + 100.
    let live = [e("a", 1, 100.0, 1.0, true), e("b", 1, 100.0, 1.0, false)];
    let cap = capacity(400.0, 400.0, &live);
    assert_eq!(cap, 200.0);
    assert_eq!(allotment(cap, "a", &live), 100.0);
    // Unsaturated, it recovers towards the probe a step at a time, and never below the
    // nodes' own sum.
    let calm = [e("a", 2, 90.0, 1.0, false), e("b", 2, 90.0, 1.0, false)];
    let next = capacity(cap, 400.0, &calm);
    assert!(
        (next - (200.0 + RECOVER_RATE * 200.0)).abs() < 1e-9,
        "{next}"
    );
    let mut c = next;
    for _ in 0..200 {
        c = capacity(c, 400.0, &calm);
    }
    assert!(c > 399.0 && c <= 400.0, "{c}");
    // More than the probe said, unsaturated: the tier can do at least that.
    let fast = [e("a", 3, 300.0, 1.0, false), e("b", 3, 300.0, 1.0, false)];
    assert_eq!(capacity(400.0, 400.0, &fast), 600.0);
    // Saturated at next to nothing (a writer from outside the job): bounded below.
    let starved = [e("a", 4, 1.0, 1.0, true)];
    assert_eq!(
        capacity(400.0, 400.0, &starved),
        400.0 * MIN_CAPACITY_FRACTION
    );
}

#[test]
fn staleness_is_the_readers_clock_and_sequence_numbers_only() {
    let mut l = Liveness::default();
    let t0 = Instant::now();
    // b's wall clock is an hour ahead and a's an hour behind: liveness does not care.
    let mut a = e("a", 1, 0.0, 0.0, false);
    a.wall_ms = 1_000;
    let mut b = e("b", 7, 0.0, 0.0, false);
    b.wall_ms = u64::MAX / 2;
    let names = |v: Vec<Entry>| v.into_iter().map(|e| e.node).collect::<Vec<_>>();
    assert_eq!(names(l.live(t0, vec![a.clone(), b.clone()])), ["a", "b"]);
    // a keeps publishing, b stops (killed).
    for s in 1..=9u64 {
        a.seq += 1;
        let now = t0 + Duration::from_secs(s);
        assert_eq!(names(l.live(now, vec![a.clone(), b.clone()])), ["a", "b"]);
    }
    a.seq += 1;
    let at = t0 + STALE_AFTER;
    assert_eq!(names(l.live(at, vec![a.clone(), b.clone()])), ["a"]);
    // b comes back (a restart may even start its sequence again): live at once.
    b.seq = 1;
    assert_eq!(
        names(l.live(at + Duration::from_secs(1), vec![a.clone(), b.clone()])),
        ["a", "b"]
    );
    // A file that vanished is forgotten; seen again, it gets a fresh STALE_AFTER.
    assert_eq!(names(l.live(at, vec![a.clone()])), ["a"]);
    let later = at + Duration::from_secs(30);
    assert_eq!(names(l.live(later, vec![b.clone()])), ["b"]);
    assert!(l.live(later + STALE_AFTER, vec![b]).is_empty());
}

#[test]
fn garbage_and_torn_files_are_reported_not_read() {
    let d = tempfile::tempdir().unwrap();
    let good = e("a", 3, 1.0, 2.0, false);
    std::fs::write(
        d.path().join("node-a.json"),
        serde_json::to_vec(&good).unwrap(),
    )
    .unwrap();
    let text = serde_json::to_string(&e("b", 3, 1.0, 2.0, false)).unwrap();
    std::fs::write(d.path().join("node-b.json"), &text[..text.len() / 2]).unwrap();
    std::fs::write(d.path().join("node-c.json"), b"\x00\xffgarbage").unwrap();
    std::fs::write(
        d.path().join("node-d.json"),
        serde_json::to_vec(&good).unwrap(),
    )
    .unwrap();
    let mut future = e("f", 1, 1.0, 1.0, false);
    future.format = FORMAT + 1;
    std::fs::write(
        d.path().join("node-f.json"),
        serde_json::to_vec(&future).unwrap(),
    )
    .unwrap();
    std::fs::write(d.path().join("probe.json"), b"{}").unwrap();
    std::fs::write(d.path().join(".node-a.json.tmp-1"), b"{").unwrap();
    let Listing { entries, bad } = read_entries(d.path()).unwrap();
    assert_eq!(entries, vec![good]);
    let mut names: Vec<&str> = bad.iter().map(|(n, _)| n.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["node-b.json", "node-c.json", "node-d.json", "node-f.json"]
    );
}

#[test]
fn a_tick_publishes_and_reads_the_others() {
    let d = tempfile::tempdir().unwrap();
    let dir = ledger_dir(d.path(), "job1", "pfs");
    let a = SharedTier::new(dir.clone(), "a", 400.0);
    let b = SharedTier::new(dir.clone(), "b", 400.0);
    let t0 = Instant::now();
    let pa = a.tick(t0, cn(0, 0), false).unwrap();
    assert_eq!(pa.live, 1);
    assert_eq!(pa.allot_bps, 400.0);
    let pb = b.tick(t0, cn(0, 0), false).unwrap();
    assert_eq!((pb.live, pb.allot_bps), (2, 200.0));
    // Garbage beside them: ignored.
    std::fs::write(dir.join("node-zz.json"), b"not json").unwrap();
    let t1 = t0 + Duration::from_secs(1);
    // a moved 100 bytes in that second, b nothing: a has the demand, so the whole tier.
    let pa = a.tick(t1, cn(100, 100), false).unwrap();
    assert_eq!((pa.live, pa.allot_bps), (2, 400.0));
    let pb = b.tick(t1, cn(0, 0), false).unwrap();
    assert_eq!((pb.live, pb.allot_bps), (2, 200.0));
    // b stops publishing: after STALE_AFTER on a's clock, a has the tier again.
    let mut t = t1;
    let mut got = None;
    for _ in 0..15 {
        t += Duration::from_secs(1);
        let p = a.tick(t, cn(100, 100), false).unwrap();
        if p.live == 1 {
            got = Some((t - t1, p.allot_bps));
            break;
        }
    }
    let (after, allot) = got.expect("b never went stale");
    assert!(after <= STALE_AFTER + Duration::from_secs(1), "{after:?}");
    assert_eq!(allot, 400.0);
    a.leave();
    assert!(!dir.join("node-a.json").exists());
    assert_eq!(a.tick(t + Duration::from_secs(1), cn(0, 0), false), None);
    assert!(
        !dir.join("node-a.json").exists(),
        "a period after leave wrote it back"
    );
}

/// The published demand is smoothed: a second in which the node moved nothing (a phase
/// of its step) takes it a fifth of the way down, and a node that stopped for good
/// falls below a busy peer's quarter within seconds, leaving it the tier.
#[test]
fn the_published_demand_moves_a_fifth_of_the_way_each_second_and_reaches_idle() {
    let d = tempfile::tempdir().unwrap();
    let dir = ledger_dir(d.path(), "job1", "pfs");
    let a = SharedTier::new(dir.clone(), "a", 400.0);
    let published = || -> f64 {
        let Listing { entries, .. } = read_entries(&dir).unwrap();
        entries.iter().find(|e| e.node == "a").unwrap().demand_bps
    };
    let near = |x: f64, want: f64| (x - want).abs() < 1e-6 * want.max(1.0);
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    a.tick(at(0), cn(0, 0), false).unwrap();
    assert_eq!(published(), 0.0);
    a.tick(at(1000), cn(100, 1000), false).unwrap();
    assert_eq!(published(), 1000.0, "the first figure is taken as it is");
    a.tick(at(2000), cn(100, 1000), false).unwrap();
    assert!(near(published(), 800.0), "{}", published());
    a.tick(at(3000), cn(100, 2000), false).unwrap();
    assert!(near(published(), 840.0), "{}", published());
    // The smoothing is per second, not per period: a two-second idle period moves the
    // figure as far as two one-second ones (1 - 0.8^2 of the way).
    a.tick(at(5000), cn(100, 2000), false).unwrap();
    assert!(near(published(), 840.0 * 0.64), "{}", published());
    // Idle from now on: below a quarter of 840 within seven seconds, and published as
    // exactly 0 (idle: a part of C/n once it starts again) within a minute, not as a
    // figure that only nears 0.
    let mut ms = 5000;
    while published() >= 0.25 * 840.0 {
        ms += 1000;
        a.tick(at(ms), cn(100, 2000), false).unwrap();
    }
    assert!(ms <= 10_000, "{ms}");
    while published() > 0.0 {
        ms += 1000;
        a.tick(at(ms), cn(100, 2000), false).unwrap();
    }
    assert!(ms <= 60_000, "{ms}");
    assert_eq!(published(), 0.0);
}

#[test]
fn a_capacity_falls_only_after_holding_low_for_three_periods() {
    // A dip of two periods (a write-back stall) leaves the capacity as it was.
    assert_eq!(held_capacity(300.0, &[300.0, 50.0]), 300.0);
    assert_eq!(held_capacity(300.0, &[300.0, 50.0, 48.0]), 300.0);
    assert_eq!(held_capacity(300.0, &[50.0, 48.0, 300.0]), 300.0);
    // Three in a row: the highest of them.
    assert_eq!(held_capacity(300.0, &[150.0, 120.0, 140.0]), 150.0);
    // Fewer periods seen than the hold (just mounted): no fall yet.
    assert_eq!(held_capacity(300.0, &[100.0, 100.0]), 300.0);
    // A rise counts at once.
    assert_eq!(held_capacity(150.0, &[140.0, 120.0, 290.0]), 290.0);
    assert_eq!(held_capacity(150.0, &[]), 150.0);
}

/// Periods of a second each on node `a`'s tier, every one busy the whole second:
/// `step(s, bytes, saturated)` ends the period at second `s` having moved `bytes`.
fn busy_seconds(a: &SharedTier) -> impl FnMut(u64, u64, bool) -> Plan + '_ {
    let t0 = Instant::now();
    let mut c = cn(0, 0);
    a.tick(t0, c, false).unwrap();
    move |s, bytes, saturated| {
        c.tier_bytes += bytes;
        c.tier_busy_ns += 1_000_000_000;
        c.all_bytes += 4 * bytes;
        a.tick(t0 + Duration::from_secs(s), c, saturated).unwrap()
    }
}

#[test]
fn a_two_second_stall_of_the_shared_tier_does_not_cut_the_shares() {
    let d = tempfile::tempdir().unwrap();
    let a = SharedTier::new(ledger_dir(d.path(), "job1", "pfs"), "a", 300e6);
    let mut step = busy_seconds(&a);
    assert_eq!(step(1, 300_000_000, true).capacity_bps, 300e6);
    // Two seconds saturated at 50 MB/s: held.
    assert_eq!(step(2, 50_000_000, true).capacity_bps, 300e6);
    assert_eq!(step(3, 50_000_000, true).capacity_bps, 300e6);
    assert_eq!(step(4, 300_000_000, true).capacity_bps, 300e6);
    // Three: it counts (the highest of the three).
    step(5, 60_000_000, true);
    step(6, 50_000_000, true);
    let p = step(7, 55_000_000, true);
    assert!((p.capacity_bps - 60e6).abs() < 1.0, "{}", p.capacity_bps);
}

#[test]
fn only_saturated_falls_are_held() {
    let d = tempfile::tempdir().unwrap();
    let a = SharedTier::new(ledger_dir(d.path(), "job1", "pfs"), "a", 300e6);
    let mut periods = busy_seconds(&a);
    let mut step = |s, bytes, saturated| periods(s, bytes, saturated).capacity_bps;
    // Saturated at 500 MB/s: the capacity rises at once.
    assert_eq!(step(1, 500_000_000, true), 500e6);
    // Unsaturated and moving little, it glides back 5 % of the gap each period, not
    // held for three.
    let next = step(2, 10_000_000, false);
    assert!(
        (next - (500e6 - RECOVER_RATE * 200e6)).abs() < 1.0,
        "{next}"
    );
    // Two saturated low periods, a calm one, then two more: never three in a row.
    let held = step(3, 50_000_000, true);
    assert_eq!(step(4, 50_000_000, true), held);
    let calm = step(5, 10_000_000, false);
    assert!(calm < held);
    // The calm period cleared the window: two saturated low periods hold again.
    assert_eq!(step(6, 50_000_000, true), calm);
    assert_eq!(step(7, 50_000_000, true), calm);
    assert!((step(8, 60_000_000, true) - 60e6).abs() < 1.0);
}

#[test]
fn an_unwritable_ledger_leaves_the_node_on_its_own_estimates() {
    let d = tempfile::tempdir().unwrap();
    // A file where the folder should be: unwritable for root too.
    std::fs::write(d.path().join("job1"), b"").unwrap();
    let a = SharedTier::new(ledger_dir(d.path(), "job1", "pfs"), "a", 400.0);
    assert_eq!(a.tick(Instant::now(), cn(0, 0), false), None);
    assert_eq!(a.plan(), None);
    // Fixed: it joins.
    std::fs::remove_file(d.path().join("job1")).unwrap();
    assert!(a.tick(Instant::now(), cn(0, 0), false).is_some());
}

#[test]
fn one_probe_per_job() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("job").join("pfs");
    let runs = std::sync::atomic::AtomicUsize::new(0);
    let outcomes: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|i| {
                let (dir, runs) = (&dir, &runs);
                s.spawn(move || {
                    shared_probe(dir, &format!("n{i}"), Duration::from_secs(10), || {
                        runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(300));
                        Ok((300.0, 200.0))
                    })
                    .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(outcomes.iter().all(|(f, _)| *f == (300.0, 200.0)));
    assert_eq!(
        outcomes
            .iter()
            .filter(|(_, o)| *o == ProbeOutcome::Elected)
            .count(),
        1
    );
    // A winner that died before it wrote the figure: the others give up and say who.
    let d2 = tempfile::tempdir().unwrap();
    std::fs::write(d2.path().join("probe.elect"), b"node x pid 1\n").unwrap();
    let e = shared_probe(d2.path(), "y", Duration::from_millis(300), || {
        Ok((1.0, 1.0))
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("node x pid 1"), "{e}");
    // A winner whose probe fails says so, and the others stop waiting at once.
    let d3 = tempfile::tempdir().unwrap();
    let e = shared_probe(d3.path(), "w", Duration::from_secs(60), || {
        Err("no room".into())
    })
    .unwrap_err();
    assert_eq!(e, SharedProbeError::Probe("no room".into()));
    let t = Instant::now();
    let e = shared_probe(d3.path(), "y", Duration::from_secs(60), || Ok((1.0, 1.0)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("failed (node w: no room)"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn names_that_fit_in_a_file_name() {
    for ok in ["n1", "node-07.cluster", "123456", "a_b"] {
        assert!(is_valid_name(ok), "{ok}");
    }
    for bad in ["", ".", "..", "a/b", "a b", &"x".repeat(65)] {
        assert!(!is_valid_name(bad), "{bad}");
    }
}
