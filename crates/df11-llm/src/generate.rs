//! The generation loop: prefill the prompt, then one token at a time through the KV cache until
//! an EOS token or the token budget, streaming text and timing each phase.

use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};
use serde::Serialize;
use tokenizers::Tokenizer;

use crate::error::{LlmError, Result};
use crate::memory::PeakMemory;
use crate::sampling::{Sampler, SamplingParams};
use crate::tokenizer::TextStream;

/// A decoder-only language model with a KV cache.
pub trait CausalLm {
    /// Runs `ids` (`[batch, seq]`, u32) at positions `start_pos..start_pos + seq` (the cache
    /// holds the positions before) and returns the logits of the last position, `[batch, vocab]`.
    fn forward(&mut self, ids: &Tensor, start_pos: usize) -> Result<Tensor>;

    /// Starts a new sequence (the KV cache's positions are overwritten from 0).
    fn reset(&mut self);

    /// Positions a sequence may reach (the KV cache's size).
    fn max_context(&self) -> usize {
        usize::MAX
    }

    /// The device the model runs on (where token ids go).
    fn device(&self) -> &Device;

    /// Every device the model runs on (several when it is split), for memory reports.
    fn devices(&self) -> Vec<Device> {
        vec![self.device().clone()]
    }
}

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationParams {
    /// Most tokens to generate (an EOS token counts).
    pub max_new_tokens: usize,
    /// Tokens that end generation.
    pub eos_token_ids: Vec<u32>,
    /// How tokens are chosen.
    pub sampling: SamplingParams,
}

/// The result of one generation, with its timings. Serialises to the CLI's `--json` object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Generation {
    /// The prompt's token ids.
    pub prompt_tokens: Vec<u32>,
    /// The generated ids (a final EOS token included).
    pub generated_tokens: Vec<u32>,
    /// The generated text (special tokens skipped).
    pub text: String,
    /// Prompt tokens per second of prefill.
    pub prefill_tok_s: f64,
    /// Generated tokens per second after the first (`null` with fewer than two tokens).
    pub decode_tok_s: Option<f64>,
    /// Time from the start of prefill to the first token, in milliseconds.
    pub ttft_ms: f64,
    /// Peak GPU memory in bytes, all devices together (`null` on the CPU).
    pub peak_gpu_bytes: Option<u64>,
}

fn per_second(count: usize, time: Duration) -> f64 {
    let s = time.as_secs_f64();
    if s > 0.0 {
        count as f64 / s
    } else {
        f64::INFINITY
    }
}

/// Logits `[1, vocab]` (any dtype) of the last position → `[vocab]` f32.
fn last_logits(logits: Tensor) -> Result<Tensor> {
    Ok(logits.squeeze(0)?.to_dtype(DType::F32)?)
}

/// Generates from `prompt` (token ids). `on_text` receives the text as it is produced.
pub fn generate<M: CausalLm + ?Sized>(
    model: &mut M,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    params: &GenerationParams,
    on_text: &mut dyn FnMut(&str) -> Result<()>,
) -> Result<Generation> {
    if prompt.is_empty() {
        return Err(LlmError::Usage("the prompt encodes to no tokens".into()));
    }
    if params.max_new_tokens == 0 {
        return Err(LlmError::Usage(
            "--max-new-tokens must be at least 1".into(),
        ));
    }
    let device = model.device().clone();
    let mut memory = PeakMemory::on_devices(&model.devices());
    let mut sampler = Sampler::new(&params.sampling);
    let mut stream = TextStream::new(tokenizer);
    let mut tokens = prompt.to_vec();
    let mut generated = Vec::new();
    let context = model.max_context();
    if prompt.len() >= context {
        return Err(LlmError::Usage(format!(
            "the prompt ({} tokens) leaves no room in the context of {context} positions \
             (--max-context)",
            prompt.len()
        )));
    }
    model.reset();

    let start = Instant::now();
    let mut first_token_at = start;
    let mut prefill = Duration::ZERO;
    let mut last_token_at = start;
    // The last generated token is never fed back, so a sequence may end at `context` positions.
    while generated.len() < params.max_new_tokens && tokens.len() <= context {
        let (input, pos) = if generated.is_empty() {
            (prompt, 0)
        } else {
            (&tokens[tokens.len() - 1..], tokens.len() - 1)
        };
        let ids = Tensor::new(input, &device)?.unsqueeze(0)?;
        let logits = last_logits(model.forward(&ids, pos)?)?;
        if generated.is_empty() {
            // Wait for the device, so the time covers the forward pass, not just its launch.
            device.synchronize()?;
            prefill = start.elapsed();
        }
        let next = sampler.next(&logits, &tokens)?;
        last_token_at = Instant::now();
        if generated.is_empty() {
            first_token_at = last_token_at;
            memory.sample();
        }
        tokens.push(next);
        generated.push(next);
        if params.eos_token_ids.contains(&next) {
            break;
        }
        if let Some(piece) = stream.push(next)? {
            on_text(&piece)?;
        }
    }
    if let Some(rest) = stream.finish()? {
        on_text(&rest)?;
    }
    let decode_steps = generated.len().saturating_sub(1);
    Ok(Generation {
        prompt_tokens: prompt.to_vec(),
        text: stream.text()?,
        prefill_tok_s: per_second(prompt.len(), prefill),
        decode_tok_s: (decode_steps > 0)
            .then(|| per_second(decode_steps, last_token_at - first_token_at)),
        ttft_ms: (first_token_at - start).as_secs_f64() * 1e3,
        peak_gpu_bytes: memory.peak(),
        generated_tokens: generated,
    })
}
