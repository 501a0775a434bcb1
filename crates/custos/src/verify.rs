//! `custos verify`: checks a sealed stream or archive (docs/tamper-evidence.md).
//!
//! Glue between the seal format (crates/custos-seal, which writes and reads
//! it), the store's input reader (plain, `.zst`, `.gz`) and the store's own
//! chains (custos_store::tamper).

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

use custos_seal::{Report, Verifier};

/// Exit status when the stream is not intact (errors reading it exit 1).
pub const TAMPERED: i32 = 3;

/// Check that a recorded stream is exactly what the collector sealed: no
/// line altered, no batch moved, inserted or deleted, nothing cut off.
/// Exits 0 when intact, 3 when not (each finding is listed), 1 on errors.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The stream (JSON Lines, or an archive: `.zst`, `.gz`); `-` reads stdin;
    /// a directory: the rotated series of segments `custos collect -o DIR
    /// --rotate-mb N` wrote, checked whole and in order.
    #[arg(
        value_name = "FILE",
        required_unless_present = "db",
        conflicts_with = "db"
    )]
    pub file: Option<PathBuf>,
    /// Verify a store instead: every ingest's chain of sealed batches, and
    /// that no loss record it holds was removed from the losses table.
    #[arg(long, value_name = "DB")]
    pub db: Option<PathBuf>,
    /// The public key the seals must carry (64 hex digits, or a file holding
    /// them), as `custos collect` printed it when it made the key. Without
    /// it the stream is checked against the key of its own first seal.
    #[arg(long, value_name = "HEX|FILE")]
    pub key: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: VerifyArgs) -> Result<i32> {
    let pinned = match &args.key {
        Some(k) if std::path::Path::new(k).is_file() => Some(
            std::fs::read_to_string(k)
                .with_context(|| format!("reading the key file {k}"))?
                .trim()
                .to_string(),
        ),
        other => other.clone(),
    };
    if let Some(db) = &args.db {
        return verify_db(db, pinned.as_deref(), args.json);
    }
    let file = args.file.as_ref().expect("clap requires FILE without --db");
    if file.is_dir() {
        return verify_series(file, pinned.as_deref(), args.json);
    }
    let mut verifier = Verifier::new(pinned.as_deref()).context("--key")?;
    let input = custos_store::archive::open_input(file)?;
    custos_seal::for_each_line(input, file, |line| verifier.line(line))?;
    let report = verifier.finish();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&file.display().to_string(), &report);
    }
    Ok(if report.intact { 0 } else { TAMPERED })
}

fn verify_db(db: &std::path::Path, pinned: Option<&str>, json: bool) -> Result<i32> {
    let conn = custos_store::schema::open_ro(db)?;
    let reports = custos_store::tamper::verify_db(&conn, pinned)?;
    let intact = reports.iter().all(|r| r.report.intact);
    if json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        for r in &reports {
            print_report(
                &format!("{} ingest {} ({})", db.display(), r.ingest, r.source),
                &r.report,
            );
        }
        if reports.is_empty() {
            println!("{}: no ingests", db.display());
        }
    }
    Ok(if intact { 0 } else { TAMPERED })
}

fn verify_series(dir: &std::path::Path, pinned: Option<&str>, json: bool) -> Result<i32> {
    let r = custos_seal::series::verify_dir(dir, pinned)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(if r.intact { 0 } else { TAMPERED });
    }
    let (first, last) = match (r.segments.first(), r.segments.last()) {
        (Some(f), Some(l)) => (f, l),
        _ => unreachable!("verify_dir refuses a directory without segments"),
    };
    let rotated = match r.rotated_away {
        0 => String::new(),
        n => format!(
            "; starts at segment {}: the {n} before it were rotated away (--rotate-keep)",
            first.number
        ),
    };
    println!(
        "{}: series of {} segments, {} to {}{rotated}",
        dir.display(),
        r.segments.len(),
        first.name,
        last.name
    );
    let report = Report {
        intact: r.intact,
        lines: r.lines,
        batches_verified: r.batches_verified,
        key: r.key.clone(),
        stream: r.stream.clone(),
        finished: r.finished,
        findings: Vec::new(),
    };
    if r.intact {
        print_report(&dir.display().to_string(), &report);
    } else {
        println!(
            "{}: NOT INTACT: {} finding(s); {} lines, {} batches with a valid seal, key {}",
            dir.display(),
            r.findings.len(),
            r.lines,
            r.batches_verified,
            r.key.as_deref().unwrap_or("none")
        );
        for f in &r.findings {
            let seg = match (&f.segment, f.before) {
                (Some(s), false) => format!(" in {s}"),
                (Some(s), true) => format!(" before {s}"),
                (None, _) => String::new(),
            };
            println!(
                "  {}{seg}{}: {}",
                f.finding.kind,
                place(&f.finding),
                f.finding.message
            );
        }
    }
    Ok(if r.intact { 0 } else { TAMPERED })
}

/// Where a finding is: its batch, lines and times, as far as known.
fn place(f: &custos_seal::Finding) -> String {
    let mut at = String::new();
    if let Some(b) = f.batch {
        at.push_str(&format!(" batch {b}"));
    }
    if let (Some(a), Some(b)) = (f.first_line, f.last_line) {
        at.push_str(&format!(", lines {a}-{b}"));
    }
    match (f.first_time_ns, f.last_time_ns) {
        (Some(t0), Some(t1)) => at.push_str(&format!(
            ", {} to {}",
            custos_store::timefmt::format_ns(t0),
            custos_store::timefmt::format_ns(t1)
        )),
        (Some(t), None) => at.push_str(&format!(", from {}", custos_store::timefmt::format_ns(t))),
        (None, Some(t)) => at.push_str(&format!(", until {}", custos_store::timefmt::format_ns(t))),
        (None, None) => {}
    }
    at
}

fn print_report(name: &str, r: &Report) {
    let key = r.key.as_deref().unwrap_or("none");
    if r.intact {
        println!(
            "{name}: intact: {} lines in {} sealed batches, signed by key {key}",
            r.lines, r.batches_verified
        );
        return;
    }
    println!(
        "{name}: NOT INTACT: {} finding(s); {} lines, {} batches with a valid seal, key {key}",
        r.findings.len(),
        r.lines,
        r.batches_verified
    );
    for f in &r.findings {
        println!("  {}{}: {}", f.kind, place(f), f.message);
    }
}
