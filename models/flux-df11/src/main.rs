//! `flux-df11`: a FLUX.1 image from a prompt, the transformer kept DF11-compressed on the device.
//!
//!     cargo run --release -p flux-df11 [--features cuda] -- --prompt "..." --out image.png
//!     # another DF11 repo (its base repo follows), or local folders:
//!     ... -- --model-id DFloat11/FLUX.1-dev-DF11 --prompt "..."
//!     ... -- --model-dir DF11_TRANSFORMER --base-dir FLUX_BASE_FOLDER --prompt "..."

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device};
use clap::Parser;
use df11_candle::WeightFormat;
use df11_llm::PeakMemory;
use flux_df11::pipeline::{
    decode, denoise, encode_prompt, load_transformer, GenerateOptions, PipelineFolders,
};
use flux_df11::{RunReport, SchedulerConfig, SourceOptions, VaeDecoder};

#[derive(Parser, Debug)]
#[command(
    name = "flux-df11",
    about = "FLUX.1 image generation with the DFloat11-compressed transformer"
)]
struct Cli {
    /// The prompt.
    #[arg(long)]
    prompt: String,
    /// Where the PNG goes.
    #[arg(long, default_value = "flux.png")]
    out: PathBuf,
    /// The DF11 transformer's Hugging Face Hub repo [default: DFloat11/FLUX.1-schnell-DF11].
    #[arg(long)]
    model_id: Option<String>,
    /// Its revision: branch, tag or commit [default: main].
    #[arg(long)]
    revision: Option<String>,
    /// A local DF11 transformer folder instead of the Hub repo.
    #[arg(long, conflicts_with_all = ["model_id", "revision"])]
    model_dir: Option<PathBuf>,
    /// The base pipeline's Hub repo (scheduler, text encoders, tokenizers, VAE and the
    /// transformer's config) [default: black-forest-labs/FLUX.1-<variant> of a
    /// DFloat11/FLUX.1-<variant>-DF11 repo].
    #[arg(long)]
    base_id: Option<String>,
    /// Its revision: branch, tag or commit [default: main].
    #[arg(long)]
    base_revision: Option<String>,
    /// A local base pipeline folder instead of the Hub repo.
    #[arg(long, conflicts_with_all = ["base_id", "base_revision"])]
    base_dir: Option<PathBuf>,
    /// Use only the local Hugging Face cache; never touch the network (also set by
    /// HF_HUB_OFFLINE=1).
    #[arg(long)]
    offline: bool,
    /// The Hugging Face cache folder [default: $HF_HUB_CACHE, else $HF_HOME/hub, else
    /// ~/.cache/huggingface/hub]. Gated repos (FLUX.1-dev) take the token of HF_TOKEN,
    /// HF_TOKEN_PATH or $HF_HOME/token.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Image width in pixels (a multiple of 16).
    #[arg(long, default_value_t = 1024)]
    width: usize,
    /// Image height in pixels (a multiple of 16).
    #[arg(long, default_value_t = 1024)]
    height: usize,
    /// Denoising steps [default: 28 with a guidance embedding (dev, Krea), else 4 (schnell)].
    #[arg(long)]
    steps: Option<usize>,
    /// Guidance scale (dev, Krea).
    #[arg(long, default_value_t = 3.5)]
    guidance: f32,
    /// T5's prompt length [default: 512 with a guidance embedding, else 256].
    #[arg(long)]
    max_sequence_length: Option<usize>,
    /// Seed of the initial noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Run the base repo's BF16 transformer (`transformer/`) instead of the DF11 one: the
    /// reference, same image byte for byte.
    #[arg(long)]
    bf16: bool,
    /// Run on the CPU (f32).
    #[arg(long)]
    cpu: bool,
    /// Keep the attention's f32 matrix products in full f32 on CUDA. By default they take
    /// TF32 inputs (the BF16 queries and keys exactly; ~20% less time a step at 1024x1024):
    /// `flux_df11::attention::allow_tf32`.
    #[arg(long)]
    exact_attention: bool,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    if !cli
        .out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"))
    {
        bail!(
            "--out {}: the image is written as PNG (.png)",
            cli.out.display()
        );
    }
    // The one place the program reads its environment (HF_HUB_OFFLINE, the DF11_* settings of
    // the transformer's weights).
    let env = df11_llm::args::Vars::from_os(std::env::vars_os());
    flux_df11::attention::allow_tf32(!cli.exact_attention);
    let t0 = Instant::now();
    let sources = SourceOptions {
        model_id: cli.model_id.clone(),
        revision: cli.revision.clone(),
        model_dir: cli.model_dir.clone(),
        base_id: cli.base_id.clone(),
        base_revision: cli.base_revision.clone(),
        base_dir: cli.base_dir.clone(),
        offline: cli.offline || env.offline(),
        cache_dir: cli.cache_dir.clone(),
    }
    .sources()?;
    let folders = sources.resolve(cli.bf16, true)?;
    let device = if cli.cpu || !cfg!(feature = "cuda") {
        Device::Cpu
    } else {
        Device::new_cuda(0).context("opening CUDA device 0 (--cpu runs on the CPU)")?
    };
    let dtype = if device.is_cuda() {
        DType::BF16
    } else {
        DType::F32
    };
    let mut memory = PeakMemory::new(&device);
    let base = &folders.base;
    let config = flux_df11::FluxConfig::open(&base.join("transformer/config.json"))?;
    let steps = cli
        .steps
        .unwrap_or(if config.guidance_embeds { 28 } else { 4 });
    let options = GenerateOptions {
        width: cli.width,
        height: cli.height,
        steps,
        guidance: cli.guidance,
        max_sequence_length: cli
            .max_sequence_length
            .unwrap_or(if config.guidance_embeds { 512 } else { 256 }),
        noise: None,
        seed: cli.seed,
    };
    let t1 = Instant::now();
    let prompt = encode_prompt(
        base,
        &cli.prompt,
        &device,
        dtype,
        options.max_sequence_length,
    )?;
    memory.sample();
    let encode_s = t1.elapsed().as_secs_f64();
    let t2 = Instant::now();
    let (transformer_dir, format) = match &folders.df11 {
        Some(dir) => (dir.clone(), WeightFormat::Df11),
        None => (base.join("transformer"), WeightFormat::Dense),
    };
    let pipeline = PipelineFolders {
        transformer: &transformer_dir,
        format,
        base,
    };
    let transformer = load_transformer(
        &pipeline,
        &device,
        dtype,
        df11_llm::args::weight_options(None, None, &env)?,
    )?;
    let scheduler = SchedulerConfig::open(&base.join("scheduler/scheduler_config.json"))?;
    let load_s = t2.elapsed().as_secs_f64();
    let bar = indicatif::ProgressBar::new(steps as u64);
    let t3 = Instant::now();
    let latents = denoise(&transformer, &scheduler, &prompt, &options, |_| {
        memory.sample();
        bar.inc(1)
    })?;
    device.synchronize()?;
    bar.finish_and_clear();
    let denoise_s = t3.elapsed().as_secs_f64();
    drop(transformer);
    let t4 = Instant::now();
    let vae = VaeDecoder::load(&base.join("vae"), &device, DType::F32)?;
    let image = decode(&vae, &latents, &options)?;
    memory.sample();
    let decode_s = t4.elapsed().as_secs_f64();
    write_png(&cli.out, &image)?;
    let report = RunReport {
        width: image.width,
        height: image.height,
        steps,
        encode_s,
        load_s,
        denoise_s,
        decode_s,
        total_s: t0.elapsed().as_secs_f64(),
        peak_gpu_bytes: memory.peak(),
    };
    eprintln!("{}\nwrote {}", report.render(), cli.out.display());
    Ok(())
}

/// Writes `image` as an 8-bit RGB PNG.
fn write_png(path: &std::path::Path, image: &flux_df11::pipeline::Image) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut encoder = png::Encoder::new(
        std::io::BufWriter::new(file),
        image.width as u32,
        image.height as u32,
    );
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&image.rgb)?;
    writer.finish()?;
    Ok(())
}
