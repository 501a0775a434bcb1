//! The store benchmark (bench/store/README.md): generates LPM-scale synthetic
//! provenance, ingests it, and measures ingest rate, bytes per event against
//! gzip of the JSON Lines, and ancestry latency (worst case and random nodes,
//! cold and warm; BFS engine and recursive CTE side by side).

use anyhow::{Context, Result};
use clap::Parser;
use custos_store::query::{self, Direction, Window};
use custos_store::synth::{self, Rng, SynthConfig};
use custos_store::{IngestOptions, Ingestor};
use serde_json::json;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The same allocator as the `custos` binary, so the ingest measured is the one shipped.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "Benchmark the Custos provenance store at LPM scale")]
struct Args {
    /// Generator seed (same seed, same stream).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fraction of LPM scale (1.0 = ≥6.5 M nodes).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Where the JSON Lines and the database go (several GB at full scale).
    #[arg(long, default_value = "bench/store/out")]
    work: PathBuf,
    /// The results file.
    #[arg(long, default_value = "bench/store/results.json")]
    results: PathBuf,
    /// Lines per ingest transaction.
    #[arg(long, default_value_t = 50_000)]
    batch: usize,
    /// Reuse an existing events.jsonl and database from --work (only re-measure queries).
    #[arg(long)]
    queries_only: bool,
    /// Only repeat the worst-case ancestry this many times (for profiling), then exit.
    #[arg(long, hide = true)]
    profile_node: Option<i64>,
    /// Reuse the events.jsonl in --work (same seed and scale) but ingest it again.
    #[arg(long)]
    reuse_stream: bool,
    /// Only ingest (for A/B runs of the ingest): print its rate and CPU time, write no results.
    #[arg(long, hide = true)]
    ingest_only: bool,
}

/// This process's user and system CPU seconds so far (Linux, from /proc; NaN elsewhere).
fn cpu_seconds() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<f64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    match f[..] {
        // Clock ticks; 100 per second on Linux.
        [u, s] => (u / 100.0, s / 100.0),
        _ => (f64::NAN, f64::NAN),
    }
}

/// The level `custos collect --archive x.zst` writes.
const ARCHIVE_ZSTD_LEVEL: i32 = custos_store::archive::ZSTD_LEVEL;

/// Counts bytes written (for the gzip size without storing the .gz).
struct Counter(u64);
impl Write for Counter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct Tee<A: Write, B: Write>(A, B);
impl<A: Write, B: Write> Write for Tee<A, B> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(b)?;
        self.1.write_all(b)?;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()?;
        self.1.flush()
    }
}

/// Empties the kernel page cache so the next query reads from disk (root only).
fn drop_caches() -> bool {
    unsafe_sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}
