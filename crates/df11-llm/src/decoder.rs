//! The Llama-style decoder layer shared by Llama, Mistral and Qwen2 (and their DF11 repos):
//! `x + attn(norm(x))`, then `x + mlp(norm(x))`, with grouped-query self-attention (RoPE, the
//! biases each family has) and a SiLU-gated MLP. Weights are read through [`ModelWeights`] under
//! transformers' names, so the same layer runs a DF11 folder and a plain BF16 one.

use candle_core::{Module, Tensor};
use df11_candle::{Linear, ModelWeights};

use crate::attention::{attention, merge_heads, split_heads};
use crate::error::Result;
use crate::kv_cache::KvCache;
use crate::norm::RmsNorm;
use crate::rope::apply_rope;

/// The sizes and options of a Llama-style decoder layer.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderSpec {
    /// Hidden size.
    pub hidden_size: usize,
    /// MLP inner size.
    pub intermediate_size: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (a divisor of `num_attention_heads`).
    pub num_key_value_heads: usize,
    /// Head size (may differ from `hidden_size / num_attention_heads`, e.g. Mistral-Nemo).
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// q/k/v projections have biases (Qwen2; Llama's `attention_bias`).
    pub qkv_bias: bool,
    /// o_proj has a bias (Llama's `attention_bias`).
    pub o_bias: bool,
    /// gate/up/down have biases (Llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// Positions the KV cache may hold (the context length).
    pub max_positions: usize,
}

impl DecoderSpec {
    /// Why the sizes cannot work, if they cannot.
    pub fn problem(&self) -> Option<String> {
        let (h, kv) = (self.num_attention_heads, self.num_key_value_heads);
        if h == 0 || kv == 0 || !h.is_multiple_of(kv) {
            return Some(format!(
                "{h} attention heads cannot share {kv} key/value heads"
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return Some(format!(
                "head_dim {} is not a positive even number",
                self.head_dim
            ));
        }
        None
    }
}

/// One decoder layer, `{prefix}.input_layernorm`, `.self_attn.*`, `.post_attention_layernorm`,
/// `.mlp.*`.
pub struct DecoderLayer {
    input_layernorm: RmsNorm,
    self_attn: SelfAttention,
    post_attention_layernorm: RmsNorm,
    mlp: GatedMlp,
}

impl DecoderLayer {
    /// Loads the layer at `prefix` (e.g. `model.layers.3`).
    pub fn load(spec: &DecoderSpec, weights: &ModelWeights, prefix: &str) -> Result<Self> {
        let (hidden, eps) = (spec.hidden_size, spec.rms_norm_eps);
        Ok(Self {
            input_layernorm: RmsNorm::load(
                weights,
                &format!("{prefix}.input_layernorm"),
                hidden,
                eps,
            )?,
            self_attn: SelfAttention::load(spec, weights, &format!("{prefix}.self_attn"))?,
            post_attention_layernorm: RmsNorm::load(
                weights,
                &format!("{prefix}.post_attention_layernorm"),
                hidden,
                eps,
            )?,
            mlp: GatedMlp::load(spec, weights, &format!("{prefix}.mlp"))?,
        })
    }

    /// `x` (`[batch, seq, hidden]`) at the positions of the rotary tables `cos`/`sin`; `mask` is
    /// the additive causal mask (`None` for a single position).
    pub fn forward(
        &mut self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let h = self
            .self_attn
            .forward(&self.input_layernorm.forward(x)?, cos, sin, mask)?;
        let x = (x + h)?;
        let h = self
            .mlp
            .forward(&self.post_attention_layernorm.forward(&x)?)?;
        Ok((x + h)?)
    }

    /// The layer's KV cache.
    pub fn cache_mut(&mut self) -> &mut KvCache {
        &mut self.self_attn.cache
    }
}

/// Grouped-query self-attention with RoPE on queries and keys and a KV cache.
pub struct SelfAttention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    cache: KvCache,
}

impl SelfAttention {
    /// Loads `{prefix}.{q,k,v,o}_proj`.
    pub fn load(spec: &DecoderSpec, weights: &ModelWeights, prefix: &str) -> Result<Self> {
        let (hidden, d) = (spec.hidden_size, spec.head_dim);
        let (heads, kv_heads) = (spec.num_attention_heads, spec.num_key_value_heads);
        let linear = |name: &str, out: usize, inp: usize, bias: bool| {
            weights.linear(&format!("{prefix}.{name}"), out, inp, bias)
        };
        Ok(Self {
            q_proj: linear("q_proj", heads * d, hidden, spec.qkv_bias)?,
            k_proj: linear("k_proj", kv_heads * d, hidden, spec.qkv_bias)?,
            v_proj: linear("v_proj", kv_heads * d, hidden, spec.qkv_bias)?,
            o_proj: linear("o_proj", hidden, heads * d, spec.o_bias)?,
            heads,
            kv_heads,
            head_dim: d,
            cache: KvCache::new(spec.max_positions),
        })
    }

    /// `softmax(q kᵀ / √d + mask) v` over the cached and the new positions, projected back.
    pub fn forward(
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
        let q = apply_rope(&q, cos, sin)?;
        let k = apply_rope(&k, cos, sin)?;
        let (k, v) = self.cache.append(&k, &v)?;
        let out = attention(&q, &k, &v, 1.0 / (d as f64).sqrt(), mask)?;
        Ok(self.o_proj.forward(&merge_heads(&out)?)?)
    }
}

/// The SiLU-gated MLP: `down(silu(gate(x)) * up(x))`.
pub struct GatedMlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl GatedMlp {
    /// Loads `{prefix}.{gate,up,down}_proj`.
    pub fn load(spec: &DecoderSpec, weights: &ModelWeights, prefix: &str) -> Result<Self> {
        let (hidden, inter, bias) = (spec.hidden_size, spec.intermediate_size, spec.mlp_bias);
        let linear = |name: &str, out: usize, inp: usize| {
            weights.linear(&format!("{prefix}.{name}"), out, inp, bias)
        };
        Ok(Self {
            gate_proj: linear("gate_proj", inter, hidden)?,
            up_proj: linear("up_proj", inter, hidden)?,
            down_proj: linear("down_proj", hidden, inter)?,
        })
    }

    /// Applies the MLP.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate = self.gate_proj.forward(x)?;
        let up = self.up_proj.forward(x)?;
        Ok(self
            .down_proj
            .forward(&crate::activation::silu_mul(&gate, &up)?)?)
    }
}
