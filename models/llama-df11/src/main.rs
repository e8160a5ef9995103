//! `llama-df11`: run a DF11 (or, with --bf16, a plain BF16) Llama model.

use clap::Parser;
use df11_llm::{args::Vars, parse_args, Architecture, CommonArgs};
use llama_df11::LlamaArch;

/// Llama 3.x with DFloat11-compressed weights (lossless; bit-identical to the BF16 model).
#[derive(Parser, Debug)]
#[command(name = "llama-df11", version)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> anyhow::Result<()> {
    let cli: Cli = parse_args(LlamaArch::DEFAULT_REPO);
    df11_llm::run::<LlamaArch>(&cli.common, &Vars::from_os(std::env::vars_os()))?;
    Ok(())
}
