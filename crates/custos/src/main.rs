//! `custos`: the one command. Thin glue; each subcommand's options and logic
//! live in the library crate that owns the job.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "custos", version, about = "Complete Linux provenance under the super producer attack")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Boot a sched_ext-capable kernel in a VM and run a command inside it.
    #[command(subcommand)]
    Vm(custos_vm::cli::VmCommand),
    /// Run the sched_ext scheduler that keeps provenance consumers fed.
    Sched(custos_sched::cli::SchedArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Vm(cmd) => custos_vm::cli::run(cmd),
        Command::Sched(args) => custos_sched::cli::run(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            eprintln!("custos: error: {err:#}");
            std::process::exit(1);
        }
    }
}
