//! `phi4-df11`: run a DF11 (or, with --bf16, a plain BF16) Phi-4 model.

use clap::Parser;
use df11_llm::{args::Vars, parse_args, Architecture, CommonArgs};
use phi4_df11::Phi4Arch;

/// Phi-4 with DFloat11-compressed weights (lossless; bit-identical to the BF16 model).
#[derive(Parser, Debug)]
#[command(name = "phi4-df11", version)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> anyhow::Result<()> {
    let cli: Cli = parse_args(Phi4Arch::DEFAULT_REPO);
    df11_llm::run::<Phi4Arch>(&cli.common, &Vars::from_os(std::env::vars_os()))?;
    Ok(())
}
