//! Phi-4 (transformers' `Phi3ForCausalLM`): embedding → decoder layers (attention through one
//! fused `qkv_proj` with RoPE on the first `rotary_dim` features of each head, SiLU-gated MLP
//! through one fused `gate_up_proj`, pre-norm residuals) → final norm → `lm_head`.
//!
//! Every linear and embedding comes from [`ModelWeights`] by name, so the same code runs a DF11
//! folder (weights kept compressed, decoded just before use; the layer unit holds `o_proj`,
//! `qkv_proj`, `gate_up_proj`, `down_proj` in whatever order its config lists) and a plain BF16
//! folder, with bit-identical results.

use candle_core::{Device, Module, Tensor};
use df11_candle::{Embedding, Linear, ModelWeights};
use df11_llm::activation::silu_mul;
use df11_llm::{
    apply_rope, attention, decoder_mask, default_inv_freq, last_position, merge_heads,
    output_projection, split_heads, CausalLm, KvCache, LoadBar, Result, RmsNorm, RotaryEmbedding,
};

use crate::config::Phi4Config;

/// A Phi-4 causal language model.
pub struct Phi4 {
    embed_tokens: Embedding,
    rotary: RotaryEmbedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Linear,
    sliding_window: Option<usize>,
    device: Device,
}

impl Phi4 {
    /// Builds the model from `weights` (DF11 or dense).
    pub fn load(cfg: &Phi4Config, weights: &ModelWeights, progress: &LoadBar) -> Result<Self> {
        progress.set_steps(cfg.num_hidden_layers + 1);
        let (vocab, hidden) = (cfg.vocab_size, cfg.hidden_size);
        let embed_tokens = weights.embedding("model.embed_tokens", vocab, hidden)?;
        let inv_freq = default_inv_freq(cfg.rope_theta, cfg.rotary_dim());
        let rotary = RotaryEmbedding::new(
            inv_freq,
            cfg.max_position_embeddings,
            weights.dtype(),
            weights.device(),
        );
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            layers.push(DecoderLayer::load(
                cfg,
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

impl CausalLm for Phi4 {
    fn forward(&mut self, ids: &Tensor, start_pos: usize) -> Result<Tensor> {
        let seq = ids.dim(1)?;
        let mut x = self.embed_tokens.forward(ids)?;
        let (cos, sin) = self.rotary.tables(start_pos, seq)?;
        let mask = decoder_mask(seq, start_pos, self.sliding_window, &self.device)?;
        for layer in &mut self.layers {
            x = layer.forward(&x, &cos, &sin, mask.as_ref())?;
        }
        let x = self.norm.forward(&last_position(&x)?)?;
        Ok(self.lm_head.forward(&x)?.squeeze(1)?)
    }

    fn reset(&mut self) {
        for layer in &mut self.layers {
            layer.attn.cache.reset();
        }
    }

    fn reserve(&mut self, positions: usize) {
        for layer in &mut self.layers {
            layer.attn.cache.reserve(positions);
        }
    }

    fn device(&self) -> &Device {
        &self.device
    }
}

/// One decoder layer: `x + attn(norm(x))`, then `x + mlp(norm(x))`.
struct DecoderLayer {
    input_layernorm: RmsNorm,
    attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl DecoderLayer {
    fn load(cfg: &Phi4Config, weights: &ModelWeights, prefix: &str) -> Result<Self> {
        let (hidden, eps) = (cfg.hidden_size, cfg.rms_norm_eps);
        Ok(Self {
            input_layernorm: RmsNorm::load(
                weights,
                &format!("{prefix}.input_layernorm"),
                hidden,
                eps,
            )?,
            attn: Attention::load(cfg, weights, &format!("{prefix}.self_attn"))?,
            post_attention_layernorm: RmsNorm::load(
                weights,
                &format!("{prefix}.post_attention_layernorm"),
                hidden,
                eps,
            )?,
            mlp: Mlp::load(cfg, weights, &format!("{prefix}.mlp"))?,
        })
    }

    fn forward(
        &mut self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let h = self
            .attn
            .forward(&self.input_layernorm.forward(x)?, cos, sin, mask)?;
        let x = (x + h)?;
        let h = self
            .mlp
            .forward(&self.post_attention_layernorm.forward(&x)?)?;
        Ok((x + h)?)
    }
}

/// Grouped-query self-attention; queries, keys and values come from one projection whose
/// output rows are `[q; k; v]`.
struct Attention {
    qkv_proj: Linear,
    o_proj: Linear,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    cache: KvCache,
}

impl Attention {
    fn load(cfg: &Phi4Config, weights: &ModelWeights, prefix: &str) -> Result<Self> {
        let (hidden, d) = (cfg.hidden_size, cfg.head_dim());
        let (heads, kv_heads) = (cfg.num_attention_heads, cfg.kv_heads());
        let qkv_rows = (heads + 2 * kv_heads) * d;
        Ok(Self {
            qkv_proj: weights.linear(&format!("{prefix}.qkv_proj"), qkv_rows, hidden, false)?,
            o_proj: weights.linear(&format!("{prefix}.o_proj"), hidden, heads * d, false)?,
            heads,
            kv_heads,
            head_dim: d,
            cache: KvCache::new(cfg.max_position_embeddings),
        })
    }

    fn forward(
        &mut self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let d = self.head_dim;
        let (q_width, kv_width) = (self.heads * d, self.kv_heads * d);
        let qkv = self.qkv_proj.forward(x)?;
        let q = split_heads(&qkv.narrow(2, 0, q_width)?, self.heads, d)?;
        let k = split_heads(&qkv.narrow(2, q_width, kv_width)?, self.kv_heads, d)?;
        let v = split_heads(
            &qkv.narrow(2, q_width + kv_width, kv_width)?,
            self.kv_heads,
            d,
        )?;
        // Tables narrower than the head rotate its first features only (partial rotary).
        let q = apply_rope(&q, cos, sin)?;
        let k = apply_rope(&k, cos, sin)?;
        let (k, v) = self.cache.append(&k, &v)?;
        let out = attention(&q, &k, &v, 1.0 / (d as f64).sqrt(), mask)?;
        Ok(self.o_proj.forward(&merge_heads(&out)?)?)
    }
}

/// The SiLU-gated MLP with one projection whose output rows are `[gate; up]`:
/// `down(silu(gate) * up)`.
struct Mlp {
    gate_up_proj: Linear,
    down_proj: Linear,
    intermediate: usize,
}

impl Mlp {
    fn load(cfg: &Phi4Config, weights: &ModelWeights, prefix: &str) -> Result<Self> {
        let (hidden, inter) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Self {
            gate_up_proj: weights.linear(
                &format!("{prefix}.gate_up_proj"),
                2 * inter,
                hidden,
                false,
            )?,
            down_proj: weights.linear(&format!("{prefix}.down_proj"), hidden, inter, false)?,
            intermediate: inter,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate_up = self.gate_up_proj.forward(x)?;
        let gate = gate_up.narrow(2, 0, self.intermediate)?;
        let up = gate_up.narrow(2, self.intermediate, self.intermediate)?;
        Ok(self.down_proj.forward(&silu_mul(&gate, &up)?)?)
    }
}