fn unsafe_sync() {
    let _ = std::process::Command::new("sync").status();
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.work)
        .with_context(|| format!("creating {}", args.work.display()))?;
    let jsonl = args.work.join("events.jsonl");
    let db = args.work.join("store.db");
    let cfg = if args.scale >= 1.0 {
        SynthConfig::lpm(args.seed)
    } else {
        SynthConfig::scaled(args.seed, args.scale)
    };
    let meta_path = args.work.join("generated.json");
    if let Some(node) = args.profile_node {
        let conn = custos_store::schema::open_ro(&db)?;
        for _ in 0..5 {
            let t = Instant::now();
            let n = query::ancestor_ids(&conn, node)?.len();
            eprintln!("store-bench: {n} ancestors in {:.2} ms", ms(t.elapsed()));
        }
        let t = Instant::now();
        for _ in 0..100 {
            query::ancestor_ids(&conn, node)?;
        }
        eprintln!("store-bench: mean {:.2} ms", ms(t.elapsed()) / 100.0);
        return Ok(());
    }

    let (report_links, report_chains, events, lines, gzip_bytes, zstd_bytes, jsonl_bytes, gen_s) =
        if args.queries_only || args.reuse_stream {
            let m: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(&meta_path)
                    .context("--queries-only needs a previous run")?,
            )?;
            let links: Vec<(String, u64)> = serde_json::from_value(m["link_outputs"].clone())?;
            let chains: Vec<String> = serde_json::from_value(m["chain_outputs"].clone())?;
            let zstd_bytes = match m["zstd_bytes"].as_u64() {
                Some(z) => z,
                // A stream kept by a version that did not measure it.
                None => {
                    eprintln!("store-bench: compressing the kept stream with zstd -{ARCHIVE_ZSTD_LEVEL} to size it");
                    let mut enc =
                        zstd::stream::write::Encoder::new(Counter(0), ARCHIVE_ZSTD_LEVEL)?;
                    std::io::copy(&mut std::fs::File::open(&jsonl)?, &mut enc)?;
                    let z = enc.finish()?.0;
                    let mut m = m.clone();
                    m["zstd_bytes"] = json!(z);
                    std::fs::write(&meta_path, serde_json::to_string_pretty(&m)?)?;
                    z
                }
            };
            (
                links,
                chains,
                m["events"].as_u64().unwrap_or(0),
                m["lines"].as_u64().unwrap_or(0),
                m["gzip_bytes"].as_u64().unwrap_or(0),
                zstd_bytes,
                m["jsonl_bytes"].as_u64().unwrap_or(0),
                m["generate_seconds"].as_f64().unwrap_or(f64::NAN),
            )
        } else {
            if args.scale >= 1.0 && args.work.join("generated.json").exists() {
                eprintln!(
                    "store-bench: note: --reuse-stream would skip regenerating {}",
                    jsonl.display()
                );
            }
            eprintln!(
                "store-bench: generating ~{} events (seed {}) into {}",
                cfg.units * 19,
                args.seed,
                jsonl.display()
            );
            let t = Instant::now();
            let file = BufWriter::with_capacity(4 << 20, std::fs::File::create(&jsonl)?);
            let gz = flate2::write::GzEncoder::new(Counter(0), flate2::Compression::default());
            let zst = zstd::stream::write::Encoder::new(Counter(0), ARCHIVE_ZSTD_LEVEL)?;
            let mut tee = Tee(file, Tee(gz, zst));
            let expect = cfg.units * 19;
            let mut last = Instant::now();
            let report = synth::generate(&cfg, &mut tee, |ev| {
                if last.elapsed() >= Duration::from_secs(5) {
                    eprintln!(
                        "store-bench: generated {ev} events ({:.0}%)",
                        100.0 * ev as f64 / expect as f64
                    );
                    last = Instant::now();
                }
            })?;
            let Tee(mut file, Tee(gz, zst)) = tee;
            file.flush()?;
            let gzip_bytes = gz.finish()?.0;
            let zstd_bytes = zst.finish()?.0;
            let jsonl_bytes = std::fs::metadata(&jsonl)?.len();
            let gen_s = t.elapsed().as_secs_f64();
            eprintln!("store-bench: {} events, {} lines, {jsonl_bytes} bytes JSONL, {gzip_bytes} bytes gzip, {gen_s:.0}s", report.events, report.lines);
            std::fs::write(
                &meta_path,
                serde_json::to_string_pretty(&json!({
                    "events": report.events, "lines": report.lines, "gzip_bytes": gzip_bytes, "zstd_bytes": zstd_bytes, "jsonl_bytes": jsonl_bytes,
                    "link_outputs": report.link_outputs, "chain_outputs": report.chain_outputs, "generate_seconds": gen_s,
                }))?,
            )?;
            (
                report.link_outputs,
                report.chain_outputs,
                report.events,
                report.lines,
                gzip_bytes,
                zstd_bytes,
                jsonl_bytes,
                gen_s,
            )
        };

    let mut ingest_s = f64::NAN;
    if !args.queries_only {
        for ext in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
        }
        // Sealed, as `custos ingest` is by default (docs/tamper-evidence.md).
        let (key, _) = custos_seal::SealKey::load_or_create(&args.work.join("seal.key"))?;
        let opts = IngestOptions {
            batch_lines: args.batch,
            source: jsonl.display().to_string(),
            seal_key: Some(key),
            ..Default::default()
        };
        let mut ing = Ingestor::open(&db, opts)?;
        let mut input = BufReader::with_capacity(256 << 10, std::fs::File::open(&jsonl)?);
        let mut buf = Vec::with_capacity(1024);
        let t = Instant::now();
        let cpu0 = cpu_seconds();
        let mut last = Instant::now();
        loop {
            buf.clear();
            if input.read_until(b'\n', &mut buf)? == 0 {
                break;
            }
            if buf.last() == Some(&b'\n') {
                buf.pop();
            }
            ing.push_bytes(&buf)?;
            if last.elapsed() >= Duration::from_secs(10) {
                let s = ing.summary();
                eprintln!(
                    "store-bench: ingested {} / {lines} lines ({:.0}%), {:.0} events/s",
                    s.lines,
                    100.0 * s.lines as f64 / lines as f64,
                    s.events_new as f64 / t.elapsed().as_secs_f64()
                );
                last = Instant::now();
            }
        }
        let (summary, _) = ing.finish()?;
        ingest_s = t.elapsed().as_secs_f64();
        eprintln!("store-bench: ingest done in {ingest_s:.0}s: {summary:?}");
        if args.ingest_only {
            let cpu1 = cpu_seconds();
            let (user, sys) = (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1);
            println!(
                "{{\"ingest_events_per_s\": {:.0}, \"ingest_seconds\": {ingest_s:.3}, \"user_s\": {user:.2}, \"sys_s\": {sys:.2}, \"events_new\": {}}}",
                summary.events_new as f64 / ingest_s,
                summary.events_new
            );
            return Ok(());
        }
        std::fs::write(
            args.work.join("ingest.json"),
            serde_json::to_string_pretty(&json!({"ingest_seconds": ingest_s, "summary": summary}))?,
        )?;
    } else if let Ok(t) = std::fs::read_to_string(args.work.join("ingest.json")) {
        let v: serde_json::Value = serde_json::from_str(&t)?;
        ingest_s = v["ingest_seconds"].as_f64().unwrap_or(f64::NAN);
    }
    let db_bytes = std::fs::metadata(&db)?.len()
        + std::fs::metadata(format!("{}-wal", db.display()))
            .map(|m| m.len())
            .unwrap_or(0);

    let conn = custos_store::schema::open_ro(&db)?;
    let nodes: i64 = custos_store::nodes::count(&conn)?;
    let edges: i64 = custos_store::effects::count(&conn)?;
    let max_node: i64 = custos_store::nodes::next_node(&conn)? - 1;
    eprintln!("store-bench: graph has {nodes} nodes, {edges} edges");

    // The worst case: the largest link outputs are the candidates by construction; measure them all.
    let mut worst = (0i64, 0usize, String::new());
    for (path, _) in report_links.iter().take(5) {
        let n = query::resolve(&conn, path, true)?[0];
        let (d, _) = query::traverse(&conn, &[n], Direction::Ancestors, None, Window::default())?;
        if d.len() - 1 > worst.1 {
            worst = (n, d.len() - 1, path.clone());
        }
    }
    let worst_node = worst.0;
    eprintln!(
        "store-bench: worst-case node {worst_node} ({}) has {} ancestors",
        worst.2, worst.1
    );

    // The ancestry query proper (LPM's measure): the set of ancestors of one node.
    let cold_ok = drop_caches();
    let conn = custos_store::schema::open_ro(&db)?;
    let t = Instant::now();
    let d = query::ancestor_ids(&conn, worst_node)?;
    let worst_cold = ms(t.elapsed());
    assert_eq!(d.len(), worst.1);
    let mut warm = Vec::new();
    for _ in 0..21 {
        let t = Instant::now();
        query::ancestor_ids(&conn, worst_node)?;
        warm.push(ms(t.elapsed()));
    }
    let worst_warm = median(&mut warm);
    // The same walk returning every edge with its depth (what answers and pictures need).
    let mut with_edges = Vec::new();
    for _ in 0..11 {
        let t = Instant::now();
        let (d, _) = query::traverse(
            &conn,
            &[worst_node],
            Direction::Ancestors,
            None,
            Window::default(),
        )?;
        with_edges.push(ms(t.elapsed()));
        assert_eq!(d.len() - 1, worst.1);
    }
    let worst_edges = median(&mut with_edges);
    let mut full = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let a = query::ancestry(
            &conn,
            &worst_node.to_string(),
            Direction::Ancestors,
            None,
            Window::default(),
        )?;
        full.push(ms(t.elapsed()));
        assert_eq!(a.nodes.len() - 1, worst.1);
    }
    let worst_full = median(&mut full);
    // What `custos query ancestors PATH` does: resolve the path through the
    // key index, walk, read every node's row, check losses, print the table.
    let mut answer = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let a = query::ancestry(
            &conn,
            &worst.2,
            Direction::Ancestors,
            None,
            Window::default(),
        )?;
        let text = custos_store::render::text(&a);
        answer.push(ms(t.elapsed()));
        assert_eq!(a.nodes.len() - 1, worst.1);
        assert!(!text.is_empty());
    }
    let query_answer = median(&mut answer);

    eprintln!("store-bench: worst ancestry: cold {worst_cold:.2} ms, warm {worst_warm:.2} ms, warm with edges {worst_edges:.2} ms, with node details {worst_full:.2} ms, `custos query` answer by path {query_answer:.2} ms");

    // Deepest chain: a different shape (long and thin).
    let mut chain_ms = f64::NAN;
    let mut chain_anc = 0usize;
    if let Some(p) = report_chains.first() {
        let n = query::resolve(&conn, p, true)?[0];
        let mut v = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let d = query::ancestor_ids(&conn, n)?;
            v.push(ms(t.elapsed()));
            chain_anc = d.len();
        }
        chain_ms = median(&mut v);
    }

    // 100 random nodes, cold (after dropping caches, each run touching new pages) and warm.
    let mut rng = Rng::new(args.seed ^ 0xA5A5);
    let sample: Vec<i64> = (0..100)
        .map(|_| rng.range(1, max_node as u64) as i64)
        .collect();
    drop_caches();
    let conn = custos_store::schema::open_ro(&db)?;
    let mut cold = Vec::new();
    let mut sizes = Vec::new();
    for n in &sample {
        let t = Instant::now();
        let d = query::ancestor_ids(&conn, *n)?;
        cold.push(ms(t.elapsed()));
        sizes.push(d.len() as f64);
    }
    let mut warm_r = Vec::new();
    for n in &sample {
        let t = Instant::now();
        query::ancestor_ids(&conn, *n)?;
        warm_r.push(ms(t.elapsed()));
    }
    let (med_cold, med_warm, med_size) =
        (median(&mut cold), median(&mut warm_r), median(&mut sizes));
    eprintln!("store-bench: 100 random nodes: median {med_warm:.3} ms warm, {med_cold:.3} ms cold, median {med_size} ancestors");

    let command = format!(
        "nice -n 10 cargo run --release -p custos-store --bin store-bench -- --seed {} --scale {}",
        args.seed, args.scale
    );
    let results = json!({
        "nodes": nodes,
        "edges": edges,
        "events": events,
        "lines": lines,
        "ingest_events_per_s": events as f64 / ingest_s,
        "ingest_seconds": ingest_s,
        "generate_seconds": gen_s,
        "jsonl_bytes": jsonl_bytes,
        "gzip_bytes": gzip_bytes,
        "db_bytes": db_bytes,
        "db_bytes_per_event": db_bytes as f64 / events as f64,
        "gzip_bytes_per_event": gzip_bytes as f64 / events as f64,
        "zstd_bytes": zstd_bytes,
        "zstd_bytes_per_event": zstd_bytes as f64 / events as f64,
        "jsonl_bytes_per_event": jsonl_bytes as f64 / events as f64,
        "ancestry_worst_node": worst_node,
        "ancestry_worst_path": worst.2,
        "ancestry_worst_ancestors": worst.1,
        "ancestry_worst_ms": worst_warm,
        "ancestry_worst_ms_cold": worst_cold,
        "ancestry_worst_ms_with_node_details": worst_full,
        "query_answer_worst_ms": query_answer,
        "ancestry_worst_ms_with_edges": worst_edges,
        "ancestry_median_ms": med_warm,
        "ancestry_median_ms_cold": med_cold,
        "ancestry_median_ancestors": med_size,
        "ancestry_chain_ancestors": chain_anc,
        "ancestry_chain_ms": chain_ms,
        "cold_means_page_cache_dropped": cold_ok,
        "seed": args.seed,
        "scale": args.scale,
        "machine": format!("{} CPUs", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)),
        "command": command,
    });
    if let Some(dir) = args.results.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(
        &args.results,
        serde_json::to_string_pretty(&results)? + "\n",
    )?;
    eprintln!("store-bench: wrote {}", args.results.display());
    println!("{}", serde_json::to_string_pretty(&results)?);
    Ok(())
}
