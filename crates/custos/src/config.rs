//! The configuration file, read only when a command is given
//! `--config FILE`: one table per subcommand (`[collect]`, `[sched]`,
//! `[fleet-ingest]`), whose keys are that subcommand's long flags, so a
//! service is configured without editing its command line
//! (docs/operations.md). The package installs one at
//! /etc/custos/custos.toml, and the units pass exactly `--config` that
//! file. No file is read by default: a command typed by hand must not
//! inherit the service's output, rotation and set-aside, and would if it
//! read the service's file by itself (issue 34).
//!
//! The file is turned into `--key=value` arguments placed before the
//! user's own, and clap then parses everything as usual: the file gets
//! exactly the command line's validation, and the set of valid keys is
//! clap's own (one definition, no list kept here). A file's key the
//! command line overrides is left out: directly, by a flag that conflicts
//! with it, or by another option of a `with-…` group that holds it (the
//! collector's `with-output`: a typed -o is not given the file's
//! --rotate-mb, which describes the file's output).

use anyhow::{anyhow, bail, Context, Result};
use std::ffi::OsString;
use std::path::PathBuf;

/// Flags that belong to clap or to the file itself, never to a table.
const NOT_KEYS: &[&str] = &["help", "version", "config"];

/// `argv` with the options of the running subcommand's table of the
/// `--config` file inserted after the subcommand's name, unless the
/// command line sets them itself; and, when any were, `FILE [table]` for
/// an error's context. Without `--config`, `argv` as it is.
pub fn expand(cmd: &clap::Command, argv: Vec<OsString>) -> Result<(Vec<OsString>, Option<String>)> {
    // Without --config, no file: not even the one the package installs.
    let Some(path) = config_flag(&argv)? else {
        return Ok((argv, None));
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("the config file {} is not valid TOML", path.display()))?;
    let file = path.display().to_string();
    // Every table is checked, not just the running one: a typo in
    // [sched] is reported the first time any custos command reads it.
    let mut tables = Vec::new();
    for (name, value) in &table {
        let sub = find_subcommand(cmd, name).ok_or_else(|| {
            let names = leaf_names(cmd, "");
            anyhow!(
                "{file}: unknown table [{name}]{}; tables are named after the subcommands: {}",
                suggest(name, names.iter().map(String::as_str)),
                names.join(", ")
            )
        })?;
        let toml::Value::Table(t) = value else {
            bail!("{file}: `{name}` must be a table ([{name}] with the flags under it), not a single value");
        };
        tables.push((name.as_str(), sub, to_args(&file, name, sub, t)?));
    }
    let (at, running) = subcommand_path(cmd, &argv);
    let Some((_, sub, extra)) = tables.into_iter().find(|(n, _, _)| *n == running) else {
        return Ok((argv, None));
    };
    let user = &argv[at..];
    let mut out = argv[..at].to_vec();
    for (arg, value) in extra {
        if !given(arg, user) && !overridden(sub, arg, user) {
            out.extend(value);
        }
    }
    let used = out.len() > at;
    out.extend_from_slice(user);
    Ok((out, used.then(|| format!("{file} [{running}]"))))
}

/// The value of `--config` (`--config F` or `--config=F`) anywhere
/// before `--`.
fn config_flag(argv: &[OsString]) -> Result<Option<PathBuf>> {
    let mut it = argv.iter().skip(1);
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--") => break,
            Some("--config") => {
                let v = it.next().ok_or_else(|| anyhow!("--config needs a FILE"))?;
                return Ok(Some(PathBuf::from(v)));
            }
            Some(s) if s.starts_with("--config=") => {
                return Ok(Some(PathBuf::from(&s["--config=".len()..])))
            }
            _ => {}
        }
    }
    Ok(None)
}

/// Where the subcommand's own arguments start in `argv`, and the table
/// name of the subcommand (`fleet ingest` → `fleet-ingest`).
fn subcommand_path(cmd: &clap::Command, argv: &[OsString]) -> (usize, String) {
    let mut cur = cmd;
    let mut names: Vec<&str> = Vec::new();
    let mut i = 1;
    while i < argv.len() {
        let Some(a) = argv[i].to_str() else { break };
        if a == "--config" {
            i += 2;
            continue;
        }
        if a.starts_with('-') {
            i += 1;
            continue;
        }
        match cur.find_subcommand(a) {
            Some(s) => {
                names.push(s.get_name());
                cur = s;
                i += 1;
                if !cur.has_subcommands() {
                    break;
                }
            }
            None => break,
        }
    }
    (i.min(argv.len()), names.join("-"))
}

