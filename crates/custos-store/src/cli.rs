//! `custos ingest`, `custos query`, `custos graph`: options and entry points.

use crate::archive::{open_input, Recorder};
use crate::ingest::{IngestOptions, Ingestor};
use crate::query::{self, Answer, Direction, Window};
use crate::render;
use crate::timefmt::parse_time;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Args, Debug, Clone)]
pub struct StoreArg {
    /// The store (a SQLite file; created by ingest).
    #[arg(long, env = "CUSTOS_DB", default_value = "custos.db")]
    pub db: PathBuf,
}

#[derive(Args, Debug)]
pub struct IngestArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// JSON Lines from `custos collect`; `-` or nothing reads stdin; `.zst`/`.gz` are decompressed.
    pub inputs: Vec<PathBuf>,
    /// Also record the input stream, compressed, to this file (`.zst` or `.gz`).
    #[arg(long)]
    pub archive: Option<PathBuf>,
    /// Only record the archive (needs --archive); no database is touched.
    /// The cheapest way to keep everything; ingest the archive later.
    #[arg(long, requires = "archive")]
    pub archive_only: bool,
    /// Lines per transaction.
    #[arg(long, default_value_t = 20_000)]
    pub batch: usize,
    /// Commit at least this often (ms) while a live stream is slow.
    #[arg(long, default_value_t = 1000)]
    pub batch_interval_ms: u64,
    /// Events may arrive this far (ms of event time) out of order and are
    /// still applied in time order (docs/store.md, "Order").
    #[arg(long, default_value_t = crate::ingest::REORDER_WINDOW_NS / 1_000_000)]
    pub reorder_window_ms: u64,
    /// Do not print an `ack` line per committed batch on stdout.
    #[arg(long, short)]
    pub quiet: bool,
    /// The key that seals each committed batch (docs/tamper-evidence.md,
    /// "The store"); default: the collector's, made on first use.
    #[arg(long, value_name = "FILE")]
    pub seal_key: Option<PathBuf>,
    /// Do not seal the committed batches.
    #[arg(long, conflicts_with = "seal_key")]
    pub no_seal: bool,
}

#[derive(Args, Debug, Clone, Default)]
pub struct WindowArgs {
    /// Only edges at or after this time (ns since the epoch or RFC 3339 UTC).
    #[arg(long)]
    pub since: Option<String>,
    /// Only edges at or before this time.
    #[arg(long)]
    pub until: Option<String>,
}

impl WindowArgs {
    pub fn window(&self) -> Result<Window> {
        let p = |s: &Option<String>| -> Result<Option<i64>> {
            s.as_deref()
                .map(|t| parse_time(t).map(|v| v as i64))
                .transpose()
        };
        let w = Window {
            since: p(&self.since)?,
            until: p(&self.until)?,
        };
        if let (Some(a), Some(b)) = (w.since, w.until) {
            if a > b {
                bail!("--since is after --until");
            }
        }
        Ok(w)
    }
}

#[derive(Args, Debug, Clone)]
pub struct TraverseArgs {
    /// A path (newest version), path@vN, node id, pid:N, sock:ADDR, pipe:[INODE] or uid:N.
    pub target: String,
    /// Stop after this many edges from the target.
    #[arg(long)]
    pub depth: Option<u32>,
    #[command(flatten)]
    pub window: WindowArgs,
}

#[derive(Subcommand, Debug, Clone)]
pub enum Query {
    /// Everything the target depends on (edges effect → cause).
    Ancestors(TraverseArgs),
    /// Everything that depends on the target.
    Descendants(TraverseArgs),
    /// The shortest causal path between two things, in whichever direction exists.
    Path { a: String, b: String },
    /// Files, sockets and pipes a process read or wrote (all versions of its executions).
    TouchedBy {
        /// pid:N, a node id, an executable path or a command name.
        process: String,
        #[command(flatten)]
        window: WindowArgs,
    },
    /// Processes that read or wrote any version of a file (or socket/pipe).
    WhoTouched {
        path: String,
        #[command(flatten)]
        window: WindowArgs,
    },
    /// The raw JSON line of an event, by event id (decimal or 0x hex).
    Event { id: String },
    /// A workflow's events in order (docs/workflows.md): the workflow of an
    /// event id (decimal or 0x hex; a workflow's id is its first event's),
    /// or `pid:N` for every workflow process N took part in.
    Workflow {
        #[arg(value_name = "EVENT-ID|pid:N")]
        target: String,
        /// List at most this many events of each workflow (0: all).
        #[arg(long, default_value_t = 200)]
        limit: usize,
    },
}

