//! `custos-sched`: the scheduler on its own, the same as `custos sched`
//! (scx schedulers ship as standalone binaries; the tests drive this one).

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "custos-sched",
    version,
    about = "Custos sched_ext scheduler (same as `custos sched`)"
)]
struct Cli {
    #[command(flatten)]
    args: custos_sched::cli::SchedArgs,
}

fn main() {
    match custos_sched::cli::run(Cli::parse().args) {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            eprintln!("custos-sched: error: {err:#}");
            std::process::exit(1);
        }
    }
}
