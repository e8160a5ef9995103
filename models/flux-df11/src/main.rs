//! `flux-df11`: a FLUX.1 image from a prompt, the transformer kept DF11-compressed on the device.
//!
//!     cargo run --release -p flux-df11 [--features cuda] -- --model-dir DF11_TRANSFORMER \
//!         --base-dir FLUX_BASE_REPO --prompt "..." --out image.png

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device};
use clap::Parser;
use df11_candle::WeightFormat;
use flux_df11::pipeline::{
    decode, denoise, encode_prompt, load_transformer, GenerateOptions, PipelineFolders,
};
use flux_df11::{SchedulerConfig, VaeDecoder};

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
    /// The DF11 transformer folder (a DFloat11/FLUX.1-*-DF11 repo).
    #[arg(long)]
    model_dir: PathBuf,
    /// The base pipeline folder (black-forest-labs/FLUX.1-*: scheduler, text encoders,
    /// tokenizers, VAE and the transformer's config).
    #[arg(long)]
    base_dir: PathBuf,
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
}

fn main() -> Result<()> {
    let cli = Cli::parse();
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
    let base = &cli.base_dir;
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
    let t0 = Instant::now();
    let prompt = encode_prompt(
        base,
        &cli.prompt,
        &device,
        dtype,
        options.max_sequence_length,
    )?;
    let encode_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let (transformer_dir, format) = if cli.bf16 {
        (base.join("transformer"), WeightFormat::Dense)
    } else {
        (cli.model_dir.clone(), WeightFormat::Df11)
    };
    let folders = PipelineFolders {
        transformer: &transformer_dir,
        format,
        base,
    };
    let transformer = load_transformer(
        &folders,
        &device,
        dtype,
        df11_candle::Df11Options::default(),
    )?;
    let scheduler = SchedulerConfig::open(&base.join("scheduler/scheduler_config.json"))?;
    let load_s = t1.elapsed().as_secs_f64();
    let bar = indicatif::ProgressBar::new(steps as u64);
    let t2 = Instant::now();
    let latents = denoise(&transformer, &scheduler, &prompt, &options, |_| bar.inc(1))?;
    device.synchronize()?;
    bar.finish_and_clear();
    let denoise_s = t2.elapsed().as_secs_f64();
    drop(transformer);
    let vae = VaeDecoder::load(&base.join("vae"), &device, DType::F32)?;
    let image = decode(&vae, &latents, &options)?;
    write_png(&cli.out, &image)?;
    eprintln!(
        "{}x{} in {steps} steps: text {encode_s:.2} s, transformer loaded in {load_s:.2} s, \
         {:.3} s/step ({denoise_s:.2} s), total {:.2} s -> {}",
        image.width,
        image.height,
        denoise_s / steps as f64,
        t0.elapsed().as_secs_f64(),
        cli.out.display()
    );
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
