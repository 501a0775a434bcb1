//! The configuration file (`--config FILE`, src/config.rs): its values take
//! effect, the command line and the environment override them (also by a
//! flag that conflicts with the file's), and a bad
//! file (unknown table or key, wrong type, a value the flag refuses, a file
//! that cannot be read) is refused with its name before any file is
//! created. `custos ingest` serves as the subcommand: it needs no BPF and
//! its `--db` leaves a visible trace.

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
