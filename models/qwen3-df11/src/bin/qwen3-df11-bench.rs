//! End-to-end speed of a Qwen3 model folder (DF11, or BF16 with --bf16): prefill of a random
//! prompt, greedy decoding at batch 1, peak device memory. Prints one JSON object. With
//! `--stock`, the BF16 folder runs through stock candle-transformers' Qwen3 instead (the
//! baseline row: same prompt, same timing).
//!
//! `qwen3-df11-bench --model-dir DIR [--bf16] [--batch 1] [--prompt-tokens 512] [--decode-tokens 128]
//! [--no-cuda-graph] [--stock] [--devices 0,1 [--device-map auto|20,16]]
//! [--cpu-offload-layers N | --max-gpu-memory SIZE]`

use candle_transformers::models::qwen3;
use clap::Parser;
use df11_llm::bench::{bench_model, measure, vocab_size, BenchOptions, BenchResult};
use df11_llm::{
    cuda_devices, select_device, select_dtype, ComputeDtype, DecodeOptions, DeviceMap, ModelConfig,
    Offload, PeakMemory,
};
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
    #[arg(long, conflicts_with = "devices")]
    cpu: bool,
    /// CUDA devices to split the layers over, e.g. `0,1`.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    devices: Vec<usize>,
    /// How --devices share the layers: `auto` or a count per device.
    #[arg(long, default_value = "auto", requires = "devices")]
    device_map: df11_llm::LayerSplit,
    /// Keep the last N layers' compressed units in host memory.
    #[arg(long, conflicts_with = "max_gpu_memory")]
    cpu_offload_layers: Option<usize>,
    /// Keep everything on the GPU within SIZE (e.g. 2.5GB): see `--max-gpu-memory` of the model
    /// programs.
    #[arg(long, value_parser = df11_llm::parse_size)]
    max_gpu_memory: Option<u64>,
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
    /// Run decode steps as separate launches instead of a captured CUDA graph.
    #[arg(long)]
    no_cuda_graph: bool,
    /// Which path products take on CUDA: auto, fused, decode (decode + cuBLAS everywhere).
    #[arg(long)]
    matmul: Option<df11_candle::MatmulPath>,
    /// Device form of the exponents: auto, packed, huffman.
    #[arg(long)]
    exponents: Option<df11_candle::ExponentForm>,
    /// Prefill in pieces of this many tokens (long prompts).
    #[arg(long)]
    prefill_chunk: Option<usize>,
    /// Run the BF16 folder through stock candle-transformers' Qwen3 (the baseline).
    #[arg(long, conflicts_with = "bf16")]
    stock: bool,
}

/// The folder through `candle_transformers::models::qwen3`, its weights memory-mapped.
fn bench_stock(opts: &BenchOptions) -> anyhow::Result<BenchResult> {
    let mut peak = PeakMemory::new(&opts.device);
    let t = std::time::Instant::now();
    let config = ModelConfig::open(&opts.dir)?;
    let cfg: qwen3::Config = serde_json::from_value(config.json().clone())?;
    let mut files: Vec<_> = std::fs::read_dir(&opts.dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "safetensors"));
    files.sort();
    // SAFETY: the files are not modified while mapped.
    let vb = unsafe {
        candle_nn::VarBuilder::from_mmaped_safetensors(&files, opts.dtype, &opts.device)?
    };
    let mut model = qwen3::ModelForCausalLM::new(&cfg, vb)?;
    opts.device.synchronize()?;
    let load_s = t.elapsed().as_secs_f64();
    let vocab = vocab_size(&config)?;
    Ok(measure(
        opts,
        "stock-candle",
        load_s,
        vocab,
        &mut peak,
        &mut |ids, pos| {
            if pos == 0 {
                model.clear_kv_cache();
            }
            Ok(model.forward(ids, pos)?)
        },
    )?)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let env = df11_llm::args::Vars::from_os(std::env::vars_os());
    let (device, split) = if cli.devices.is_empty() {
        (select_device(cli.cpu)?, None)
    } else {
        let devices = cuda_devices(&cli.devices)?;
        let map = DeviceMap {
            devices: devices.clone(),
            split: cli.device_map.clone(),
        };
        (devices[0].clone(), Some(map))
    };
    let offload = match (cli.cpu_offload_layers, cli.max_gpu_memory) {
        (Some(n), _) => Offload::Layers(n),
        (None, Some(bytes)) => Offload::MaxDeviceBytes(bytes),
        (None, None) => Offload::None,
    };
    if (split.is_some() || offload != Offload::None) && cli.stock {
        anyhow::bail!("--stock runs on one device with every weight on it");
    }
    let dtype = select_dtype(cli.dtype, &device);
    let opts = BenchOptions {
        dir: cli.model_dir,
        bf16: cli.bf16,
        device,
        split,
        offload,
        dtype,
        batch: cli.batch,
        prompt_tokens: cli.prompt_tokens,
        decode_tokens: cli.decode_tokens,
        seed: 7,
        cuda_graph: !cli.no_cuda_graph,
        prefill_chunk: cli.prefill_chunk,
        weights: df11_llm::args::weight_options(cli.matmul, cli.exponents, &env)?,
        decode: DecodeOptions::from_vars(|name| env.get(name)).map_err(anyhow::Error::msg)?,
    };
    let r = if cli.stock {
        bench_stock(&opts)?
    } else {
        bench_model::<Qwen3Arch>(&opts)?
    };
    println!("{}", serde_json::to_string(&r)?);
    Ok(())
}
