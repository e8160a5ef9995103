//! End-to-end speed of a model: prefill of a prompt of random ids, then greedy decoding, timed
//! with device synchronisation, and the peak device memory. Used by each model crate's bench
//! binary to compare its DF11 and BF16 forms on the same machine.

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use serde::Serialize;

use crate::app::{load, Architecture, LoadOptions};
use crate::error::{LlmError, Result};
use crate::generate::CausalLm;
use crate::memory::PeakMemory;
use crate::model::DecodeOptions;
use crate::source::ModelSource;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The model folder.
    pub dir: std::path::PathBuf,
    /// Read it as a plain BF16 folder.
    pub bf16: bool,
    /// The device (with `split`: the first of them).
    pub device: Device,
    /// The layers split over several devices, or `None`.
    pub split: Option<crate::placement::DeviceMap>,
    /// Layers kept in host memory.
    pub offload: crate::placement::Offload,
    /// Compute dtype.
    pub dtype: DType,
    /// Sequences decoded together (each gets its own random prompt).
    pub batch: usize,
    /// Prompt length for the prefill.
    pub prompt_tokens: usize,
    /// Tokens decoded one at a time after the prompt.
    pub decode_tokens: usize,
    /// Seed of the random prompt.
    pub seed: u64,
    /// Capture decode steps as CUDA graphs.
    pub cuda_graph: bool,
    /// Prefill the prompt in pieces of this many tokens (long contexts).
    pub prefill_chunk: Option<usize>,
    /// How weights are laid out and multiplied on the GPU.
    pub weights: df11_candle::Df11Options,
    /// How decode steps run (`max_context` and `cuda_graph` are the bench's own).
    pub decode: DecodeOptions,
}

/// The measurements.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    /// `df11` or `bf16`.
    pub format: String,
    /// Sequences decoded together.
    pub batch: usize,
    /// Seconds to load the weights onto the device.
    pub load_s: f64,
    /// Prompt tokens per second of the prefill.
    pub prefill_tok_s: f64,
    /// Tokens per second while decoding one token per sequence per step (all sequences).
    pub decode_tok_s: f64,
    /// Milliseconds per decoding step.
    pub decode_ms_per_step: f64,
    /// Peak device memory (bytes, all devices together), when the devices report it.
    pub peak_bytes: Option<u64>,
    /// Peak memory of each device, in order (one entry unless the model is split).
    pub peak_bytes_per_device: Vec<Option<u64>>,
    /// The greedy tokens of the first sequence (so the DF11 and BF16 runs can be compared).
    pub tokens: Vec<u32>,
    /// The greedy tokens of every sequence, in batch order.
    pub all_tokens: Vec<Vec<u32>>,
}

/// A tiny xorshift generator: the prompt only needs to be reproducible.
pub fn random_ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % vocab as u64) as u32
        })
        .collect()
}

/// Greedy next token of each sequence, from `[batch, vocab]` (or `[batch, 1, vocab]`) logits
/// ([`crate::sampling::greedy_tokens`]).
pub fn argmax(logits: &Tensor) -> Result<Vec<u32>> {
    crate::sampling::greedy_tokens(logits)
}

/// Loads the model of architecture `A` from `opts.dir` and measures it.
pub fn bench_model<A: Architecture>(opts: &BenchOptions) -> Result<BenchResult> {
    let mut peak = match &opts.split {
        Some(map) => PeakMemory::on_devices(&map.devices),
        None => PeakMemory::new(&opts.device),
    };
    let t = Instant::now();
    let mut loaded = load::<A>(&LoadOptions {
        source: ModelSource::Local(opts.dir.clone()),
        bf16: opts.bf16,
        device: opts.device.clone(),
        split: opts.split.clone(),
        offload: opts.offload,
        dtype: opts.dtype,
        show_progress: false,
        weights: opts.weights,
        decode: DecodeOptions {
            max_context: Some(opts.prompt_tokens + opts.decode_tokens + 2),
            sequences: opts.batch.max(1),
            cuda_graph: opts.cuda_graph,
            ..opts.decode.clone()
        },
    })?;
    opts.device.synchronize()?;
    let load_s = t.elapsed().as_secs_f64();
    if let Some(profile) = df11_candle::load_profile::report() {
        eprintln!("{profile}  load (whole) | {load_s:.3}");
    }
    let placement = loaded.model.placement();
    if placement.offloads() {
        eprintln!("placement: {}", placement.describe());
        let budget = placement.offload().describe_accounting();
        if !budget.is_empty() {
            eprintln!("device memory planned: {budget}");
        }
    }
    let vocab = vocab_size(&loaded.config)?;
    let format = if opts.bf16 { "bf16" } else { "df11" };
    let model = &mut loaded.model;
    measure(opts, format, load_s, vocab, &mut peak, &mut |ids, pos| {
        if pos == 0 {
            model.reset();
        }
        model.forward(ids, pos)
    })
}

