//! The decoder layer every architecture runs: `x + attn(norm(x))`, then `x + mlp(norm(x))`
//! (Gemma: each sub-block's output normed too), with grouped-query self-attention (RoPE, the
//! biases, q/k norms and scale each family has) and a gated MLP. What varies is a
//! [`DecoderSpec`]. Weights are read through [`ModelWeights`] under transformers' names, so the
//! same layer runs a DF11 folder and a plain BF16 one.
//!
//! Two ways through a layer, both over a preallocated [`KvCache`]:
//! - [`DecoderLayer::forward`]: the eager pass (prefill, and decode steps off the kernel path),
//!   positions known on the host, candle's ops;
//! - `DecoderLayer::step` (CUDA, BF16): one decode token per row, rows at their own positions
//!   and cache slots read from device tensors, the residual add fused with the next norm, q/k
//!   norm + RoPE + cache write in one launch, flash-decoding attention over the cache in place.
//!   Nothing in it depends on host values that change between steps, so a CUDA graph captured
//!   once replays it (`crate::graph`).

use candle_core::{Module, Tensor};
use df11_candle::{Linear, ModelWeights};

use crate::error::Result;
use crate::kv_cache::KvCache;
use crate::norm::RmsNorm;
use crate::spec::DecoderSpec;

mod attention;
mod mlp;
pub use attention::SelfAttention;
pub use mlp::GatedMlp;

/// A norm of module `{prefix}.{name}` of the spec's flavour.
fn norm(spec: &DecoderSpec, w: &ModelWeights, prefix: &str, size: usize) -> Result<RmsNorm> {
    RmsNorm::load_kind(w, prefix, size, spec.rms_norm_eps, spec.norm)
}

/// Where an eager pass runs: row `r` of the input in cache slot `first_slot + r`, positions
/// `start..start + seq`, whose rotary tables are `cos`/`sin`; `mask` is the additive causal
/// mask (`None` when every cached key is visible to each query).
#[derive(Debug, Clone, Copy)]
pub struct EagerAt<'a> {
    /// RoPE cos rows of the positions.
    pub cos: &'a Tensor,
    /// RoPE sin rows of the positions.
    pub sin: &'a Tensor,
    /// The additive mask.
    pub mask: Option<&'a Tensor>,
    /// The layer's cache.
    pub kv: &'a KvCache,
    /// Cache slot of the first row.
    pub first_slot: usize,
    /// Position of the first token.
    pub start: usize,
    /// Attention in place over the cache (CUDA, BF16), one query per row of
    /// `positions`/`slots` (every token of every sequence), instead of candle's matmul
    /// attention with `mask`: q/k norm + RoPE + cache write in one launch, then `flash`'s
    /// kernel. See [`crate::DecodeOptions::prompt_attention`].
    pub in_place: Option<crate::step::StepCtx<'a>>,
    /// With `in_place`: the causal flash-attention kernel (else flash-decoding, one query at a
    /// time).
    pub flash: bool,
}

/// Gemma's extra norms around the MLP.
struct Sandwich {
    pre_feedforward: RmsNorm,
    post_feedforward: RmsNorm,
}

/// One decoder layer, `{prefix}.input_layernorm`, `.self_attn.*`, `.post_attention_layernorm`,
/// `.mlp.*` (and Gemma's `.pre_feedforward_layernorm`, `.post_feedforward_layernorm`).
pub struct DecoderLayer {
    input_layernorm: RmsNorm,
    self_attn: SelfAttention,
    /// Llama-style: the MLP's input norm. Gemma: the attention output's norm.
    post_attention_layernorm: RmsNorm,
    sandwich: Option<Sandwich>,
    mlp: GatedMlp,
}

