//! `flux-df11-bench`: the denoising speed and peak GPU memory of a FLUX transformer, DF11 against
//! our BF16 path and stock candle-transformers' FLUX, on synthetic weights of FLUX.1-dev's shape.
//!
//!     # the folders: DIR/bf16 (N(0, 0.02) weights, diffusers' layout) and DIR/df11 (compressed)
//!     flux-df11-bench synth --out DIR
//!     # one run per process, so each peak is its own (JSON on stdout with --json):
//!     flux-df11-bench run --dir DIR --format df11
//!     flux-df11-bench run --dir DIR --format bf16
//!     flux-df11-bench run --dir DIR --format stock
//!
//! A run denoises random latents of `--width`x`--height` from random text states
//! (`--text-len` T5 tokens) for `--steps` steps with the flow-matching sampler (the pipeline's
//! `denoise`; stock: candle-transformers' `flux::sampling::denoise`), synchronising the device
//! after every step. The `DF11_*` variables set the weights' options (docs/DEVELOPING.md).

mod stock;
mod synth;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use clap::{Parser, Subcommand, ValueEnum};
use df11_candle::{Df11Options, ModelWeights, WeightFormat};
use df11_llm::PeakMemory;
use flux_df11::pipeline::{denoise, GenerateOptions, Prompt};
use flux_df11::{FluxConfig, FluxTransformer, SchedulerConfig};

#[derive(Parser, Debug)]
#[command(name = "flux-df11-bench")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Writes DIR/bf16 (synthetic BF16 weights) and DIR/df11 (them compressed).
    Synth {
        #[arg(long)]
        out: PathBuf,
        /// Double-stream blocks (FLUX.1: 19).
        #[arg(long, default_value_t = 19)]
        layers: usize,
        /// Single-stream blocks (FLUX.1: 38).
        #[arg(long, default_value_t = 38)]
        single_layers: usize,
        /// Without the guidance embedding (schnell's shape).
        #[arg(long)]
        no_guidance: bool,
    },
    /// Times the denoising loop of one format.
    Run {
        /// The folder `synth` wrote.
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, value_enum)]
        format: Format,
        #[arg(long, default_value_t = 1024)]
        width: usize,
        #[arg(long, default_value_t = 1024)]
        height: usize,
        #[arg(long, default_value_t = 28)]
        steps: usize,
        /// T5 tokens of the (random) text states.
        #[arg(long, default_value_t = 512)]
        text_len: usize,
        /// One JSON object on stdout.
        #[arg(long)]
        json: bool,
        /// Keep the attention's f32 matrix products in full f32 on CUDA instead of TF32 inputs
        /// (the `flux-df11` program's default; its `--exact-attention`).
        #[arg(long)]
        exact_attention: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// DIR/df11, kept compressed on the GPU.
    Df11,
    /// DIR/bf16 through the same transformer code.
    Bf16,
    /// candle-transformers' FLUX, same shapes, random weights.
    Stock,
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Synth {
            out,
            layers,
            single_layers,
            no_guidance,
        } => {
            let config = synth::config(layers, single_layers, !no_guidance);
            let t0 = Instant::now();
            synth::write_bf16(&config, &out.join("bf16"))?;
            eprintln!("BF16 folder written in {:.1} s", t0.elapsed().as_secs_f64());
            let t1 = Instant::now();
            let report = df11_candle::compress_model(
                &out.join("bf16"),
                &out.join("df11"),
                &Default::default(),
                |_| {},
            )?;
            eprintln!(
                "compressed in {:.1} s: {:.2} GB BF16 -> {:.2} GB DF11 ({:.1}%)",
                t1.elapsed().as_secs_f64(),
                report.bf16_bytes as f64 / 1e9,
                report.df11_bytes as f64 / 1e9,
                100.0 * report.df11_bytes as f64 / report.bf16_bytes.max(1) as f64
            );
            Ok(())
        }
        Command::Run {
            dir,
            format,
            width,
            height,
            steps,
            text_len,
            json,
            exact_attention,
        } => {
            flux_df11::attention::allow_tf32(!exact_attention);
            run(&dir, format, width, height, steps, text_len, json)
        }
    }
}

/// What one run measured.
#[derive(Debug, serde::Serialize)]
struct Measured {
    format: String,
    width: usize,
    height: usize,
    steps: usize,
    load_s: f64,
    /// Seconds per step, the first step left out (it includes one-time work).
    s_per_step: f64,
    first_step_s: f64,
    denoise_s: f64,
    peak_gpu_bytes: Option<u64>,
}

