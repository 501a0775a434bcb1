//! `custos ingest`, `custos query`, `custos graph`: options and entry points.

use crate::archive::{open_input, Recorder};
use crate::ingest::{IngestOptions, IngestSummary, Ingestor};
use crate::linereader::{LineReader, Msg};
use crate::query::{self, Answer, Direction, Window};
use crate::render;
use crate::timefmt::parse_time;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use custos_output::{Existing, Output};
use std::io::Write;
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
    /// Replace an existing --archive file (without it, an existing file is
    /// refused and left as it is: it may be an earlier recording).
    #[arg(long)]
    pub force: bool,
    /// A longer line is not read whole: it is counted and kept in the
    /// rejects table as its first 4096 bytes and its length, and the ingest goes on.
    #[arg(long, default_value_t = crate::linereader::DEFAULT_MAX_LINE_BYTES, value_name = "BYTES")]
    pub max_line_bytes: u64,
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
    #[command(flatten)]
    pub cache: DbCacheArg,
    /// Serve the ingest's figures (those of its summary line,
    /// docs/operations.md) for Prometheus at http://ADDR/metrics while it
    /// runs, e.g. 127.0.0.1:9467 (an IP address and a port).
    #[arg(long, value_name = "ADDR", conflicts_with = "archive_only")]
    pub metrics: Option<std::net::SocketAddr>,
    /// After the last input, keep serving until a scrape has read the final
    /// account, at most this many seconds (0: exit at once).
    #[arg(long, default_value_t = 0.0, value_name = "SECS", requires = "metrics")]
    pub metrics_final_wait: f64,
}

/// The writer's page cache, shared by `ingest` and `collect --db`.
#[derive(clap::Args, Debug, Clone)]
pub struct DbCacheArg {
    /// SQLite page cache of the store's writer (MiB). The writer's memory
    /// grows with the store up to about this much, then stays there.
    #[arg(long, default_value_t = crate::ingest::PAGE_CACHE_MIB, value_name = "MIB",
          value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    pub db_cache_mb: u32,
}

impl IngestArgs {
    /// The inputs; none is stdin.
    fn inputs(&self) -> Vec<PathBuf> {
        match self.inputs.is_empty() {
            true => vec![PathBuf::from("-")],
            false => self.inputs.clone(),
        }
    }

    /// Every option, every input and every file this run writes (the
    /// archive, the store), checked before any of them is opened.
    pub fn validate(&self) -> Result<()> {
        if self.batch == 0 {
            bail!("--batch must be at least 1 line");
        }
        if self.batch_interval_ms == 0 {
            bail!("--batch-interval-ms must be at least 1");
        }
        custos_metrics::final_wait(self.metrics_final_wait)?;
        if !(1024..=1 << 30).contains(&self.max_line_bytes) {
            bail!(
                "--max-line-bytes must be between 1024 and 1073741824 (SQLite's limit on a value; got {})",
                self.max_line_bytes
            );
        }
        let inputs = self.inputs();
        if inputs.iter().filter(|p| p.as_os_str() == "-").count() > 1 {
            bail!("stdin (-) is named more than once");
        }
        if self.archive.is_some() && !self.archive_only && inputs.len() > 1 {
            bail!("--archive records one stream; give one input per run");
        }
        for input in inputs.iter().filter(|p| p.as_os_str() != "-") {
            std::fs::File::open(input).with_context(|| format!("input {}", input.display()))?;
        }
        let mut outputs = Vec::new();
        if let Some(a) = &self.archive {
            crate::archive::check_name(a)?;
            outputs.push(Output::new(
                "--archive",
                a,
                Existing::unless_forced(self.force),
            ));
        }
        if !self.archive_only {
            // The store grows with every ingest: an existing one is the point.
            outputs.push(Output::new("--db", &self.store.db, Existing::Append));
        }
        let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
        custos_output::check(&outputs, &inputs)
    }
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
                // parse_time refuses a time past i64::MAX: the cast is exact.
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
    /// Output prefix: writes PREFIX.dot and PREFIX.svg, or PREFIX.json
    /// (replacing them: a picture is made again from the store at will).
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
    args.check_outputs(&[&args.store.db])?;
    let conn = crate::schema::open_ro(&args.store.db)?;
    let a = answer(&conn, &args.query, args.container.as_deref())?;
    draw(&args, a)
}

