//! The GRU placement policy's host side: the recorder of the default
//! scheduler on the running kernel (tp_btf and ring buffers need no
//! sched_ext; run as root), the choice of a model, and training from a
//! recording. The scheduler's own placement layer runs only under
//! sched_ext, in the VM tests.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use custos_policy::placement::{to_onnx, GruNet, PlacementModel};
use custos_sched::placement::{
    choose_placement, possible_cpus, read_recording, train, PlacementChoice, Recorder,
    SnapshotRecord, TrainPlacementArgs,
};

/// Processes that sleep and wake many times, and the pids of their shells.
fn sleepy_shells(n: usize, wakes: usize) -> Vec<std::process::Child> {
    let script = format!("i=0; while [ $i -lt {wakes} ]; do sleep 0.01; i=$((i+1)); done");
    (0..n)
        .map(|_| {
            Command::new("sh")
                .arg("-c")
                .arg(&script)
                .spawn()
                .expect("sh")
        })
        .collect()
}

#[test]
fn the_recorder_sees_the_default_scheduler_place_a_workload() {
    let recorder = Recorder::start(4 << 20).expect("the recorder loads (run as root)");
    let stop = Arc::new(AtomicBool::new(false));
    let workload = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut children = sleepy_shells(3, 15);
            let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
            for c in &mut children {
                assert!(c.wait().unwrap().success());
            }
            std::thread::sleep(Duration::from_millis(200));
            stop.store(true, Ordering::Relaxed);
            pids
        })
    };
    let mut all = Vec::new();
    recorder
        .run(Some(Instant::now() + Duration::from_secs(60)), &stop, |r| {
            all.push(*r);
            Ok(())
        })
        .unwrap();
    let pids = workload.join().unwrap();
    let (sent, dropped) = recorder.counts();
    assert!(sent >= all.len() as u64, "{sent} sent, {} read", all.len());
    assert_eq!(dropped, 0, "a 4 MiB ring holds a few seconds of wakeups");

    let cpus = possible_cpus().unwrap() as u32;
    let me = std::process::id();
    assert!(
        all.iter().all(|r| r.pid != me),
        "the recorder's own process is left out"
    );
    let mut by_pid: BTreeMap<u32, Vec<SnapshotRecord>> = BTreeMap::new();
    for r in &all {
        assert!(r.cpu < cpus, "{r:?} on a CPU past the {cpus} possible");
        by_pid.entry(r.pid).or_default().push(*r);
    }
    for pid in pids {
        let snaps = by_pid
            .get(&pid)
            .unwrap_or_else(|| panic!("no snapshot of shell {pid} among {} records", all.len()));
        // Created once (the fork), then woken after each of its sleeps.
        assert!(snaps[0].created, "{:?}", snaps[0]);
        assert!(snaps.len() >= 10, "shell {pid}: {} snapshots", snaps.len());
        for pair in snaps.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(
                b.runtime_ns >= a.runtime_ns,
                "runtime went back: {a:?} then {b:?}"
            );
            assert!(
                b.switch_count >= a.switch_count,
                "switches went back: {a:?} then {b:?}"
            );
            assert!(
                b.nvcsw >= a.nvcsw && b.nivcsw >= a.nivcsw,
                "{a:?} then {b:?}"
            );
            assert!(b.at_ns >= a.at_ns);
        }
        let last = snaps.last().unwrap();
        assert!(
            last.switch_count > 0 && last.runtime_ns > 0 && last.nvcsw > 0,
            "{last:?}"
        );
        for s in snaps {
            assert!((100..=139).contains(&s.prio), "{s:?}");
            assert!(
                !s.kthread && s.nr_cpus_allowed >= 1 && s.nr_cpus_allowed <= cpus,
                "{s:?}"
            );
        }
    }
}