fn run(
    dir: &std::path::Path,
    format: Format,
    width: usize,
    height: usize,
    steps: usize,
    text_len: usize,
    json: bool,
) -> Result<()> {
    if steps < 2 {
        bail!("--steps must be at least 2 (the first step is reported apart)");
    }
    let device = if cfg!(feature = "cuda") {
        Device::new_cuda(0).context("opening CUDA device 0")?
    } else {
        Device::Cpu
    };
    let dtype = if device.is_cuda() {
        DType::BF16
    } else {
        DType::F32
    };
    let config = FluxConfig::open(&dir.join("bf16/config.json"))?;
    let mut memory = PeakMemory::new(&device);
    let t0 = Instant::now();
    let mut step_times = Vec::with_capacity(steps);
    let mut last = Instant::now();
    let (load_s, denoise_s) = match format {
        Format::Df11 | Format::Bf16 => {
            let (folder, weight_format) = match format {
                Format::Df11 => (dir.join("df11"), WeightFormat::Df11),
                _ => (dir.join("bf16"), WeightFormat::Dense),
            };
            let options = Df11Options::from_vars(|name| std::env::var(name).ok())
                .map_err(anyhow::Error::msg)?;
            let weights = ModelWeights::open_with(&folder, weight_format, &device, dtype, options)?;
            let transformer = FluxTransformer::load(&config, &weights)?;
            drop(weights);
            device.synchronize()?;
            let load_s = t0.elapsed().as_secs_f64();
            memory.sample();
            let prompt = Prompt {
                states: random(
                    &[1, text_len, config.joint_attention_dim],
                    1,
                    &device,
                    dtype,
                )?,
                pooled: random(&[1, config.pooled_projection_dim], 2, &device, dtype)?,
            };
            let scheduler: SchedulerConfig = serde_json::from_value(serde_json::json!({
                "use_dynamic_shifting": true, "shift": 3.0
            }))?;
            let options = GenerateOptions {
                width,
                height,
                steps,
                guidance: 3.5,
                max_sequence_length: text_len,
                noise: None,
                seed: 0,
            };
            let t1 = Instant::now();
            last = Instant::now();
            denoise(&transformer, &scheduler, &prompt, &options, |_| {
                let _ = device.synchronize();
                memory.sample();
                step_times.push(last.elapsed().as_secs_f64());
                last = Instant::now();
            })?;
            (load_s, t1.elapsed().as_secs_f64())
        }
        Format::Stock => {
            use candle_transformers::models::flux::{sampling, WithForward};
            let model = stock::model(
                config.num_layers,
                config.num_single_layers,
                config.guidance_embeds,
                &device,
            )?;
            device.synchronize()?;
            let load_s = t0.elapsed().as_secs_f64();
            memory.sample();
            let t5 = random(
                &[1, text_len, config.joint_attention_dim],
                1,
                &device,
                dtype,
            )?;
            let clip = random(&[1, config.pooled_projection_dim], 2, &device, dtype)?;
            let noise = sampling::get_noise(1, height, width, &device)?.to_dtype(dtype)?;
            let state = sampling::State::new(&t5, &clip, &noise)?;
            let timesteps = sampling::get_schedule(steps, Some((state.img.dim(1)?, 0.5, 1.15)));
            let guidance = Tensor::full(3.5f32, 1, &device)?.to_dtype(dtype)?;
            let t1 = Instant::now();
            let mut img = state.img.clone();
            for window in timesteps.windows(2) {
                let t = Tensor::full(window[0] as f32, 1, &device)?.to_dtype(dtype)?;
                let pred = model.forward(
                    &img,
                    &state.img_ids,
                    &state.txt,
                    &state.txt_ids,
                    &t,
                    &state.vec,
                    config.guidance_embeds.then_some(&guidance),
                )?;
                img = (img + pred * (window[1] - window[0]))?;
                device.synchronize()?;
                memory.sample();
                step_times.push(last.elapsed().as_secs_f64());
                last = Instant::now();
            }
            (load_s, t1.elapsed().as_secs_f64())
        }
    };
    let rest = &step_times[1..];
    let measured = Measured {
        format: format!("{format:?}").to_lowercase(),
        width,
        height,
        steps,
        load_s,
        s_per_step: rest.iter().sum::<f64>() / rest.len() as f64,
        first_step_s: step_times[0],
        denoise_s,
        peak_gpu_bytes: memory.peak(),
    };
    if json {
        println!("{}", serde_json::to_string(&measured)?);
    } else {
        eprintln!(
            "{}: {}x{}, {} steps: {:.3} s/step (first {:.3} s), loaded in {:.1} s, peak {}",
            measured.format,
            width,
            height,
            steps,
            measured.s_per_step,
            measured.first_step_s,
            measured.load_s,
            measured.peak_gpu_bytes.map_or("n/a".into(), |b| format!(
                "{:.2} GiB",
                b as f64 / (1u64 << 30) as f64
            ))
        );
    }
    Ok(())
}

/// N(0, 1) values of `shape` from `seed`, made on the host.
fn random(shape: &[usize], seed: u64, device: &Device, dtype: DType) -> Result<Tensor> {
    use rand::SeedableRng;
    use rand_distr::Distribution;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let values: Vec<f32> = (0..n)
        .map(|_| rand_distr::StandardNormal.sample(&mut rng))
        .collect();
    Ok(Tensor::from_vec(values, shape, device)?.to_dtype(dtype)?)
}