/// `--clickhouse URL [--clickhouse-db DB]`: ask the fleet's ClickHouse
/// instead of a store (docs/fleet.md; answered by custos-fleet).
#[derive(Args, Debug, Clone)]
pub struct FleetArg {
    /// Ask the fleet's graph in ClickHouse (its HTTP URL) instead of --db.
    #[arg(long, global = true, value_name = "URL")]
    pub clickhouse: Option<String>,
    /// The fleet's ClickHouse database (with --clickhouse).
    #[arg(long, global = true, default_value = "custos", value_name = "NAME")]
    pub clickhouse_db: String,
}

#[derive(Args, Debug)]
pub struct QueryArgs {
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub fleet: FleetArg,
    /// Machine-readable JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    /// Only the processes of this container (name, id, or the id's first 12+
    /// hex digits), what they touched, and the query's start.
    #[arg(long, global = true, value_name = "NAME|ID")]
    pub container: Option<String>,
    #[command(subcommand)]
    pub query: Query,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphFormat {
    /// Graphviz DOT plus an SVG rendered by `dot`.
    Dot,
    /// W3C PROV-JSON.
    ProvJson,
}

#[derive(Args, Debug)]
pub struct GraphArgs {
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub fleet: FleetArg,
    /// Output prefix: writes PREFIX.dot and PREFIX.svg, or PREFIX.json.
    #[arg(long, short, default_value = "provenance")]
    pub output: PathBuf,
    #[arg(long, value_enum, default_value = "dot")]
    pub format: GraphFormat,
    /// Do not run `dot` on answers larger than this many nodes (it would take minutes); the .dot is still written.
    #[arg(long, default_value_t = 3000)]
    pub max_render: usize,
    /// Leave out of the picture the nodes whose name matches this glob (repeatable), e.g. '*.so*' for shared
    /// libraries; their edges go with them, so hiding a node in the middle of a path cuts the path. The
    /// query's own targets always stay; the title says how many were hidden. Not for PROV-JSON.
    #[arg(long, value_name = "GLOB")]
    pub hide: Vec<String>,
    /// Only the processes of this container, as for `custos query --container`.
    #[arg(long, value_name = "NAME|ID")]
    pub container: Option<String>,
    #[command(subcommand)]
    pub query: Query,
}

/// The answer to `q`, narrowed to one container's processes when `container` names one.
fn answer(conn: &rusqlite::Connection, q: &Query, container: Option<&str>) -> Result<Answer> {
    let mut a = match q {
        Query::Ancestors(t) => query::ancestry(
            conn,
            &t.target,
            Direction::Ancestors,
            t.depth,
            t.window.window()?,
        ),
        Query::Descendants(t) => query::ancestry(
            conn,
            &t.target,
            Direction::Descendants,
            t.depth,
            t.window.window()?,
        ),
        Query::Path { a, b } => query::path(conn, a, b),
        Query::TouchedBy { process, window } => query::touched_by(conn, process, window.window()?),
        Query::WhoTouched { path, window } => query::who_touched(conn, path, window.window()?),
        Query::Event { .. } => bail!("`event` prints a raw event; it has no graph"),
        Query::Workflow { .. } => bail!("`workflow` lists events; it has no graph"),
    }?;
    if let Some(spec) = container {
        query::only_containers(&mut a, &query::containers_named(conn, spec)?, spec);
    }
    Ok(a)
}

pub fn query(args: QueryArgs) -> Result<i32> {
    let conn = crate::schema::open_ro(&args.store.db)?;
    if let Query::Event { id } = &args.query {
        let id = query::event_id_of(id).with_context(|| {
            format!(
                "event id {:?}: expected a decimal or 0x-hex number",
                id.trim()
            )
        })?;
        let boots = crate::ingest::event_boots(&conn, id)?;
        if boots.is_empty() {
            bail!("no event {id:#x} in {}", args.store.db.display());
        }
        for b in boots {
            if let Some(line) = crate::ingest::raw_event(&conn, b, id)? {
                println!("{line}");
            }
        }
        return Ok(0);
    }
    if let Query::Workflow { target, limit } = &args.query {
        if args.container.is_some() {
            bail!("--container does not narrow a workflow (a workflow is one job, whatever container it ran in)");
        }
        let listings = crate::workflows::query(&conn, target, *limit)?;
        let text = if args.json {
            serde_json::to_string_pretty(&listings)?
        } else {
            crate::workflows::render_text(&listings)
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", text.trim_end()).context("writing the answer")?;
        return Ok(0);
    }
    let a = answer(&conn, &args.query, args.container.as_deref())?;
    print_answer(&a, args.json)
}

/// Prints an answer as text, or JSON with `json`.
pub fn print_answer(a: &Answer, json: bool) -> Result<i32> {
    let text = if json {
        render::json(a)?
    } else {
        render::text(a)
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", text.trim_end()).context("writing the answer")?;
    Ok(0)
}

pub fn graph(args: GraphArgs) -> Result<i32> {
    let hide: Vec<glob::Pattern> = args
        .hide
        .iter()
        .map(|g| glob::Pattern::new(g).with_context(|| format!("--hide {g:?}: not a glob pattern")))
        .collect::<Result<_>>()?;
    if !hide.is_empty() && args.format == GraphFormat::ProvJson {
        bail!("--hide shapes a picture; PROV-JSON keeps the whole answer (leave out --hide or use --format dot)");
    }
    let conn = crate::schema::open_ro(&args.store.db)?;
    let a = answer(&conn, &args.query, args.container.as_deref())?;
    draw(&args, a)
}

/// Writes an answer as `custos graph` does (DOT and SVG, or PROV-JSON).
pub fn draw(args: &GraphArgs, mut a: Answer) -> Result<i32> {
    let hide: Vec<glob::Pattern> = args
        .hide
        .iter()
        .map(|g| glob::Pattern::new(g))
        .collect::<Result<_, _>>()?;
    render::hide_nodes(&mut a, &hide, &args.hide.join(" "));
    for l in &a.losses {
        eprintln!("WARNING: {}", l.message());
    }
    let with_ext = |ext: &str| -> PathBuf {
        let mut p = args.output.clone().into_os_string();
        p.push(ext);
        p.into()
    };
    match args.format {
        GraphFormat::ProvJson => {
            let path = with_ext(".json");
            std::fs::write(&path, render::prov_json(&a)?)
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "custos graph: {} nodes, {} edges -> {}",
                a.nodes.len(),
                a.edges.len(),
                path.display()
            );
        }
        GraphFormat::Dot => {
            let dot_path = with_ext(".dot");
            std::fs::write(&dot_path, render::dot(&a))
                .with_context(|| format!("writing {}", dot_path.display()))?;
            if a.nodes.len() > args.max_render {
                eprintln!(
                    "custos graph: {} nodes -> {} (not rendering SVG above --max-render {}; narrow with --depth/--since)",
                    a.nodes.len(),
                    dot_path.display(),
                    args.max_render
                );
                return Ok(0);
            }
            let svg_path = with_ext(".svg");
            render_svg(&dot_path, &svg_path)?;
            eprintln!(
                "custos graph: {} nodes, {} edges -> {}, {}",
                a.nodes.len(),
                a.edges.len(),
                dot_path.display(),
                svg_path.display()
            );
        }
    }
    Ok(0)
}

/// Runs Graphviz `dot -Tsvg` (Debian package graphviz; scripts/deps.sh installs it).
pub fn render_svg(dot_path: &Path, svg_path: &Path) -> Result<()> {
    let out = std::process::Command::new("dot")
        .arg("-Tsvg")
        .arg(dot_path)
        .arg("-o")
        .arg(svg_path)
        .output()
        .context("running Graphviz `dot` (install the graphviz package: scripts/deps.sh)")?;
    if !out.status.success() {
        bail!(
            "dot failed on {}: {}",
            dot_path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

enum Msg {
    Line(Vec<u8>),
    Failed(anyhow::Error),
}

fn spawn_reader(mut input: Box<dyn BufRead + Send>, name: String) -> mpsc::Receiver<Msg> {
    let (tx, rx) = mpsc::sync_channel(1 << 16);
    std::thread::spawn(move || {
        let mut buf = Vec::with_capacity(4096);
        loop {
            buf.clear();
            match input.read_until(b'\n', &mut buf) {
                Ok(0) => break,
                Ok(_) => {
                    if buf.last() == Some(&b'\n') {
                        buf.pop();
                    }
                    if tx.send(Msg::Line(buf.clone())).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Msg::Failed(
                        anyhow::Error::new(e).context(format!("reading {name}")),
                    ));
                    break;
                }
            }
        }
    });
    rx
}

pub fn ingest(args: IngestArgs) -> Result<i32> {
    let inputs = if args.inputs.is_empty() {
        vec![PathBuf::from("-")]
    } else {
        args.inputs.clone()
    };
    if args.archive_only {
        return archive_only(
            &inputs,
            args.archive
                .as_deref()
                .context("--archive-only needs --archive FILE")?,
        );
    }
    // Ctrl-C / SIGTERM on a live stream: commit what was read, then stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, std::sync::atomic::Ordering::SeqCst))
            .context("installing the Ctrl-C handler")?;
    }
    if args.archive.is_some() && inputs.len() > 1 {
        bail!("--archive records one stream; give one input per run");
    }
    for input in inputs {
        let name = input.display().to_string();
        let reader = open_input(&input)?;
        let archive = args.archive.as_deref().map(Recorder::create).transpose()?;
        let opts = IngestOptions {
            batch_lines: args.batch.max(1),
            batch_interval: Duration::from_millis(args.batch_interval_ms.max(1)),
            source: name.clone(),
            archive,
            reorder_window_ns: args.reorder_window_ms.saturating_mul(1_000_000),
            seal_key: match args.no_seal || args.archive_only {
                true => None,
                false => Some(custos_seal::SealKey::open(
                    args.seal_key.as_deref(),
                    "custos ingest",
                )?),
            },
            ..Default::default()
        };
        let mut ing = Ingestor::open(&args.store.db, opts)?;
        let rx = spawn_reader(reader, name.clone());
        let quiet = args.quiet;
        let ack = |a: Option<crate::Ack>| {
            if let (Some(a), false) = (a, quiet) {
                // The acknowledgment: printed only after the batch's COMMIT returned.
                println!(
                    "ack batch={} lines_through={} events_new={} events_duplicate={} malformed={}",
                    a.batch, a.lines_through, a.events_new, a.events_duplicate, a.malformed
                );
                let _ = std::io::stdout().flush();
            }
        };
        let started = Instant::now();
        let mut last_progress = Instant::now();
        let mut interrupted = false;
        loop {
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                interrupted = true;
                break;
            }
            match rx.recv_timeout(Duration::from_millis(args.batch_interval_ms.clamp(1, 200))) {
                Ok(Msg::Line(l)) => ack(ing
                    .push_bytes(&l)
                    .with_context(|| format!("{name}: ingesting"))?),
                Ok(Msg::Failed(e)) => {
                    // Keep what was read: commit it, then report the read error.
                    ack(ing.commit()?);
                    let _ = ing.finish();
                    return Err(e);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            ack(ing.commit_if_due()?);
            if last_progress.elapsed() >= Duration::from_secs(5) {
                let s = ing.summary();
                eprintln!(
                    "custos ingest: {name}: {} lines, {} new events ({:.0}/s)",
                    s.lines,
                    s.events_new,
                    s.events_new as f64 / started.elapsed().as_secs_f64()
                );
                last_progress = Instant::now();
            }
        }
        let (s, last) = ing.finish()?;
        ack(last);
        if interrupted {
            eprintln!(
                "custos ingest: {name}: interrupted; everything read so far is committed (line {})",
                s.lines
            );
        }
        eprintln!(
            "custos ingest: {name}: {} lines in {:.1}s: {} new events, {} already stored, {} loss records ({} events lost), {} malformed lines skipped{}, {} nodes and {} edges added{}",
            s.lines,
            s.seconds,
            s.events_new,
            s.events_duplicate,
            s.losses_new,
            s.lost_events,
            s.malformed,
            if s.malformed > 0 { " (kept in the rejects table)" } else { "" },
            s.graph.nodes,
            s.graph.edges,
            if s.graph.unresolved_io > 0 {
                format!(", {} reads/writes with no resolvable file (no path and unknown fd)", s.graph.unresolved_io)
            } else {
                String::new()
            }
        );
        if s.out_of_window > 0 {
            eprintln!(
                "custos ingest: {name}: warning: {} events arrived more than the reorder window (--reorder-window-ms) out of time order; they were applied late and edges through them may be missing",
                s.out_of_window
            );
        }
        if interrupted {
            return Ok(130);
        }
    }
    Ok(0)
}

/// `custos ingest --archive-only`: compress the stream(s) into one archive.
fn archive_only(inputs: &[PathBuf], archive: &Path) -> Result<i32> {
    let mut rec = Recorder::create(archive)?;
    let started = Instant::now();
    let mut raw_bytes = 0u64;
    for input in inputs {
        let mut reader = open_input(input)?;
        let mut buf = Vec::with_capacity(4096);
        loop {
            buf.clear();
            let n = reader
                .read_until(b'\n', &mut buf)
                .with_context(|| format!("reading {}", input.display()))?;
            if n == 0 {
                break;
            }
            raw_bytes += n as u64;
            if buf.last() == Some(&b'\n') {
                buf.pop();
            }
            // Kept byte for byte where possible; a non-UTF-8 line is kept lossily (and counted by ingest later).
            rec.write_line(&String::from_utf8_lossy(&buf))?;
        }
    }
    let lines = rec.finish()?;
    let size = std::fs::metadata(archive).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "custos ingest: archived {lines} lines ({raw_bytes} bytes) into {} ({size} bytes, {:.1}x) in {:.1}s",
        archive.display(),
        raw_bytes as f64 / size.max(1) as f64,
        started.elapsed().as_secs_f64()
    );
    Ok(0)
}