/// A ring too small for a burst refuses snapshots, and they are counted.
#[test]
fn a_full_recorder_ring_counts_its_drops() {
    let recorder = Recorder::start(4096).unwrap();
    for mut c in sleepy_shells(2, 20) {
        c.wait().unwrap();
    }
    let (sent, dropped) = recorder.counts();
    assert!(dropped > 0, "{sent} sent, none dropped");
    let mut read = 0u64;
    let stop = AtomicBool::new(true);
    recorder
        .run(None, &stop, |_| {
            read += 1;
            Ok(())
        })
        .unwrap();
    // 4 KiB holds 64 records of 64 bytes (with their headers, fewer).
    assert!(read > 0 && read <= 64, "{read}");
}

fn model_file(dir: &std::path::Path, cpus: usize) -> std::path::PathBuf {
    let path = dir.join(format!("gru{cpus}.onnx"));
    std::fs::write(
        &path,
        to_onnx(&GruNet::new(8, cpus, 3).unwrap().weights().unwrap()),
    )
    .unwrap();
    path
}

fn reason(c: PlacementChoice) -> String {
    match c {
        PlacementChoice::Custos { reason } => reason,
        PlacementChoice::Gru { name, .. } => panic!("GRU placement chosen with {name}"),
    }
}

#[test]
fn an_unusable_model_leaves_the_own_placement_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(reason(choose_placement(false, None, 4)), "");
    let missing = dir.path().join("none.onnx");
    assert!(
        reason(choose_placement(true, Some(&missing), 4)).contains("reading the placement model")
    );
    let corrupt = dir.path().join("corrupt.onnx");
    std::fs::write(&corrupt, b"\x08\x07garbage that is not protobuf \xff\xff").unwrap();
    assert!(reason(choose_placement(true, Some(&corrupt), 4)).contains("not an ONNX model"));
    let other = model_file(dir.path(), 2);
    assert!(reason(choose_placement(true, Some(&other), 4))
        .contains("places tasks on 2 CPUs; this machine has 4"));
    // The shipped model is for the 2-vCPU VM: refused elsewhere, with the way out.
    let shipped = reason(choose_placement(true, None, 4));
    assert!(
        shipped.contains("shipped placement model") && shipped.contains("this machine has 4"),
        "{shipped}"
    );
    assert!(shipped.contains("custos placement record"), "{shipped}");
    match choose_placement(true, None, 2) {
        PlacementChoice::Gru { model, name } => {
            assert_eq!((model.cpus(), name.as_str()), (2, "shipped model"))
        }
        other => panic!("{other:?}"),
    }

    let good = model_file(dir.path(), 4);
    match choose_placement(true, Some(&good), 4) {
        PlacementChoice::Gru { model, name } => {
            assert_eq!(model.cpus(), 4);
            assert!(name.contains("gru4.onnx"));
        }
        c => panic!("{c:?}"),
    }
}