/// The leaf subcommand a table name stands for.
fn find_subcommand<'a>(cmd: &'a clap::Command, table: &str) -> Option<&'a clap::Command> {
    cmd.get_subcommands().find_map(|s| {
        let name = s.get_name();
        if !s.has_subcommands() {
            return (name == table).then_some(s);
        }
        let rest = table.strip_prefix(name)?.strip_prefix('-')?;
        find_subcommand(s, rest)
    })
}

fn leaf_names(cmd: &clap::Command, prefix: &str) -> Vec<String> {
    cmd.get_subcommands()
        .filter(|s| s.get_name() != "help")
        .flat_map(|s| {
            let name = format!("{prefix}{}", s.get_name());
            match s.has_subcommands() {
                true => leaf_names(s, &format!("{name}-")),
                false => vec![name],
            }
        })
        .collect()
}

/// ` (did you mean `x`?)` for the closest candidate, if any is close.
fn suggest<'a>(key: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    candidates
        .map(|c| (strsim::jaro(key, c), c))
        .filter(|(score, _)| *score > 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

/// Each key of `[table]` as its clap argument and the arguments it becomes.
fn to_args<'a>(
    file: &str,
    table: &str,
    sub: &'a clap::Command,
    t: &toml::Table,
) -> Result<Vec<(&'a clap::Arg, Vec<OsString>)>> {
    let longs = || {
        sub.get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| !NOT_KEYS.contains(l))
    };
    let mut out = Vec::new();
    for (key, value) in t {
        let arg = sub
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()) && !NOT_KEYS.contains(&key.as_str()))
            .ok_or_else(|| {
                anyhow!(
                    "{file}: unknown key `{key}` in [{table}]{}; the keys are `custos {}`'s long flags",
                    suggest(key, longs()),
                    table.replace('-', " ")
                )
            })?;
        let is_flag = !arg.get_action().takes_values();
        let many = matches!(arg.get_action(), clap::ArgAction::Append);
        let wrong = |want: &str| {
            anyhow!(
                "{file}: `{key}` in [{table}] must be {want}, not {} ({})",
                value.type_str(),
                value
            )
        };
        let scalar = |v: &toml::Value| -> Result<OsString> {
            let s = match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                _ => return Err(wrong("a string or a number")),
            };
            Ok(format!("--{key}={s}").into())
        };
        let args = match value {
            toml::Value::Boolean(b) if is_flag => match b {
                true => vec![OsString::from(format!("--{key}"))],
                false => vec![],
            },
            _ if is_flag => return Err(wrong("true or false (it is a flag)")),
            toml::Value::Array(items) if many => {
                items.iter().map(scalar).collect::<Result<Vec<_>>>()?
            }
            toml::Value::Array(_) => return Err(wrong("a single value")),
            v => vec![scalar(v)?],
        };
        out.push((arg, args));
    }
    Ok(out)
}

/// The prefix of the groups of options that go together (`with-output`:
/// -o, --rotate-mb, --rotate-keep). Only these are honoured: clap's derive
/// also makes a group of every field of each `#[derive(Args)]` struct,
/// named after it, whose members have nothing to do with each other.
const TOGETHER: &str = "with-";

/// Whether the user set a flag that `arg` conflicts with (`--force`
/// against the file's `set-aside-previous`), or another option of a
/// `with-…` group that holds `arg` (`-o` against the file's `rotate-mb`):
/// the user's choice wins over the file's, as it does for `arg` itself,
/// instead of a conflict the user never typed or the file's value applied
/// to what the user typed.
fn overridden(sub: &clap::Command, arg: &clap::Arg, user: &[OsString]) -> bool {
    let id = arg.get_id();
    let against = sub.get_arg_conflicts_with(arg);
    let together: Vec<&clap::Id> = sub
        .get_groups()
        .filter(|g| g.get_id().as_str().starts_with(TOGETHER))
        .filter(|g| g.get_args().any(|a| a == id))
        .flat_map(|g| g.get_args())
        .collect();
    sub.get_arguments()
        .filter(|other| other.get_id() != id)
        .filter(|other| {
            against.iter().any(|a| a.get_id() == other.get_id())
                || sub
                    .get_arg_conflicts_with(other)
                    .iter()
                    .any(|a| a.get_id() == id)
                || together.contains(&other.get_id())
        })
        .any(|other| given(other, user))
}

