//! Mistral (Mistral-Nemo): embedding → Llama-style decoder layers (grouped-query attention with
//! RoPE and a head size of its own, SiLU-gated MLP, pre-norm residuals; df11-llm's
//! [`DecoderLayer`]) → final norm → `lm_head`.
//!
//! Every linear and embedding comes from [`ModelWeights`], so the same code runs a DF11 folder
//! (weights kept compressed, decoded just before use) and a plain BF16 folder, with
//! bit-identical results. The rotary tables and KV caches grow with the sequence, never to
//! Mistral-Nemo's 1,024,000 positions up front.

use candle_core::{Device, Module, Tensor};
use df11_candle::{Embedding, Linear, ModelWeights};
use df11_llm::{
    decoder_mask, last_position, output_projection, CausalLm, DecoderLayer, LoadBar, Result,
    RmsNorm, RotaryEmbedding,
};

use crate::config::MistralConfig;

/// A Mistral causal language model.
pub struct Mistral {
    embed_tokens: Embedding,
    rotary: RotaryEmbedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Linear,
    sliding_window: Option<usize>,
    device: Device,
}

impl Mistral {
    /// Builds the model from `weights` (DF11 or dense).
    pub fn load(cfg: &MistralConfig, weights: &ModelWeights, progress: &LoadBar) -> Result<Self> {
        progress.set_steps(cfg.num_hidden_layers + 1);
        let (vocab, hidden) = (cfg.vocab_size, cfg.hidden_size);
        let embed_tokens = weights.embedding("model.embed_tokens", vocab, hidden)?;
        let rotary = RotaryEmbedding::new(
            cfg.rope_scaling.inv_freq(cfg.rope_theta, cfg.head_dim()),
            cfg.max_position_embeddings,
            weights.dtype(),
            weights.device(),
        );
        let spec = cfg.decoder();
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            layers.push(DecoderLayer::load(
                &spec,
                weights,
                &format!("model.layers.{i}"),
            )?);
            progress.step();
        }
        let norm = RmsNorm::load(weights, "model.norm", hidden, cfg.rms_norm_eps)?;
        let lm_head = output_projection(
            weights,
            cfg.tie_word_embeddings,
            "lm_head",
            "model.embed_tokens",
            &embed_tokens,
            vocab,
            hidden,
        )?;
        progress.step();
        Ok(Self {
            embed_tokens,
            rotary,
            layers,
            norm,
            lm_head,
            sliding_window: cfg.sliding_window,
            device: weights.device().clone(),
        })
    }
}

impl CausalLm for Mistral {
    fn forward(&mut self, ids: &Tensor, start_pos: usize) -> Result<Tensor> {
        let seq = ids.dim(1)?;
        let mut x = self.embed_tokens.forward(ids)?;
        let (cos, sin) = self.rotary.tables(start_pos, seq)?;
        // Causal, and with a sliding window also in decode steps once keys fall out of it.
        let mask = decoder_mask(seq, start_pos, self.sliding_window, &self.device)?;
        for layer in &mut self.layers {
            x = layer.forward(&x, &cos, &sin, mask.as_ref())?;
        }
        let x = self.norm.forward(&last_position(&x)?)?;
        Ok(self.lm_head.forward(&x)?.squeeze(1)?)
    }

    fn reset(&mut self) {
        for layer in &mut self.layers {
            layer.cache_mut().reset();
        }
    }

    fn reserve(&mut self, positions: usize) {
        for layer in &mut self.layers {
            layer.cache_mut().reserve(positions);
        }
    }

    fn device(&self) -> &Device {
        &self.device
    }
}
