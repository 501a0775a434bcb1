//! The provenance features the scheduler reads: pinned, filled, kept for
//! the scheduler and the next collector.

mod common;

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

use common::*;
use custos_collector::features::{self, read_global, read_task, task_bytes};
use custos_collector::intf::PIN_DIR;
use libbpf_rs::{MapCore, MapFlags, MapHandle};

#[test]
fn features_are_pinned_filled_and_kept_and_one_collector_runs_at_a_time() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events.jsonl");
    let opts = quiet_options();
    let (crit_kb, events_kb, attrs_kb) = (
        opts.critical_ring_kb,
        opts.events_ring_kb,
        opts.attrs_ring_kb,
    );
    let me = std::process::id();
    let mut checked = false;
    let mut producer_drops = u64::MAX;
    let run = run_collector(opts, &out, || {
        // One thread producing events, idle past a rate window, then more:
        // the next event closes the window, so the EWMA must be non-zero.
        // It waits for a line before producing and before exiting.
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import os, sys, time\nf = os.open('/dev/zero', os.O_RDONLY)\nsys.stdin.readline()\nfor _ in range(25000): os.read(f, 1)\ntime.sleep(0.3)\nfor _ in range(25000): os.read(f, 1)\nprint('done', flush=True)\nsys.stdin.readline()\n",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let tid = child.id();
        let tasks = MapHandle::from_pinned_path(features::task_features_path())
            .expect("task_features pinned");
        // What a dead thread with this tid would have left: another start
        // time, a flood's counts. The live thread must not inherit them.
        let mut left =
            read_task(&vec![0u8; std::mem::size_of::<features::TaskFeatures>()]).unwrap();
        (
            left.start_time_ns,
            left.events_total,
            left.drops_total,
            left.event_rate,
        ) = (1, 1 << 40, 1 << 39, 1 << 30);
        tasks
            .update(&tid.to_ne_bytes(), task_bytes(&left), MapFlags::ANY)
            .unwrap();
        let (mut stdin, mut stdout) = (
            child.stdin.take().unwrap(),
            std::io::BufReader::new(child.stdout.take().unwrap()),
        );
        writeln!(stdin).unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "done");
        // Wait (no deadline assertion) until the consumer has caught up.
        let global = MapHandle::from_pinned_path(features::global_features_path())
            .expect("global_features pinned");
        let read = || {
            read_global(
                &global
                    .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
                    .unwrap()
                    .unwrap(),
            )
            .unwrap()
        };
        let mut g = read();
        for _ in 0..600 {
            if g.produced >= 50_000 && g.consumer_lag < 1000 {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            g = read();
        }
        assert_eq!(g.collector_running, 1);
        assert_eq!(g.nr_consumers, 1);
        assert_eq!(g.consumer_pids[0], me);
        assert_eq!(
            g.ring_size,
            [
                crit_kb as u64 * 1024,
                events_kb as u64 * 1024,
                attrs_kb as u64 * 1024
            ]
        );
        for i in 0..3 {
            assert!(
                g.ring_free_bytes[i] <= g.ring_size[i] && g.ring_free_bytes[i] > 0,
                "ring {i} availability"
            );
        }
        // The levels of custos sched's hold: per ring, the computed
        // floor is what one syscall can write (two events, an attribute
        // record each) times the CPUs times the syscalls in flight. On a
        // ring large enough for the bound the reserve is above it by that
        // much again (the producers' overshoot) and the light tasks'
        // share; on a smaller one the floor is capped, the share above it.
        let cpus = libbpf_rs::num_possible_cpus().unwrap() as u64;
        let floor = features::hold_floor(cpus);
        for (r, &computed) in floor.iter().enumerate() {
            let size = g.ring_size[r];
            let levels = features::hold_levels(computed, size);
            assert_eq!(
                (g.hold_floor_bytes[r], g.hold_reserve_bytes[r]),
                (levels.floor, levels.reserve),
                "ring {r}"
            );
            assert!(g.hold_floor_bytes[r] > 0, "ring {r}");
            let share = size / 16 * features::HOLD_LIGHT_SIXTEENTHS;
            if levels.bounded {
                assert_eq!(levels.floor, computed, "ring {r}");
                assert_eq!(levels.reserve, 2 * computed + share, "ring {r}");
            } else {
                assert!(levels.floor <= size / 16 * features::HOLD_FLOOR_MAX_SIXTEENTHS);
                assert_eq!(levels.reserve - levels.floor, share, "ring {r}");
                assert!(features::hold_min_ring(computed) > size, "ring {r}");
            }
            // The hold ends at half free: above the reserve.
            assert!(g.hold_reserve_bytes[r] < size / 2, "ring {r}");
        }
        // No holding custos sched said it is there: the programs never kick.
        assert_eq!(g.hold_sched_ns, 0);
        let per_cpu = cpus * features::HOLD_IN_FLIGHT;
        assert_eq!(floor[1] % (2 * per_cpu), 0, "{floor:?}");
        assert!(floor[1] > 0 && floor[1] < floor[2], "{floor:?}");
        assert!(floor[2] > 2 * 8192 * per_cpu, "{floor:?}");
        assert_eq!(floor[0], floor[1] + floor[2]);
        assert!(
            g.produced >= 50_000 && g.consumed > 0 && g.updated_ns > 0,
            "{g:?}"
        );
        assert_eq!(g.consumer_lag, g.produced.saturating_sub(g.consumed));

        let t = read_task(
            &tasks
                .lookup(&tid.to_ne_bytes(), MapFlags::ANY)
                .unwrap()
                .expect("the producer has a feature entry"),
        )
        .unwrap();
        assert!(
            t.events_total >= 50_000 && t.events_total < 1 << 40,
            "events_total {}",
            t.events_total
        );
        assert!(t.start_time_ns > 1, "the entry is the live thread's: {t:?}");
        producer_drops = t.drops_total;
        assert!(
            t.event_rate > 0 && t.event_rate < 1 << 30,
            "nr_event EWMA: {t:?}"
        );
        assert!(
            tasks
                .lookup(&me.to_ne_bytes(), MapFlags::ANY)
                .unwrap()
                .is_none(),
            "the collector is not traced"
        );
        // Its entry ends with it.
        drop(stdin);
        assert!(child.wait().unwrap().success());
        assert!(
            tasks
                .lookup(&tid.to_ne_bytes(), MapFlags::ANY)
                .unwrap()
                .is_none(),
            "an exited thread's entry is deleted"
        );

        // A second collector is refused with a message saying why.
        let stop = std::sync::atomic::AtomicBool::new(true);
        let err =
            custos_collector::collect(&quiet_options(), std::io::sink(), &stop, || {}).unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("another custos collector") && msg.contains(&me.to_string()),
            "{msg}"
        );
        checked = true;
    });
    assert!(checked);
    assert!(
        producer_drops <= run.summary.dropped,
        "a task's drops are among the counted drops"
    );
    assert!(run.summary.invariant_holds);
    // The pins stay (a scheduler keeps reading them), marked as no collector running.
    let map_id = |p: std::path::PathBuf| {
        MapHandle::from_pinned_path(p)
            .expect("still pinned")
            .info()
            .unwrap()
            .info
            .id
    };
    let global =
        MapHandle::from_pinned_path(features::global_features_path()).expect("pins kept at exit");
    let g = read_global(
        &global
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(g.collector_running, 0);
    let ids = (
        map_id(features::global_features_path()),
        map_id(features::task_features_path()),
    );

    // Entries of threads that exited while no collector ran (a dead tid, and
    // this very process, which a collector never traces) are dropped by the
    // next collector; a live thread's stays.
    let tasks = MapHandle::from_pinned_path(features::task_features_path()).unwrap();
    let dead = {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        c.wait().unwrap();
        c.id()
    };
    let mut live = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let entry = read_task(&vec![7u8; std::mem::size_of::<features::TaskFeatures>()]).unwrap();
    for tid in [dead, me, live.id()] {
        tasks
            .update(&tid.to_ne_bytes(), task_bytes(&entry), MapFlags::ANY)
            .unwrap();
    }
    // The next collector fills the same maps: a scheduler holding them sees
    // it. Its rings are smaller: from the moment it is ready, what the kept
    // map says of the rings is this collector's, never the last one's
    // (`custos status` once read the last one's sizes with the new pid).
    let sized = custos_collector::Options {
        critical_ring_kb: 512,
        events_ring_kb: 1024,
        attrs_ring_kb: 2048,
        ..quiet_options()
    };
    let mut again = None;
    run_collector(sized, &out, || {
        again = Some(
            read_global(
                &global
                    .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
                    .unwrap()
                    .unwrap(),
            )
            .unwrap(),
        );
    });
    let g = again.unwrap();
    assert_eq!(
        (g.collector_running, g.consumer_pids[0]),
        (1, me),
        "the restarted collector publishes through the kept map"
    );
    let sizes = [512 << 10, 1 << 20, 2 << 20];
    assert_eq!(g.ring_size, sizes, "{g:?}");
    let cpus = libbpf_rs::num_possible_cpus().unwrap() as u64;
    for (r, &computed) in features::hold_floor(cpus).iter().enumerate() {
        let levels = features::hold_levels(computed, sizes[r]);
        assert_eq!(
            (g.hold_floor_bytes[r], g.hold_reserve_bytes[r]),
            (levels.floor, levels.reserve),
            "ring {r}"
        );
        assert!(g.ring_free_bytes[r] <= sizes[r], "ring {r}: {g:?}");
    }
    let has = |tid: u32| {
        tasks
            .lookup(&tid.to_ne_bytes(), MapFlags::ANY)
            .unwrap()
            .is_some()
    };
    assert!(
        !has(dead) && !has(me),
        "entries of gone threads are dropped at start"
    );
    assert!(has(live.id()), "a live thread's entry is kept");
    live.kill().unwrap();
    live.wait().unwrap();
    assert_eq!(
        (
            map_id(features::global_features_path()),
            map_id(features::task_features_path())
        ),
        ids
    );
    assert!(Path::new(PIN_DIR).exists());
}

