//! The provenance features the scheduler reads: pinned, filled, kept for
//! the scheduler and the next collector.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use custos_collector::features::{self, read_global, read_task};
use custos_collector::intf::PIN_DIR;
use libbpf_rs::{MapCore, MapFlags, MapHandle};

#[test]
fn features_are_pinned_filled_and_kept_and_one_collector_runs_at_a_time() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events.jsonl");
    let opts = quiet_options();
    let (crit_kb, events_kb, attrs_kb) = (opts.critical_ring_kb, opts.events_ring_kb, opts.attrs_ring_kb);
    let me = std::process::id();
    let mut checked = false;
    let mut producer_drops = u64::MAX;
    let run = run_collector(opts, &out, || {
        // One thread producing events, idle past a rate window, then more:
        // the next event closes the window, so the EWMA must be non-zero.
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import os, time\nf = os.open('/dev/zero', os.O_RDONLY)\nfor _ in range(25000): os.read(f, 1)\ntime.sleep(0.3)\nfor _ in range(25000): os.read(f, 1)\n",
            ])
            .spawn()
            .unwrap();
        let tid = child.id();
        assert!(child.wait().unwrap().success());
        // Wait (no deadline assertion) until the consumer has caught up.
        let global = MapHandle::from_pinned_path(features::global_features_path()).expect("global_features pinned");
        let read = || read_global(&global.lookup(&0u32.to_ne_bytes(), MapFlags::ANY).unwrap().unwrap()).unwrap();
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
        assert_eq!(g.ring_size, [crit_kb as u64 * 1024, events_kb as u64 * 1024, attrs_kb as u64 * 1024]);
        for i in 0..3 {
            assert!(g.ring_free_bytes[i] <= g.ring_size[i] && g.ring_free_bytes[i] > 0, "ring {i} availability");
        }
        assert!(g.produced >= 50_000 && g.consumed > 0 && g.updated_ns > 0, "{g:?}");
        assert_eq!(g.consumer_lag, g.produced.saturating_sub(g.consumed));

        let tasks = MapHandle::from_pinned_path(features::task_features_path()).expect("task_features pinned");
        let t = read_task(&tasks.lookup(&tid.to_ne_bytes(), MapFlags::ANY).unwrap().expect("the producer has a feature entry")).unwrap();
        assert!(t.events_total >= 50_000, "events_total {}", t.events_total);
        producer_drops = t.drops_total;
        assert!(t.event_rate > 0, "nr_event EWMA: {t:?}");
        assert!(tasks.lookup(&me.to_ne_bytes(), MapFlags::ANY).unwrap().is_none(), "the collector is not traced");

        // A second collector is refused with a message saying why.
        let stop = std::sync::atomic::AtomicBool::new(true);
        let err = custos_collector::collect(&quiet_options(), std::io::sink(), &stop, || {}).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("another custos collector") && msg.contains(&me.to_string()), "{msg}");
        checked = true;
    });
    assert!(checked);
    assert!(producer_drops <= run.summary.dropped, "a task's drops are among the counted drops");
    assert!(run.summary.invariant_holds);
    // The pins stay (a scheduler keeps reading them), marked as no collector running.
    let map_id = |p: std::path::PathBuf| MapHandle::from_pinned_path(p).expect("still pinned").info().unwrap().info.id;
    let global = MapHandle::from_pinned_path(features::global_features_path()).expect("pins kept at exit");
    let g = read_global(&global.lookup(&0u32.to_ne_bytes(), MapFlags::ANY).unwrap().unwrap()).unwrap();
    assert_eq!(g.collector_running, 0);
    let ids = (map_id(features::global_features_path()), map_id(features::task_features_path()));

    // The next collector fills the same maps: a scheduler holding them sees it.
    let mut running_again = 0;
    run_collector(quiet_options(), &out, || {
        let g = read_global(&global.lookup(&0u32.to_ne_bytes(), MapFlags::ANY).unwrap().unwrap()).unwrap();
        running_again = g.collector_running;
    });
    assert_eq!(running_again, 1, "the restarted collector publishes through the kept map");
    assert_eq!((map_id(features::global_features_path()), map_id(features::task_features_path())), ids);
    assert!(Path::new(PIN_DIR).exists());
}
