//! End-to-end speed of a Qwen3 model folder (DF11, or BF16 with --bf16): prefill of a random
//! prompt, greedy decoding at batch 1, peak device memory. Prints one JSON object.
//!
//! `qwen3-df11-bench --model-dir DIR [--bf16] [--batch 1] [--prompt-tokens 512] [--decode-tokens 128]`

use clap::Parser;
use df11_llm::bench::{bench_model, BenchOptions};
use df11_llm::{select_device, select_dtype, ComputeDtype};
use qwen3_df11::Qwen3Arch;

#[derive(Parser, Debug)]
#[command(name = "qwen3-df11-bench")]
struct Cli {
    /// The model folder.
    #[arg(long)]
    model_dir: std::path::PathBuf,
    /// Read a plain BF16 folder.
    #[arg(long)]
    bf16: bool,
    /// Run on the CPU.
    #[arg(long)]
    cpu: bool,
    /// Compute dtype (default bf16 on CUDA, f32 on CPU).
    #[arg(long, value_enum)]
    dtype: Option<ComputeDtype>,
    /// Sequences decoded together.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Prompt length of the prefill (per sequence).
    #[arg(long, default_value_t = 512)]
    prompt_tokens: usize,
    /// Tokens decoded after the prompt.
    #[arg(long, default_value_t = 128)]
    decode_tokens: usize,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let device = select_device(cli.cpu)?;
    let dtype = select_dtype(cli.dtype, &device);
    let r = bench_model::<Qwen3Arch>(&BenchOptions {
        dir: cli.model_dir,
        bf16: cli.bf16,
        device,
        dtype,
        batch: cli.batch,
        prompt_tokens: cli.prompt_tokens,
        decode_tokens: cli.decode_tokens,
        seed: 7,
    })?;
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}
