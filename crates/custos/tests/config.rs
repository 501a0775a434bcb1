//! The configuration file (`--config FILE`, src/config.rs; without it no
//! file is read, which src/config.rs's own tests check, as a test cannot
//! write the host's /etc): its values take effect, the command line and
//! the environment override them (also by a flag that conflicts with the
//! file's), and a bad file (unknown table or key, wrong type, a value the
//! flag refuses, a file that cannot be read) is refused with its name
//! before any file is created. `custos ingest` serves as the subcommand:
//! it needs no BPF and its `--db` leaves a visible trace. And a typed
//! `collect -o FILE` records to that file, not given the file's
//! rotate-mb, which describes the file's output: that one needs root
//! (BPF); a host collector test.

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn custos(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(args)
        .current_dir(dir)
        .env_remove("CUSTOS_DB")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The names in `dir`, sorted, without SQLite's lock files.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with("-lock"))
        .collect();
    v.sort();
    v
}

fn config(dir: &Path, body: &str) -> String {
    let p = dir.join("custos.toml");
    std::fs::write(&p, body).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn the_files_values_take_effect_and_the_command_line_and_environment_override_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = config(dir, "[ingest]\ndb = \"from-file.db\"\n");

    // Both spellings of --config, and the flag before or after the subcommand.
    for args in [
        vec!["--config", cfg.as_str(), "ingest"],
        vec!["ingest", &format!("--config={cfg}")],
    ] {
        let out = custos(dir, &args, &[]);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    assert_eq!(names(dir), ["custos.toml", "from-file.db"]);

    // The command line wins.
    let out = custos(dir, &["--config", &cfg, "ingest", "--db", "cli.db"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // So does the flag's environment variable.
    let out = custos(
        dir,
        &["--config", &cfg, "ingest"],
        &[("CUSTOS_DB", "env.db")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        names(dir),
        ["cli.db", "custos.toml", "env.db", "from-file.db"]
    );

    // A flag set to true is given; set to false, it is left out.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = config(dir, "[ingest]\narchive = \"a.zst\"\narchive-only = true\n");
    let out = custos(dir, &["--config", &cfg, "ingest"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        names(dir),
        ["a.zst", "custos.toml"],
        "--archive-only: no store"
    );
    let cfg = config(
        dir,
        "[ingest]\narchive = \"b.zst\"\narchive-only = false\ndb = \"s.db\"\n",
    );
    let out = custos(dir, &["--config", &cfg, "ingest"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(names(dir), ["a.zst", "b.zst", "custos.toml", "s.db"]);

    // A flag on the command line also overrides the file's keys that
    // conflict with it, in both directions: no conflict the user never typed.
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let cfg = config(d, "[ingest]\ndb = \"s.db\"\nno-seal = true\n");
    let out = custos(d, &["--config", &cfg, "ingest", "--seal-key", "k1"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        names(d),
        ["custos.toml", "k1", "k1.pub", "s.db"],
        "sealed with k1"
    );
    let cfg = config(d, "[ingest]\ndb = \"s.db\"\nseal-key = \"k2\"\n");
    let out = custos(d, &["--config", &cfg, "ingest", "--no-seal"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        names(d),
        ["custos.toml", "k1", "k1.pub", "s.db"],
        "no key made"
    );
    // Both typed: clap's refusal, as without a file.
    let out = custos(
        d,
        &["--config", &cfg, "ingest", "--no-seal", "--seal-key", "k3"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("cannot be used with"));

    // Another subcommand's table does not apply to ingest, but is checked
    // (a_bad_file_is_refused...).
    let cfg = config(dir, "[collect]\noutput = \"events.jsonl\"\n");
    let out = custos(dir, &["--config", &cfg, "ingest", "--db", "plain.db"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        names(dir),
        ["a.zst", "b.zst", "custos.toml", "plain.db", "s.db"]
    );
}

#[test]
fn a_bad_file_is_refused_with_its_name_before_any_file_is_created() {
    let cases: &[(&str, &[&str])] = &[
        // A typo in a key: the closest flag is suggested.
        (
            "[ingest]\ndbb = \"x.db\"\n",
            &["unknown key `dbb` in [ingest]", "did you mean `db`?"],
        ),
        // A typo in a table, even one the running command does not read.
        (
            "[colect]\noutput = \"e.jsonl\"\n[ingest]\ndb = \"x.db\"\n",
            &["unknown table [colect]", "did you mean `collect`?"],
        ),
        // A table that is a value.
        ("ingest = \"x.db\"\n", &["`ingest` must be a table"]),
        // A flag given a string, a value given a boolean or a list.
        (
            "[ingest]\nquiet = \"yes\"\n",
            &["`quiet` in [ingest] must be true or false"],
        ),
        (
            "[ingest]\nbatch = true\n",
            &["`batch` in [ingest] must be a string or a number"],
        ),
        (
            "[ingest]\ndb = [\"a.db\", \"b.db\"]\n",
            &["`db` in [ingest] must be a single value"],
        ),
        // Not TOML at all.
        ("[ingest\ndb = \"x.db\"\n", &["is not valid TOML"]),
        // The keys are flags, not clap's own or the file's.
        ("[ingest]\nhelp = true\n", &["unknown key `help`"]),
        (
            "[ingest]\nconfig = \"other.toml\"\n",
            &["unknown key `config`"],
        ),
    ];
    for (body, why) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let cfg = config(dir, body);
        let out = custos(dir, &["--config", &cfg, "ingest"], &[]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{body}: {err}");
        assert!(
            err.contains(&cfg),
            "{body}: the error names the file: {err}"
        );
        for w in *why {
            assert!(err.contains(w), "{body}: expected {w:?} in: {err}");
        }
        assert_eq!(names(dir), ["custos.toml"], "{body}: {err}");
    }

    // A value the flag itself refuses: clap's error, and where it came from.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = config(dir, "[ingest]\nbatch = \"many\"\ndb = \"x.db\"\n");
    let out = custos(dir, &["--config", &cfg, "ingest"], &[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--batch"), "{err}");
    assert!(
        err.contains(&format!("options were also read from {cfg} [ingest]")),
        "{err}"
    );
    assert_eq!(names(dir), ["custos.toml"]);

    // A --config that cannot be read (missing, or given no FILE).
    let missing = dir.join("missing.toml").to_string_lossy().into_owned();
    let out = custos(dir, &["--config", &missing, "ingest", "--db", "x.db"], &[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot read the config file") && err.contains(&missing),
        "{err}"
    );
    let out = custos(dir, &["ingest", "--db", "x.db", "--config"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--config needs a FILE"));
    assert_eq!(names(dir), ["custos.toml"]);
}

/// The file's rotate-mb and rotate-keep go with its output (the
/// collector's `with-output` group): a typed -o FILE records to that file,
/// one stream, and the file's directory is not made; not a directory of
/// segments at FILE (or "is not a directory" if FILE exists) for the
/// file's --rotate-mb applied to the typed FILE.
#[test]
fn a_typed_output_is_not_given_the_files_rotation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let series = dir.join("events");
    let cfg = config(
        dir,
        &format!(
            "[collect]\noutput = \"{}\"\nrotate-mb = 1\nrotate-keep = 2\n",
            series.display()
        ),
    );
    let out = custos(
        dir,
        &[
            "--config",
            &cfg,
            "collect",
            "-o",
            "typed.jsonl",
            "--",
            "cat",
            "/etc/hostname",
        ],
        &[],
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(names(dir), ["custos.toml", "typed.jsonl"], "{err}");
    // One stream, not a directory of segments the file's rotate-mb would
    // have made of it.
    let typed = dir.join("typed.jsonl");
    assert!(
        typed.is_file(),
        "{} is not a file: {:?}",
        typed.display(),
        std::fs::read_dir(&typed).map(|d| d.count())
    );
    // The whole recording, in the typed file: the command's exec and the
    // final account.
    let stream = std::fs::read_to_string(dir.join("typed.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = stream
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "event" && l.to_string().contains("/etc/hostname")),
        "{stream}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "stats" && l["final"] == true),
        "{stream}"
    );
}
