//! `make demo`, end to end (scripts/demo.sh): the scripted attack during a
//! 16-worker flood in the sched_ext VM, under the default scheduler and under
//! Custos, put in the store and asked step by step. Under Custos every step
//! is recorded, nothing is lost and every answer is complete; under the
//! default scheduler the rings overflow, and no answer that misses a step
//! claims to be complete.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

#[test]
fn the_demo_records_every_step_under_custos_and_says_what_the_default_lost() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(root.join("scripts/demo.sh"))
        .arg("--out")
        .arg(out.path())
        .current_dir(&root)
        .output()
        .expect("run scripts/demo.sh");
    let stderr = String::from_utf8_lossy(&run.stderr);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "demo failed:\n{stderr}\n{stdout}");
    assert!(
        stdout.contains("index.html"),
        "the demo names where its pictures are: {stdout}"
    );
    for f in [
        "index.html",
        "summary.txt",
        "timeline.svg",
        "timeline.png",
        "custos-graph.svg",
        "custos-graph.png",
    ] {
        assert!(out.path().join(f).exists(), "{f} missing; {stdout}");
    }
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("summary.json")).unwrap())
            .unwrap();
    let runs = &summary["schedulers"];
    let n = |s: &str, k: &str| {
        runs[s][k]
            .as_u64()
            .unwrap_or_else(|| panic!("{s}.{k} in {summary}"))
    };

    // Custos: nothing lost, every step found, every answer complete.
    let custos = &runs["custos"];
    assert_eq!(custos["sched_ext_state"], "enabled", "{custos}");
    assert_eq!(
        n("custos", "lost") + n("custos", "incomplete"),
        0,
        "Custos lost events: {custos}"
    );
    let steps = custos["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 5);
    for st in steps {
        assert_eq!(
            (&st["recorded"], &st["complete"]),
            (&Value::Bool(true), &Value::Bool(true)),
            "{st}"
        );
    }

    // The default scheduler: the flood overflows its rings (records refused,
    // not only syscalls skipped), and what is missing is never called complete.
    assert!(
        n("default", "dropped") > 0,
        "the default scheduler's rings did not overflow: {}",
        runs["default"]
    );
    for st in runs["default"]["steps"].as_array().unwrap() {
        assert!(
            st["recorded"] == true || st["complete"] != true,
            "a step is missing, yet its answer says complete: {st}"
        );
    }
    assert!(std::fs::read_to_string(out.path().join("index.html"))
        .unwrap()
        .contains("timeline.svg"));
}
