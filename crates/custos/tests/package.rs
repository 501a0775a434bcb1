//! The Debian package (make deb) as dpkg would install it: `make package`
//! builds the .deb from the release binary cargo built for this test
//! (the same steps as `make deb` without rebuilding; cargo-deb 3.8.0,
//! scripts/deps.sh), and the test unpacks it into a fresh directory tree
//! with `dpkg-deb -x`: every file where the package's metadata says, the
//! binary runs, the man pages render, the completions load, the config file
//! parses, and the collector's unit from the package, run with its own
//! ExecStart (`--config` the package's config, in the unpacked tree),
//! records with real BPF by that config's values (a changed rotate-mb
//! rotates it) and sets the recording before a restart aside (needs root;
//! a host collector test).

mod unit;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the package puts what (crates/custos/Cargo.toml,
/// [package.metadata.deb]), as paths in the unpacked tree.
const FILES: &[&str] = &[
    "usr/bin/custos",
    "lib/systemd/system/custos-collect.service",
    "lib/systemd/system/custos-sched.service",
    "lib/systemd/system/custos-fleet-ingest.service",
    "etc/custos/custos.toml",
    "usr/share/custos/custos-rules.yml",
    "usr/share/custos/custos-collector.json",
    "usr/share/custos/custos-ingest.json",
    "usr/share/custos/custos-fleet-ingest.json",
    "usr/share/doc/custos/operations.md",
    "usr/share/man/man1/custos.1.gz",
    "usr/share/man/man1/custos-collect.1.gz",
    "usr/share/man/man1/custos-sched.1.gz",
    "usr/share/man/man1/custos-fleet-ingest.1.gz",
    "usr/share/man/man1/custos-status.1.gz",
    "usr/share/bash-completion/completions/custos",
    "usr/share/zsh/vendor-completions/_custos",
    "usr/share/fish/vendor_completions.d/custos.fish",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `make package` into `out`; the path of the .deb. (cargo-deb also
/// deletes any earlier custos .deb in the target dir's debian/: `make deb`'s.)
fn build_deb(out: &Path) -> PathBuf {
    let custos = Path::new(env!("CARGO_BIN_EXE_custos"));
    // The binary cargo built for this test is the one packaged.
    let target = custos.parent().unwrap().parent().unwrap();
    run(Command::new("make")
        .current_dir(workspace())
        .args(["--no-print-directory", "package"])
        .arg(format!("TARGET_DIR={}", target.display()))
        .arg(format!("DEB_OUT={}", out.display())));
    let debs: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    assert_eq!(debs.len(), 1, "{debs:?}");
    debs.into_iter().next().unwrap()
}

#[test]
fn the_package_installs_every_file_and_its_collector_unit_records() {
    let tmp = tempfile::tempdir().unwrap();
    let deb = build_deb(&tmp.path().join("out"));
    let root = tmp.path().join("root");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root));

    let missing: Vec<&&str> = FILES.iter().filter(|f| !root.join(f).is_file()).collect();
    assert!(missing.is_empty(), "not in the package: {missing:?}");

    // The control file: Depends from dpkg-shlibdeps (the libraries the
    // binary links), and the config file kept across upgrades.
    let info = run(Command::new("dpkg-deb").arg("--info").arg(&deb));
    let depends = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("Depends: "))
        .unwrap_or_else(|| panic!("no Depends: {info}"));
    for lib in ["libc6", "libelf1", "zlib1g"] {
        assert!(depends.contains(lib), "Depends: {depends}");
    }
    let conffiles = run(Command::new("dpkg-deb")
        .arg("--info")
        .arg(&deb)
        .arg("conffiles"));
    assert_eq!(conffiles.trim(), "/etc/custos/custos.toml");
    // The units and the config installed are the ones tests/units.rs
    // checks in the tree.
    for name in [
        "lib/systemd/system/custos-collect.service",
        "lib/systemd/system/custos-sched.service",
        "lib/systemd/system/custos-fleet-ingest.service",
        "etc/custos/custos.toml",
    ] {
        let file = Path::new(name).file_name().unwrap();
        let tree = match name.starts_with("etc/") {
            true => workspace().join("deploy").join(file),
            false => workspace().join("deploy/systemd").join(file),
        };
        assert!(
            std::fs::read(&tree).unwrap() == std::fs::read(root.join(name)).unwrap(),
            "{name} differs from {}",
            tree.display()
        );
    }

    let custos = root.join(unit::BIN.trim_start_matches('/'));
    let version = run(Command::new(&custos).arg("--version"));
    assert_eq!(
        version.trim(),
        format!("custos {}", env!("CARGO_PKG_VERSION"))
    );

    // The pages render without groff warnings, and say what clap says.
    for (page, says) in [
        ("custos.1.gz", "custos-collect(1)"),
        ("custos-collect.1.gz", "--set-aside-previous"),
        ("custos-status.1.gz", "3  the collector is not running"),
    ] {
        let out = Command::new("man")
            .arg("-l")
            .arg(root.join("usr/share/man/man1").join(page))
            .env("MANWIDTH", "80")
            // As a user reads them: UTF-8 (the help has "…"), no overstrike.
            .env("LC_ALL", "C.UTF-8")
            .env_remove("MAN_KEEP_FORMATTING")
            .output()
            .expect("man (Debian's man-db)");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "man -l {page}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("SYNOPSIS") && text.contains(says),
            "{page}: {text}"
        );
    }
    // bash loads the completion, and it completes the subcommands.
    let bash = root.join("usr/share/bash-completion/completions/custos");
    let words = run(Command::new("bash").arg("-c").arg(format!(
        "source '{}' && COMP_WORDS=(custos co) COMP_CWORD=1 && _custos custos co custos && echo \"${{COMPREPLY[@]}}\"",
        bash.display()
    )));
    assert_eq!(words.trim(), "collect");

    // The config file as the units will read it, its values the package's
    // but for the paths, moved like the units' (under a temporary
    // directory), and the metrics ports (free ones). It is read only
    // through --config, as the units pass it (a command typed without it
    // reads no file, src/config.rs).
    let state = tmp.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let config = root.join(unit::CONFIG.trim_start_matches('/'));
    let mut file = unit::relocated_config(&std::fs::read_to_string(&config).unwrap(), &state);
    unit::write_config(&file, &config);
    // Every table of the file is checked before --help (src/config.rs).
    run(Command::new(&custos)
        .arg("--config")
        .arg(&config)
        .args(["collect", "--help"]));

    // The package's collector unit, its ExecStart as it is but for the
    // unpacked tree's binary and config (`--config` the unit's own),
    // records where the config says, with its values: here segments of
    // 1 MiB instead of the package's 256, seen rotating; and a restart
    // sets the first recording aside.
    unit::set_config(&mut file, "collect", "rotate-mb", 1);
    unit::write_config(&file, &config);
    let out = PathBuf::from(unit::config_str(&file, "collect", "output"));
    let port: u16 = unit::config_str(&file, "collect", "metrics")
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let service =
        std::fs::read_to_string(root.join("lib/systemd/system/custos-collect.service")).unwrap();
    let text = unit::relocated(&service, &custos, &config);
    let (first, _) = unit::run_collect_unit(&text, &out, port, |o| {
        unit::segments(o).last().is_some_and(|(n, _)| *n >= 2)
    });
    let closed = std::fs::metadata(&unit::segments(&out)[0].1).unwrap().len();
    assert!(
        (1 << 20..16 << 20).contains(&closed),
        "a closed segment of {closed} bytes with rotate-mb 1"
    );
    let (second, _) = unit::run_collect_unit(&text, &out, port, unit::recorded_an_open);
    let aside = unit::set_aside(&out);
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(unit::recording(&aside[0]) == first && second != first);
}
