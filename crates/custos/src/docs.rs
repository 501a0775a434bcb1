//! `custos generate-docs DIR` (hidden): the package's man pages and shell
//! completions, rendered from the very clap definition the binary parses
//! with, so they cannot describe another command line (make deb).

use anyhow::{Context, Result};
use clap::{ArgMatches, Args, FromArgMatches};
use clap_complete::Shell;
use std::path::PathBuf;

pub const NAME: &str = "generate-docs";

#[derive(Args)]
struct GenerateDocsArgs {
    /// Write DIR/man/ (custos.1, one page per subcommand: custos-collect.1,
    /// ...) and DIR/completions/ (custos.bash, _custos, custos.fish).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
}

/// The subcommand, hidden from `custos --help`.
pub fn command() -> clap::Command {
    GenerateDocsArgs::augment_args(clap::Command::new(NAME).hide(true))
}

/// Writes the pages and completions of `cli`.
pub fn run(mut cli: clap::Command, matches: &ArgMatches) -> Result<()> {
    let args = GenerateDocsArgs::from_arg_matches(matches)?;
    let man = args.dir.join("man");
    let completions = args.dir.join("completions");
    for d in [&man, &completions] {
        std::fs::create_dir_all(d).with_context(|| format!("{}", d.display()))?;
    }
    clap_mangen::generate_to(cli.clone(), &man)
        .with_context(|| format!("man pages into {}", man.display()))?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cli, "custos", &completions)
            .with_context(|| format!("{shell} completion into {}", completions.display()))?;
    }
    Ok(())
}
