//! `qwen2-df11`: run a DF11 (or, with --bf16, a plain BF16) Qwen2 / DeepSeek-R1-Distill-Qwen
//! model.

use clap::Parser;
use df11_llm::{args::Vars, parse_args, Architecture, CommonArgs};
use qwen2_df11::Qwen2Arch;

/// Qwen2 / DeepSeek-R1-Distill-Qwen with DFloat11-compressed weights (lossless; bit-identical to
/// the BF16 model).
#[derive(Parser, Debug)]
#[command(name = "qwen2-df11", version)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> anyhow::Result<()> {
    let cli: Cli = parse_args(Qwen2Arch::DEFAULT_REPO);
    df11_llm::run::<Qwen2Arch>(&cli.common, &Vars::from_os(std::env::vars_os()))?;
    Ok(())
}