impl DecoderLayer {
    /// Loads the layer at `prefix` (e.g. `model.layers.3`).
    pub fn load(spec: &DecoderSpec, weights: &ModelWeights, prefix: &str) -> Result<Self> {
        let hidden = spec.hidden_size;
        let layer_norm = |name: &str| norm(spec, weights, &format!("{prefix}.{name}"), hidden);
        let sandwich = if spec.sandwich_norms {
            Some(Sandwich {
                pre_feedforward: layer_norm("pre_feedforward_layernorm")?,
                post_feedforward: layer_norm("post_feedforward_layernorm")?,
            })
        } else {
            None
        };
        // The layer's linears are one DF11 unit: declared before the first loads it, each is
        // stored in the tensor-core tile order (`ModelWeights::declare_linear`).
        for (name, out, inp) in SelfAttention::projections(spec) {
            weights.declare_linear(&format!("{prefix}.self_attn.{name}"), out, inp);
        }
        for (name, out, inp) in GatedMlp::projections(spec) {
            weights.declare_linear(&format!("{prefix}.mlp.{name}"), out, inp);
        }
        Ok(Self {
            input_layernorm: layer_norm("input_layernorm")?,
            self_attn: SelfAttention::load(spec, weights, &format!("{prefix}.self_attn"))?,
            post_attention_layernorm: layer_norm("post_attention_layernorm")?,
            sandwich,
            mlp: GatedMlp::load(spec, weights, &format!("{prefix}.mlp"))?,
        })
    }

    /// The eager pass of `x` (`[batch, seq, hidden]`) at the rows and positions of `at`.
    pub fn forward(&self, x: &Tensor, at: &EagerAt<'_>) -> Result<Tensor> {
        let normed = self.input_layernorm.forward(x)?;
        let h = self.self_attn.forward(&normed, at)?;
        match &self.sandwich {
            None => {
                let x = (x + h)?;
                let h = self
                    .mlp
                    .forward(&self.post_attention_layernorm.forward(&x)?)?;
                Ok((x + h)?)
            }
            Some(s) => {
                let x = (x + self.post_attention_layernorm.forward(&h)?)?;
                let h = self.mlp.forward(&s.pre_feedforward.forward(&x)?)?;
                Ok((&x + s.post_feedforward.forward(&h)?)?)
            }
        }
    }

    /// One decode step (CUDA, BF16): `x` is the residual stream `[rows, 1, hidden]` before this
    /// layer, `pending` the previous layer's output still to be added to it. Returns the residual
    /// stream and this layer's output to add (fused with the next norm). `x` may be updated in
    /// place: the caller must not read it afterwards.
    #[cfg(feature = "cuda")]
    pub fn step(
        &self,
        x: Tensor,
        pending: Option<Tensor>,
        ctx: &crate::step::StepCtx<'_>,
        kv: &KvCache,
    ) -> Result<(Tensor, Tensor)> {
        let (x, normed) = crate::step::add_norm(x, pending, &self.input_layernorm)?;
        let h = self.self_attn.step(&normed, ctx, kv)?;
        match &self.sandwich {
            None => {
                let (x, normed) =
                    crate::step::add_norm(x, Some(h), &self.post_attention_layernorm)?;
                Ok((x, self.mlp.forward(&normed)?))
            }
            Some(s) => {
                let x = (x + self.post_attention_layernorm.forward(&h)?)?;
                let h = self.mlp.forward(&s.pre_feedforward.forward(&x)?)?;
                Ok((x, s.post_feedforward.forward(&h)?))
            }
        }
    }

    /// The layer's attention.
    pub fn attention(&self) -> &SelfAttention {
        &self.self_attn
    }

    /// Whether `DecoderLayer::step` can run this layer (see [`SelfAttention::step_supported`]).
    pub fn step_supported(&self) -> bool {
        self.self_attn.step_supported()
    }

    /// The compressed units the layer's linears are members of (each once).
    pub fn units(&self) -> Vec<std::sync::Arc<df11_candle::Df11Group>> {
        let mut units: Vec<std::sync::Arc<df11_candle::Df11Group>> = Vec::new();
        let linears = self
            .self_attn
            .linears()
            .into_iter()
            .chain(self.mlp.linears());
        for g in linears.filter_map(Linear::group) {
            if !units.iter().any(|u| std::sync::Arc::ptr_eq(u, g)) {
                units.push(g.clone());
            }
        }
        units
    }
}