/// A synthetic recording: CPU 1 for kernel threads and tasks that ran
/// long, else 0; one malformed line in the middle.
#[test]
fn a_recording_trains_a_model_the_scheduler_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let rec_path = dir.path().join("run.jsonl");
    let mut f = std::fs::File::create(&rec_path).unwrap();
    for i in 0..400u64 {
        let kthread = i % 5 == 0;
        let runtime_ns = (i * 7919 % 13) * 1_000_000;
        let r = SnapshotRecord {
            pid: 100 + i as u32 % 17,
            cpu: (kthread || runtime_ns > 6_000_000) as u32,
            prio: if kthread { 100 } else { 120 },
            nr_cpus_allowed: 2,
            kthread,
            runtime_ns,
            nvcsw: i,
            switch_count: i,
            ..Default::default()
        };
        writeln!(f, "{}", serde_json::to_string(&r).unwrap()).unwrap();
        if i == 200 {
            writeln!(f, "{{\"pid\": 3, \"cpu\": ").unwrap();
        }
    }
    drop(f);
    let (records, bad) = read_recording(&rec_path).unwrap();
    assert_eq!(records.len(), 400);
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].0, 202, "the malformed line's number");

    let out = dir.path().join("model.onnx");
    let args = TrainPlacementArgs {
        recordings: vec![rec_path.clone()],
        out: out.clone(),
        cpus: Some(2),
        hidden: 8,
        max_epochs: 8,
        // 391 windows, every 4th kept.
        max_windows: 100,
        seed: 1,
    };
    let report = train(&args).unwrap();
    assert_eq!(report.bad_lines, 1);
    assert_eq!(report.snapshots, 400);
    assert_eq!(
        report.report.train_samples + report.report.validation_samples,
        98
    );
    assert!(report.to_string().contains("against"), "{report}");
    let model = PlacementModel::load(&out, 2).unwrap();
    assert_eq!(model.cpus(), 2);

    // Two recordings: windows within each, never across (391 each, not 791),
    // every 8th kept across both.
    let both = TrainPlacementArgs {
        recordings: vec![rec_path.clone(), rec_path.clone()],
        max_windows: 100,
        max_epochs: 2,
        ..args.clone()
    };
    let report = train(&both).unwrap();
    assert_eq!((report.snapshots, report.bad_lines), (800, 2));
    assert_eq!(
        report.report.train_samples + report.report.validation_samples,
        782usize.div_ceil(8)
    );

    // Nothing usable is an error that says so.
    let short = dir.path().join("short.jsonl");
    std::fs::write(&short, "not json\n").unwrap();
    let err = train(&TrainPlacementArgs {
        recordings: vec![short],
        ..args
    })
    .unwrap_err();
    assert!(format!("{err:#}").contains("no usable windows"), "{err:#}");
}

/// The two commands as `custos placement record|train` run them: a second
/// of this host's default scheduler, then a model of it.
#[test]
fn record_then_train_end_to_end() {
    use custos_sched::placement::{run, PlacementCommand, RecordArgs};
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("host.jsonl");
    let shells = std::thread::spawn(|| {
        for mut c in sleepy_shells(2, 30) {
            c.wait().unwrap();
        }
    });
    let code = run(PlacementCommand::Record(RecordArgs {
        out: rec.clone(),
        seconds: Some(1.0),
        ring_kb: 4096,
    }))
    .unwrap();
    shells.join().unwrap();
    assert_eq!(code, 0);
    let (records, bad) = read_recording(&rec).unwrap();
    assert!(bad.is_empty(), "{bad:?}");
    assert!(
        records.len() >= 50,
        "{} snapshots in a second",
        records.len()
    );
    let out = dir.path().join("host.onnx");
    let args = TrainPlacementArgs {
        recordings: vec![rec],
        out: out.clone(),
        cpus: None,
        hidden: 8,
        max_epochs: 3,
        max_windows: 0,
        seed: 1,
    };
    assert_eq!(run(PlacementCommand::Train(args)).unwrap(), 0);
    assert!(choose_placement(true, Some(&out), possible_cpus().unwrap()).is_gru());
}

/// `custos placement speed`: the shipped model timed alone and in batches
/// (what is faster is for bench/placement to say, not a test on a busy
/// machine), and a model for other CPUs is refused.
#[test]
fn the_speed_of_a_model_is_measured_per_window_and_batch() {
    use custos_sched::placement::time_model;
    let model = PlacementModel::from_bytes(custos_policy::placement::SHIPPED_MODEL, 2).unwrap();
    let rows = time_model(&model, 640).unwrap();
    assert_eq!(
        rows.iter().map(|r| r.batch).collect::<Vec<_>>(),
        vec![1, 8, 64]
    );
    assert_eq!(
        rows.iter().map(|r| r.calls).collect::<Vec<_>>(),
        vec![640, 80, 10]
    );
    assert!(
        rows.iter()
            .all(|r| r.us_per_window > 0.0 && r.us_per_call_median > 0.0),
        "{rows:?}"
    );
    use custos_sched::placement::{run, PlacementCommand, SpeedArgs};
    let err = run(PlacementCommand::Speed(SpeedArgs {
        model: None,
        cpus: Some(3),
        windows: 10,
        json: true,
    }))
    .unwrap_err();
    assert!(format!("{err:#}").contains("this machine has 3"), "{err:#}");
}