/// `vocab_size` of a config (top level or `text_config`).
pub fn vocab_size(config: &crate::ModelConfig) -> Result<usize> {
    let json = config.json();
    json.get("vocab_size")
        .or_else(|| json.get("text_config").and_then(|t| t.get("vocab_size")))
        .and_then(serde_json::Value::as_u64)
        .map(|v| v as usize)
        .ok_or_else(|| LlmError::config(config.path(), "no vocab_size"))
}

/// The timed part, for any model behind `forward` (`[batch, seq]` ids at a position → last
/// logits; position 0 starts a new sequence): a warm-up prefill, the timed prefill of the
/// random prompt, one untimed decode step (which captures a CUDA graph where the model has one),
/// then `decode_tokens` timed greedy steps.
pub fn measure(
    opts: &BenchOptions,
    format: &str,
    load_s: f64,
    vocab: usize,
    peak: &mut PeakMemory,
    forward: &mut dyn FnMut(&Tensor, usize) -> Result<Tensor>,
) -> Result<BenchResult> {
    let b = opts.batch.max(1);
    let prompt = random_ids(b * opts.prompt_tokens, vocab, opts.seed);
    // Warm-up (kernels and libraries loaded, allocator primed), then the timed prefill. The
    // warm-up runs a piece as long as the timed ones: which kernels a product or an attention
    // takes depends on the rows (up to 16 rows no cuBLAS call at all on CUDA), and the first
    // cuBLAS call of a process loads its kernels (~0.08 s on an H100), which a shorter warm-up
    // left inside the timed prefill.
    let chunk = opts.prefill_chunk.unwrap_or(opts.prompt_tokens).max(1);
    let warm_len = chunk.min(opts.prompt_tokens);
    let warm = Tensor::new(&prompt[..b * opts.prompt_tokens], &opts.device)?
        .reshape((b, opts.prompt_tokens))?
        .narrow(1, 0, warm_len)?
        .contiguous()?;
    // The warm-up's token is sampled too: the timed prefill ends with that kernel's first use
    // otherwise (a module's first launch in a process may JIT-compile it).
    argmax(&forward(&warm, 0)?)?;
    opts.device.synchronize()?;
    let ids = Tensor::new(prompt.as_slice(), &opts.device)?.reshape((b, opts.prompt_tokens))?;
    let t = Instant::now();
    let mut logits = None;
    for start in (0..opts.prompt_tokens).step_by(chunk) {
        let len = chunk.min(opts.prompt_tokens - start);
        logits = Some(forward(&ids.narrow(1, start, len)?.contiguous()?, start)?);
    }
    let logits = logits.ok_or_else(|| LlmError::Usage("an empty prompt".into()))?;
    let mut next = argmax(&logits)?;
    let prefill_s = t.elapsed().as_secs_f64();
    peak.sample();

    // The first decode step captures the step's CUDA graph: it is not timed.
    let mut all_tokens: Vec<Vec<u32>> = next.iter().map(|&t| vec![t]).collect();
    let mut t = Instant::now();
    for i in 0..=opts.decode_tokens {
        if i == 1 {
            opts.device.synchronize()?;
            t = Instant::now();
        }
        let ids = Tensor::new(next.as_slice(), &opts.device)?.reshape((b, 1))?;
        let logits = forward(&ids, opts.prompt_tokens + i)?;
        next = argmax(&logits)?;
        for (row, &t) in all_tokens.iter_mut().zip(&next) {
            row.push(t);
        }
    }
    let decode_s = t.elapsed().as_secs_f64();
    peak.sample();
    let peak_bytes_per_device = peak.peaks();
    Ok(BenchResult {
        format: format.into(),
        batch: b,
        load_s,
        prefill_tok_s: prompt.len() as f64 / prefill_s,
        decode_tok_s: (b * opts.decode_tokens) as f64 / decode_s,
        decode_ms_per_step: decode_s * 1e3 / opts.decode_tokens.max(1) as f64,
        peak_bytes: peak_bytes_per_device
            .iter()
            .flatten()
            .copied()
            .reduce(|a, b| a + b),
        peak_bytes_per_device,
        tokens: all_tokens.first().cloned().unwrap_or_default(),
        all_tokens,
    })
}
