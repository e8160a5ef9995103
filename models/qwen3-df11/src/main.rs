//! `qwen3-df11`: run a DF11 (or, with --bf16, a plain BF16) Qwen3 model.

use clap::Parser;
use df11_llm::{args::Vars, parse_args, Architecture, CommonArgs};
use qwen3_df11::Qwen3Arch;

/// Qwen3 with DFloat11-compressed weights (lossless; bit-identical to the BF16 model).
#[derive(Parser, Debug)]
#[command(name = "qwen3-df11", version)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> anyhow::Result<()> {
    let cli: Cli = parse_args(Qwen3Arch::DEFAULT_REPO);
    df11_llm::run::<Qwen3Arch>(&cli.common, &Vars::from_os(std::env::vars_os()))?;
    Ok(())
}