impl GraphArgs {
    /// The files this answer is drawn into (PREFIX.dot and .svg, or .json).
    fn outputs(&self) -> Vec<PathBuf> {
        let exts: &[&str] = match self.format {
            GraphFormat::ProvJson => &[".json"],
            GraphFormat::Dot => &[".dot", ".svg"],
        };
        exts.iter()
            .map(|ext| {
                let mut p = self.output.clone().into_os_string();
                p.push(ext);
                p.into()
            })
            .collect()
    }

    /// The pictures are checked before the store is asked (a wrong -o costs
    /// no long query) and must not be what is read (`inputs`: the store).
    pub fn check_outputs(&self, inputs: &[&Path]) -> Result<()> {
        let paths = self.outputs();
        let outputs: Vec<Output<'_>> = paths
            .iter()
            .map(|p| Output::new("-o/--output", p, Existing::Replace))
            .collect();
        custos_output::check(&outputs, inputs)
    }
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

/// Hands one line from the reader to the store; `offset` follows the
/// stream's bytes of the lines handed over.
fn feed(ing: &mut Ingestor, msg: Msg, offset: &mut u64, limit: u64) -> Result<Option<crate::Ack>> {
    let ack = match msg {
        Msg::Line { text, len } => {
            *offset += len;
            ing.push_bytes(&text)?
        }
        Msg::Overlong {
            head,
            line_bytes,
            len,
        } => {
            *offset += len;
            ing.push_overlong(&head, line_bytes, limit)?
        }
        Msg::Failed(e) => return Err(e),
    };
    Ok(ack)
}

pub fn ingest(args: IngestArgs) -> Result<i32> {
    // Before anything is opened: a bad option must not cost an old archive.
    args.validate()?;
    // And a taken metrics port neither (before the store is created).
    let endpoint = args
        .metrics
        .map(custos_metrics::Endpoint::bind)
        .transpose()?;
    let inputs = args.inputs();
    if args.archive_only {
        return archive_only(
            &inputs,
            args.archive
                .as_deref()
                .context("--archive-only needs --archive FILE")?,
            Existing::unless_forced(args.force),
            args.max_line_bytes,
        );
    }
    // Ctrl-C / SIGTERM on a live stream: commit what was read, then stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, std::sync::atomic::Ordering::SeqCst))
            .context("installing the Ctrl-C handler")?;
    }
    let metrics = match endpoint {
        Some(e) => {
            let addr = e.addr();
            let p = e.serve(crate::metrics::PROCESS, crate::metrics::encode_metrics)?;
            eprintln!("custos ingest: metrics at http://{addr}/metrics");
            Some(p)
        }
        None => None,
    };
    // The totals of the inputs ingested so far, the one being read
    // included: what the metrics serve.
    let mut done = IngestSummary::default();
    let publish = |done: &IngestSummary, ing: &Ingestor| {
        if let Some(p) = metrics.as_ref().filter(|p| p.due()) {
            let mut totals = done.clone();
            totals.add(&ing.totals());
            p.publish(&totals);
        }
    };
    let mut rc = 0;
    let limit = args.max_line_bytes;
    for input in inputs {
        let name = input.display().to_string();
        let reader = open_input(&input)?;
        let archive = args
            .archive
            .as_deref()
            .map(|a| Recorder::create(a, Existing::unless_forced(args.force)))
            .transpose()?;
        let opts = IngestOptions {
            batch_lines: args.batch,
            batch_interval: Duration::from_millis(args.batch_interval_ms),
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
            page_cache_mib: args.cache.db_cache_mb,
            ..Default::default()
        };
        let mut ing = Ingestor::open(&args.store.db, opts)?;
        let lines = LineReader::spawn(reader, name.clone(), limit);
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
        let mut last_progress = Instant::now();
        let mut interrupted = None;
        // Bytes of the stream (decompressed) in the lines handed to the store.
        let mut offset = 0u64;
        let mut failed = None;
        loop {
            publish(&done, &ing);
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                // Every line already read goes in too: from a pipe it could
                // not be read again.
                let stopped = lines.stop(|m| match feed(&mut ing, m, &mut offset, limit) {
                    Ok(a) => {
                        ack(a);
                        Ok(())
                    }
                    Err(e) => {
                        failed = Some(e);
                        Ok(())
                    }
                })?;
                interrupted = Some(stopped);
                break;
            }
            match lines
                .rx
                .recv_timeout(Duration::from_millis(args.batch_interval_ms.clamp(1, 200)))
            {
                Ok(m) => match feed(&mut ing, m, &mut offset, limit) {
                    Ok(a) => ack(a),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                },
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            ack(ing.commit_if_due()?);
            if last_progress.elapsed() >= Duration::from_secs(5) {
                let s = ing.totals();
                eprintln!(
                    "custos ingest: {name}: {} lines, {} new events ({:.0}/s)",
                    s.lines,
                    s.events_new,
                    s.events_new as f64 / s.seconds
                );
                last_progress = Instant::now();
            }
        }
        if let Some(e) = failed {
            // Keep what was read: commit it, then report the error.
            ack(ing.commit()?);
            let _ = ing.finish();
            return Err(e.context(format!("{name}: ingesting")));
        }
        let (s, last) = ing.finish()?;
        ack(last);
        if let Some(stopped) = &interrupted {
            eprintln!(
                "custos ingest: {name}: interrupted; committed all {} lines read ({} of them still queued when the signal came); a re-run resumes at byte {offset} of the {}stream{}",
                s.lines,
                stopped.drained,
                if name.ends_with(".zst") || name.ends_with(".zstd") || name.ends_with(".gz") {
                    "decompressed "
                } else {
                    ""
                },
                match stopped.partial_bytes {
                    0 => String::new(),
                    n => format!("; {n} bytes of an unfinished line after it were read and not stored"),
                }
            );
        }
        eprintln!(
            "custos ingest: {name}: {} lines in {:.1}s: {} new events, {} already stored, {} loss records ({} events lost), {} malformed lines skipped{}{}, {} nodes and {} edges added{}",
            s.lines,
            s.seconds,
            s.events_new,
            s.events_duplicate,
            s.losses_new,
            s.lost_events,
            s.malformed,
            if s.malformed > 0 { " (kept in the rejects table)" } else { "" },
            match s.overlong {
                0 => String::new(),
                n => format!(", {n} of them longer than --max-line-bytes"),
            },
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
        done.add(&s);
        if interrupted.is_some() {
            rc = 130;
            break;
        }
    }
    if let Some(p) = &metrics {
        p.publish_final(&done);
        p.wait_final(
            custos_metrics::final_wait(args.metrics_final_wait)?,
            "custos ingest",
        );
    }
    Ok(rc)
}

/// `custos ingest --archive-only`: compress the stream(s) into one archive.
fn archive_only(inputs: &[PathBuf], archive: &Path, existing: Existing, limit: u64) -> Result<i32> {
    let mut rec = Recorder::create(archive, existing)?;
    let started = Instant::now();
    let mut raw_bytes = 0u64;
    let mut overlong = 0u64;
    for input in inputs {
        let lines = LineReader::spawn(open_input(input)?, input.display().to_string(), limit);
        for m in lines.rx.iter() {
            // Kept byte for byte where possible; a non-UTF-8 line is kept
            // lossily, a line over the limit as its head (both counted by ingest later).
            match m {
                Msg::Line { text, len } => {
                    raw_bytes += len;
                    rec.write_line(&String::from_utf8_lossy(&text))?;
                }
                Msg::Overlong { head, len, .. } => {
                    raw_bytes += len;
                    overlong += 1;
                    rec.write_line(&String::from_utf8_lossy(&head))?;
                }
                Msg::Failed(e) => return Err(e),
            }
        }
    }
    if overlong > 0 {
        eprintln!("custos ingest: warning: {overlong} lines longer than --max-line-bytes were archived as their first bytes only");
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
