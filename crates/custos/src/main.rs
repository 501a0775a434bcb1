//! `custos`: the one command. Thin glue; each subcommand's options and logic
//! live in the library crate that owns the job.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;

mod collect;
mod config;
mod docs;
mod status;
mod verify;

/// mimalloc instead of glibc malloc: the store's ingest (`ingest`, `collect
/// --db`) allocates and frees per event; measured 13 % faster at scale 0.05
/// and 29 % at 0.25 (bench/store/README.md, "after the quick wins").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "custos",
    version,
    about = "Complete Linux provenance under the super producer attack"
)]
struct Cli {
    /// Read options from this TOML file: one table per subcommand
    /// ([collect], [sched], [fleet-ingest]) whose keys are its long flags;
    /// the command line overrides it. Without it no file is read: the
    /// services pass --config /etc/custos/custos.toml, and a command typed
    /// by hand does not take on their settings (docs/operations.md).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Boot a sched_ext-capable kernel in a VM and run a command inside it.
    #[command(subcommand)]
    Vm(custos_vm::cli::VmCommand),
    /// Record provenance events (eBPF) as JSON Lines; every loss is counted and reported.
    Collect(collect::CollectCmd),
    /// Ingest the collector's JSON Lines into the provenance store.
    Ingest(custos_store::cli::IngestArgs),
    /// Ask the provenance store (or the fleet's, --clickhouse): ancestors, descendants, path, touched-by, who-touched.
    Query(custos_store::cli::QueryArgs),
    /// Draw a query's answer as DOT/SVG or export it as W3C PROV-JSON.
    Graph(custos_store::cli::GraphArgs),
    /// Run the sched_ext scheduler that keeps provenance consumers fed.
    Sched(custos_sched::cli::SchedArgs),
    /// The scheduler's GRU placement policy: record the default scheduler's placements, train a model.
    #[command(subcommand)]
    Placement(custos_sched::placement::PlacementCommand),
    /// Train the scheduler's learned queue policy (offline or online) into a model file.
    Train(custos_sched::train::TrainArgs),
    /// Check a sealed stream or archive: no line altered, no batch moved, inserted or deleted.
    Verify(verify::VerifyArgs),
    /// Many hosts: move the collectors' Kafka topic into ClickHouse (docs/fleet.md).
    #[command(subcommand)]
    Fleet(custos_fleet::cli::FleetCommand),
    /// Whether the collector and the scheduler run here: versions, pins, losses and rings so far.
    #[command(after_help = status::EXIT_STATUS)]
    Status(status::StatusArgs),
}

fn main() {
    // The config file becomes arguments before clap parses, so its values
    // are validated exactly as the command line's are, before any file is
    // created (src/config.rs).
    let (argv, from) = match config::expand(&Cli::command(), std::env::args_os().collect()) {
        Ok(x) => x,
        Err(err) => {
            eprintln!("custos: error: {err:#}");
            std::process::exit(2);
        }
    };
    // The hidden generate-docs is added here and not to `Cli`: the pages and
    // completions it writes are `Cli`'s (clap_complete lists hidden
    // subcommands too).
    let mut cmd = Cli::command().subcommand(docs::command());
    let parsed = cmd.try_get_matches_from_mut(argv).and_then(|m| {
        if let Some(m) = m.subcommand_matches(docs::NAME) {
            std::process::exit(match docs::run(Cli::command(), m) {
                Ok(()) => 0,
                Err(err) => {
                    eprintln!("custos: error: {err:#}");
                    1
                }
            });
        }
        Cli::from_arg_matches(&m).map_err(|e| e.format(&mut cmd))
    });
    let cli = match (parsed, from) {
        (Ok(cli), _) => cli,
        (Err(err), Some(from)) if err.use_stderr() => {
            let _ = err.print();
            eprintln!("note: options were also read from {from}");
            std::process::exit(err.exit_code());
        }
        (Err(err), _) => err.exit(),
    };
    let result = match cli.command {
        Command::Vm(cmd) => custos_vm::cli::run(cmd),
        Command::Collect(cmd) => collect::run(cmd),
        Command::Ingest(args) => custos_store::cli::ingest(args),
        Command::Query(args) if args.fleet.clickhouse.is_some() => custos_fleet::query::query(args),
        Command::Query(args) => custos_store::cli::query(args),
        Command::Graph(args) if args.fleet.clickhouse.is_some() => custos_fleet::query::graph(args),
        Command::Graph(args) => custos_store::cli::graph(args),
        Command::Sched(args) => custos_sched::cli::run(args),
        Command::Train(args) => custos_sched::train::run(args),
        Command::Placement(cmd) => custos_sched::placement::run(cmd),
        Command::Verify(args) => verify::run(args),
        Command::Fleet(cmd) => custos_fleet::cli::run(cmd),
        Command::Status(args) => status::run(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            eprintln!("custos: error: {err:#}");
            std::process::exit(1);
        }
    }
}
