//! `custos vm` subcommands (being written on main; this placeholder is replaced there).
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum VmCommand {
    /// Run a command inside the VM.
    Run {
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

pub fn run(_cmd: VmCommand) -> anyhow::Result<i32> {
    anyhow::bail!("the VM runner is not built yet")
}