/// A parent's kin (`kin_rate`, `kin_window_events`): the events of its
/// children, counted at their exit, which the scheduler's light lane reads
/// so that a flood split into short-lived children is not light. A shell
/// that ran five `cat`s has kin; one that ran nothing has none.
#[test]
fn a_parent_counts_its_exited_childrens_events_as_its_kin() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events.jsonl");
    let mut kin = Vec::new();
    run_collector(quiet_options(), &out, || {
        let tasks = MapHandle::from_pinned_path(features::task_features_path())
            .expect("task_features pinned");
        for script in [
            "for i in 1 2 3 4 5; do cat /etc/hostname /etc/passwd >/dev/null; done; echo done; read x || true",
            "echo done; read x || true",
        ] {
            let mut sh = std::process::Command::new("bash")
                .args(["-c", script])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut line = String::new();
            std::io::BufReader::new(sh.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            assert_eq!(line.trim(), "done");
            let t = read_task(
                &tasks
                    .lookup(&sh.id().to_ne_bytes(), MapFlags::ANY)
                    .unwrap()
                    .expect("the shell has a feature entry (its write)"),
            )
            .unwrap();
            kin.push((t.kin_window_events, t.kin_rate, t.events_total));
            drop(sh.stdin.take());
            assert!(sh.wait().unwrap().success());
        }
    });
    eprintln!("kin (open window, rate, own events): {kin:?}");
    let (window, rate, _) = kin[0];
    assert!(
        window > 0 || rate > 0,
        "five cats exited, their shell has no kin: {kin:?}"
    );
    assert_eq!(
        (kin[1].0, kin[1].1),
        (0, 0),
        "a shell that forked nothing has kin: {kin:?}"
    );
}
