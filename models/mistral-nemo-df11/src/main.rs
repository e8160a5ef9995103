//! `mistral-nemo-df11`: run a DF11 (or, with --bf16, a plain BF16) Mistral model.

use clap::Parser;
use df11_llm::{args::Vars, parse_args, Architecture, CommonArgs};
use mistral_nemo_df11::MistralArch;

/// Mistral-Nemo with DFloat11-compressed weights (lossless; bit-identical to the BF16 model).
#[derive(Parser, Debug)]
#[command(name = "mistral-nemo-df11", version)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> anyhow::Result<()> {
    let cli: Cli = parse_args(MistralArch::DEFAULT_REPO);
    df11_llm::run::<MistralArch>(&cli.common, &Vars::from_os(std::env::vars_os()))?;
    Ok(())
}