/// Whether the user set `arg` on the command line (long or short form) or
/// through its environment variable (`CUSTOS_DB`), in which case the file's
/// value is left out: the command line, then the environment, then the
/// file, as a unit's `Environment=` expects.
fn given(arg: &clap::Arg, user: &[OsString]) -> bool {
    if arg.get_env().is_some_and(|e| std::env::var_os(e).is_some()) {
        return true;
    }
    let long = arg.get_long().map(|l| format!("--{l}"));
    let short = arg.get_short();
    for a in user {
        let Some(a) = a.to_str() else { continue };
        if a == "--" {
            break;
        }
        if let Some(l) = &long {
            if a == l
                || a.strip_prefix(l.as_str())
                    .is_some_and(|r| r.starts_with('='))
            {
                return true;
            }
        }
        if let (Some(c), Some(rest)) = (short, a.strip_prefix('-')) {
            if !rest.starts_with('-') && rest.starts_with(c) {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    /// A command typed without --config reads no file, whatever exists at
    /// /etc/custos/custos.toml: its arguments are parsed as typed.
    #[test]
    fn without_config_the_arguments_are_left_as_typed() {
        let cmd = crate::Cli::command();
        for argv in [
            &["custos", "collect", "--", "make"][..],
            &["custos", "collect", "-o", "x.jsonl", "--", "make"],
            &["custos", "sched"],
            &["custos", "fleet", "ingest"],
            &["custos", "ingest", "--db", "s.db"],
            // After `--`, `--config` is the workload's.
            &[
                "custos",
                "collect",
                "--",
                "make",
                "--config",
                "/nonexistent",
            ],
        ] {
            let (out, from) = expand(&cmd, args(argv)).unwrap();
            assert_eq!(out, args(argv));
            assert_eq!(from, None, "{argv:?}");
        }
    }

    /// The file's output options go with its output: a typed -o is not
    /// given its rotate-mb and rotate-keep, a typed --rotate-mb not its
    /// output; its other keys still apply.
    #[test]
    fn a_typed_option_of_a_with_group_leaves_out_the_files_others() {
        let cmd = crate::Cli::command();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("custos.toml");
        std::fs::write(
            &file,
            "[collect]\noutput = \"/srv/events\"\nrotate-mb = 256\nrotate-keep = 64\nmetrics = \"127.0.0.1:9464\"\n",
        )
        .unwrap();
        let file = file.to_str().unwrap();
        let expanded = |typed: &[&str]| {
            let mut argv = vec!["custos", "--config", file, "collect"];
            argv.extend(typed);
            let (out, _) = expand(&cmd, args(&argv)).unwrap();
            // The file's keys in any order, then the typed arguments.
            let mut out: Vec<String> = out
                .into_iter()
                .skip(4)
                .map(|a| a.into_string().unwrap())
                .collect();
            let file_keys = out.len() - typed.len();
            assert_eq!(out[file_keys..], *typed);
            out[..file_keys].sort();
            out
        };
        assert_eq!(
            expanded(&[]),
            [
                "--metrics=127.0.0.1:9464",
                "--output=/srv/events",
                "--rotate-keep=64",
                "--rotate-mb=256"
            ]
        );
        for typed in [
            &["-o", "x.jsonl"][..],
            &["-ox.jsonl"],
            &["--output=x.jsonl"],
        ] {
            let mut want = vec!["--metrics=127.0.0.1:9464"];
            want.extend(typed);
            assert_eq!(expanded(typed), want, "{typed:?}");
        }
        assert_eq!(
            expanded(&["--rotate-mb", "1"]),
            ["--metrics=127.0.0.1:9464", "--rotate-mb", "1"]
        );
        // Only the groups named `with-…`: the derive's group of every
        // field of the collector's options does not tie --metrics to -o.
        assert!(cmd
            .find_subcommand("collect")
            .unwrap()
            .get_groups()
            .any(|g| g.get_id() == "CollectArgs"
                && g.get_args().any(|a| a == "metrics")
                && g.get_args().any(|a| a == "output")));
    }
}
