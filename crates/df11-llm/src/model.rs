//! The one decoder-only model every architecture runs: embedding (scaled for Gemma) → decoder
//! layers → final norm → output projection (tied or not; soft-capped for Gemma 2-style
//! configs). What varies between architectures is a [`ModelSpec`].
//!
//! Every linear and embedding comes from [`ModelWeights`], so the same code runs a DF11 folder
//! (weights kept compressed, decoded just before use) and a plain BF16 folder, with bit-identical
//! results.

use candle_core::{Device, Module, Tensor};
use df11_candle::{Embedding, Linear, ModelWeights};

use crate::attention::{decoder_mask, last_position, softcap};
use crate::decoder::DecoderLayer;
use crate::error::{LlmError, Result};
use crate::generate::CausalLm;
use crate::norm::RmsNorm;
use crate::progress::LoadBar;
use crate::rope::RotaryEmbedding;
use crate::spec::ModelSpec;
use crate::tie::output_projection;

/// A decoder-only causal language model built from a [`ModelSpec`].
pub struct DecoderModel {
    spec: ModelSpec,
    embed_tokens: Embedding,
    /// `√hidden` in the compute dtype, when the spec scales the embedding.
    embed_scale: Option<Tensor>,
    ropes: Vec<RotaryEmbedding>,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Linear,
    device: Device,
}

impl DecoderModel {
    /// Builds the model of `spec` from `weights` (DF11 or dense); `progress` counts layers.
    pub fn load(spec: ModelSpec, weights: &ModelWeights, progress: &LoadBar) -> Result<Self> {
        if let Some(problem) = spec.problem() {
            return Err(LlmError::Usage(format!("model spec: {problem}")));
        }
        progress.set_steps(spec.layers.len() + 1);
        let d = &spec.decoder;
        let (vocab, hidden) = (spec.vocab_size, d.hidden_size);
        let prefix = &spec.names.model;
        let embed_module = format!("{prefix}.embed_tokens");
        let embed_tokens = weights.embedding(&embed_module, vocab, hidden)?;
        let embed_scale = if spec.scale_embedding {
            let scale = Tensor::new(&[(hidden as f32).sqrt()], weights.device())?;
            Some(scale.to_dtype(weights.dtype())?)
        } else {
            None
        };
        let ropes = spec
            .ropes
            .iter()
            .map(|r| {
                RotaryEmbedding::new(
                    r.inv_freq(),
                    d.max_positions,
                    weights.dtype(),
                    weights.device(),
                )
            })
            .collect();
        let mut layers = Vec::with_capacity(spec.layers.len());
        for i in 0..spec.layers.len() {
            layers.push(DecoderLayer::load(
                d,
                weights,
                &format!("{prefix}.layers.{i}"),
            )?);
            progress.step();
        }
        let norm = RmsNorm::load_kind(
            weights,
            &format!("{prefix}.norm"),
            hidden,
            d.rms_norm_eps,
            d.norm,
        )?;
        // Tied or not is the config's call, not the weight names': in a DF11 repo
        // `lm_head.weight` is a compressed unit, not a tensor of that name.
        let lm_head = output_projection(
            weights,
            spec.tie_word_embeddings,
            &spec.names.lm_head,
            &embed_module,
            &embed_tokens,
            vocab,
            hidden,
        )?;
        progress.step();
        Ok(Self {
            spec,
            embed_tokens,
            embed_scale,
            ropes,
            layers,
            norm,
            lm_head,
            device: weights.device().clone(),
        })
    }

    /// The spec the model was built from.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }
}

impl CausalLm for DecoderModel {
    fn forward(&mut self, ids: &Tensor, start_pos: usize) -> Result<Tensor> {
        let seq = ids.dim(1)?;
        let mut x = self.embed_tokens.forward(ids)?;
        if let Some(scale) = &self.embed_scale {
            x = x.broadcast_mul(scale)?;
        }
        let tables = self
            .ropes
            .iter_mut()
            .map(|r| r.tables(start_pos, seq))
            .collect::<Result<Vec<_>>>()?;
        // One mask per distinct window, only where a step needs one (several queries, or keys
        // beyond the window).
        let mut masks: Vec<(Option<usize>, Option<Tensor>)> = Vec::new();
        for layer in &self.spec.layers {
            if !masks.iter().any(|(w, _)| *w == layer.window) {
                let mask = decoder_mask(seq, start_pos, layer.window, &self.device)?;
                masks.push((layer.window, mask));
            }
        }
        for (layer, ls) in self.layers.iter_mut().zip(&self.spec.layers) {
            let (cos, sin) = &tables[ls.rope];
            let mask = masks
                .iter()
                .find(|(w, _)| *w == ls.window)
                .and_then(|(_, m)| m.as_ref());
            x = layer.forward(&x, cos, sin, mask)?;
        }
        let x = self.norm.forward(&last_position(&x)?)?;
        let logits = self.lm_head.forward(&x)?.squeeze(1)?;
        match self.spec.final_softcap {
            Some(cap) => softcap(&logits, cap),
            None => Ok(logits),
        }
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
