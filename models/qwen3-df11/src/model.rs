//! Qwen3 (dense): embedding → decoder layers (attention with per-head q/k RMSNorm and RoPE,
//! SiLU-gated MLP, pre-norm residuals) → final norm → `lm_head`.
//!
//! Every linear and embedding comes from [`ModelWeights`], so the same code runs a DF11 folder
//! (weights kept compressed, decoded just before use) and a plain BF16 folder, with bit-identical
//! results.

use candle_core::{Device, Module, Tensor};
use df11_candle::{Embedding, Linear, ModelWeights};
use df11_llm::activation::silu_mul;
use df11_llm::{
    apply_rope, attention, causal_mask, default_inv_freq, last_position, merge_heads,
    output_projection, split_heads, CausalLm, KvCache, LoadBar, Result, RmsNorm, RotaryEmbedding,
};

use crate::config::Qwen3Config;

/// A Qwen3 causal language model.
pub struct Qwen3 {
    embed_tokens: Embedding,
    rotary: RotaryEmbedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Linear,
    device: Device,
}

impl Qwen3 {
    /// Builds the model from `weights` (DF11 or dense).
    pub fn load(cfg: &Qwen3Config, weights: &ModelWeights, progress: &LoadBar) -> Result<Self> {
        progress.set_steps(cfg.num_hidden_layers + 1);
        let (vocab, hidden) = (cfg.vocab_size, cfg.hidden_size);
        let embed_tokens = weights.embedding("model.embed_tokens", vocab, hidden)?;
        let inv_freq = default_inv_freq(cfg.rope_theta, cfg.head_dim());
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
        let norm = norm(weights, "model.norm", hidden, cfg.rms_norm_eps)?;
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
            device: weights.device().clone(),
        })
    }
}

impl CausalLm for Qwen3 {
    fn forward(&mut self, ids: &Tensor, start_pos: usize) -> Result<Tensor> {
        let seq = ids.dim(1)?;
        let mut x = self.embed_tokens.forward(ids)?;
        let (cos, sin) = self.rotary.tables(start_pos, seq)?;
        let mask = if seq > 1 {
            Some(causal_mask(seq, start_pos, None, &self.device)?)
        } else {
            None
        };
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
    fn load(cfg: &Qwen3Config, weights: &ModelWeights, prefix: &str) -> Result<Self> {
        let (hidden, eps) = (cfg.hidden_size, cfg.rms_norm_eps);
        Ok(Self {
            input_layernorm: norm(weights, &format!("{prefix}.input_layernorm"), hidden, eps)?,
            attn: Attention::load(cfg, weights, &format!("{prefix}.self_attn"))?,
            post_attention_layernorm: norm(
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

/// Grouped-query self-attention with RMSNorm on each query and key head before RoPE.
struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    cache: KvCache,
}

impl Attention {
    fn load(cfg: &Qwen3Config, weights: &ModelWeights, prefix: &str) -> Result<Self> {
        let (hidden, d, bias) = (cfg.hidden_size, cfg.head_dim(), cfg.attention_bias);
        let (heads, kv_heads) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        let linear = |name: &str, out: usize, inp: usize| {
            weights.linear(&format!("{prefix}.{name}"), out, inp, bias)
        };
        Ok(Self {
            q_proj: linear("q_proj", heads * d, hidden)?,
            k_proj: linear("k_proj", kv_heads * d, hidden)?,
            v_proj: linear("v_proj", kv_heads * d, hidden)?,
            o_proj: linear("o_proj", hidden, heads * d)?,
            q_norm: norm(weights, &format!("{prefix}.q_norm"), d, cfg.rms_norm_eps)?,
            k_norm: norm(weights, &format!("{prefix}.k_norm"), d, cfg.rms_norm_eps)?,
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
        let q = split_heads(&self.q_proj.forward(x)?, self.heads, d)?;
        let k = split_heads(&self.k_proj.forward(x)?, self.kv_heads, d)?;
        let v = split_heads(&self.v_proj.forward(x)?, self.kv_heads, d)?;
        let q = apply_rope(&self.q_norm.forward(&q)?, cos, sin)?;
        let k = apply_rope(&self.k_norm.forward(&k)?, cos, sin)?;
        let (k, v) = self.cache.append(&k, &v)?;
        let out = attention(&q, &k, &v, 1.0 / (d as f64).sqrt(), mask)?;
        Ok(self.o_proj.forward(&merge_heads(&out)?)?)
    }
}

/// The SiLU-gated MLP: `down(silu(gate(x)) * up(x))`.
struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    fn load(cfg: &Qwen3Config, weights: &ModelWeights, prefix: &str) -> Result<Self> {
        let (hidden, inter) = (cfg.hidden_size, cfg.intermediate_size);
        let linear = |name: &str, out: usize, inp: usize| {
            weights.linear(&format!("{prefix}.{name}"), out, inp, false)
        };
        Ok(Self {
            gate_proj: linear("gate_proj", inter, hidden)?,
            up_proj: linear("up_proj", inter, hidden)?,
            down_proj: linear("down_proj", hidden, inter)?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate = self.gate_proj.forward(x)?;
        let up = self.up_proj.forward(x)?;
        Ok(self.down_proj.forward(&silu_mul(&gate, &up)?)?)
    }
}

/// The RMSNorm with weight `{module}.weight`.
fn norm(weights: &ModelWeights, module: &str, size: usize, eps: f64) -> Result<RmsNorm> {
    RmsNorm::new(weights.tensor(&format!("{module}.weight"), &[size])?, eps)
}
