//! Grouped-query self-attention of the decoder layer: the q/k/v projections (three, or one
//! stacked), per-head q/k norms, RoPE, the eager attention over the cache and the decode step's
//! in-place kernels.

use candle_core::{DType, Module, Tensor};
use df11_candle::{Linear, ModelWeights};

use super::{norm, EagerAt};
use crate::attention::{attention, merge_heads, softcapped_attention, split_heads};
use crate::error::Result;
#[cfg(feature = "cuda")]
use crate::kv_cache::KvCache;
use crate::norm::RmsNorm;
use crate::rope::apply_rope;
use crate::spec::DecoderSpec;

/// The q/k/v projections: three, or one whose rows are `[q; k; v]`.
enum QkvProj {
    Separate { q: Linear, k: Linear, v: Linear },
    Fused(Linear),
}

/// Grouped-query self-attention with RoPE on queries and keys and a KV cache.
pub struct SelfAttention {
    qkv: QkvProj,
    o_proj: Linear,
    /// Per-head norms of queries and keys (before RoPE).
    qk_norm: Option<(RmsNorm, RmsNorm)>,
    /// The q/k norm weights as the step kernel takes them: f32, `1 + w` for Gemma's flavour.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    head_norms_f32: Option<(Tensor, Tensor)>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    eps: f64,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    norm: crate::spec::NormKind,
    scale: f64,
    softcap: Option<f64>,
    /// The step kernels' launches may be programmatic dependent launches.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pdl: bool,
}

impl SelfAttention {
    /// The projections.
    pub(super) fn linears(&self) -> Vec<&Linear> {
        let mut all = match &self.qkv {
            QkvProj::Separate { q, k, v } => vec![q, k, v],
            QkvProj::Fused(qkv) => vec![qkv],
        };
        all.push(&self.o_proj);
        all
    }

    /// The projections' names and `[out, in]` shapes ([`Self::load`] loads them with these).
    pub(super) fn projections(spec: &DecoderSpec) -> Vec<(&'static str, usize, usize)> {
        let (hidden, d) = (spec.hidden_size, spec.head_dim);
        let (heads, kv_heads) = (spec.num_attention_heads, spec.num_key_value_heads);
        let mut all = if spec.fused_qkv {
            vec![("qkv_proj", (heads + 2 * kv_heads) * d, hidden)]
        } else {
            vec![
                ("q_proj", heads * d, hidden),
                ("k_proj", kv_heads * d, hidden),
                ("v_proj", kv_heads * d, hidden),
            ]
        };
        all.push(("o_proj", hidden, heads * d));
        all
    }

    /// Loads `{prefix}.{q,k,v,o}_proj` (or `qkv_proj`, `o_proj`) and the q/k norms.
    pub fn load(spec: &DecoderSpec, weights: &ModelWeights, prefix: &str) -> Result<Self> {
        let d = spec.head_dim;
        let (heads, kv_heads) = (spec.num_attention_heads, spec.num_key_value_heads);
        let shapes = Self::projections(spec);
        let linear = |name: &str, bias: bool| {
            let &(_, out, inp) = shapes
                .iter()
                .find(|p| p.0 == name)
                .expect("a name of Self::projections");
            weights.linear(&format!("{prefix}.{name}"), out, inp, bias)
        };
        let stacked = if spec.fused_qkv {
            None
        } else {
            // q, k and v read the same input: one stacked layer where the weights allow it
            // (one launch instead of three; the same bits).
            let names = ["q_proj", "k_proj", "v_proj"].map(|n| format!("{prefix}.{n}"));
            let outs = [heads * d, kv_heads * d, kv_heads * d];
            let modules: Vec<(&str, usize)> = names.iter().map(String::as_str).zip(outs).collect();
            weights.stacked_linear(&modules, spec.hidden_size, spec.qkv_bias)?
        };
        let qkv = if spec.fused_qkv {
            QkvProj::Fused(linear("qkv_proj", spec.qkv_bias)?)
        } else if let Some(qkv) = stacked {
            QkvProj::Fused(qkv)
        } else {
            QkvProj::Separate {
                q: linear("q_proj", spec.qkv_bias)?,
                k: linear("k_proj", spec.qkv_bias)?,
                v: linear("v_proj", spec.qkv_bias)?,
            }
        };
        let qk_norm = if spec.qk_norm {
            let head_norm = |name: &str| norm(spec, weights, &format!("{prefix}.{name}"), d);
            Some((head_norm("q_norm")?, head_norm("k_norm")?))
        } else {
            None
        };
        let head_norms_f32 = match &qk_norm {
            Some((q, k)) => Some((
                q.weight().to_dtype(DType::F32)?,
                k.weight().to_dtype(DType::F32)?,
            )),
            None => None,
        };
        Ok(Self {
            qkv,
            o_proj: linear("o_proj", spec.o_bias)?,
            qk_norm,
            head_norms_f32,
            heads,
            kv_heads,
            head_dim: d,
            eps: spec.rms_norm_eps,
            norm: spec.norm,
            scale: spec.attention_scale,
            softcap: spec.attn_softcap,
            pdl: weights.options().pdl,
        })
    }

    /// Queries, keys and values of `x`, `[batch, seq, heads * head_dim]` each (views into one
    /// output for a fused projection).
    fn project_rows(&self, x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let d = self.head_dim;
        Ok(match &self.qkv {
            QkvProj::Separate { q, k, v } => (q.forward(x)?, k.forward(x)?, v.forward(x)?),
            QkvProj::Fused(qkv) => {
                let (q_width, kv_width) = (self.heads * d, self.kv_heads * d);
                let all = qkv.forward(x)?;
                (
                    all.narrow(2, 0, q_width)?,
                    all.narrow(2, q_width, kv_width)?,
                    all.narrow(2, q_width + kv_width, kv_width)?,
                )
            }
        })
    }

    /// Queries, keys and values of `x`, `[batch, heads, seq, head_dim]` each.
    fn project(&self, x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let d = self.head_dim;
        let (q, k, v) = self.project_rows(x)?;
        Ok((
            split_heads(&q, self.heads, d)?,
            split_heads(&k, self.kv_heads, d)?,
            split_heads(&v, self.kv_heads, d)?,
        ))
    }

    /// `softmax(q kᵀ · scale + mask) v` over the cached and the new positions, projected back;
    /// the new keys and values are written into the cache first.
    pub fn forward(&self, x: &Tensor, at: &EagerAt<'_>) -> Result<Tensor> {
        let EagerAt {
            cos,
            sin,
            mask,
            kv,
            first_slot,
            start,
            in_place,
            flash,
        } = *at;
        #[cfg(feature = "cuda")]
        if let Some(ctx) = in_place {
            let (rows, seq, _) = x.dims3()?;
            // [rows * seq, heads, d]: one query per token, each over its own prefix.
            let q = self.queries_in_place(x, &ctx, kv)?;
            let out = if flash {
                let prompt = crate::ops::PromptAt {
                    rows,
                    seq,
                    first_slot,
                    start,
                };
                crate::ops::prefill_attention(
                    &q,
                    kv.tensor(),
                    prompt,
                    self.scale as f32,
                    self.softcap.map(|c| c as f32),
                    ctx.window,
                )?
            } else {
                self.attend_in_place(&q, kv, &ctx)?
            };
            let width = self.heads * self.head_dim;
            return Ok(self.o_proj.forward(&out.reshape((rows, seq, width))?)?);
        }
        #[cfg(not(feature = "cuda"))]
        let _ = (in_place, flash);
        let (q, k, v) = self.project(x)?;
        let (q, k) = match &self.qk_norm {
            Some((qn, kn)) => (qn.forward(&q)?, kn.forward(&k)?),
            None => (q, k),
        };
        // Tables narrower than the head rotate its first features only (partial rotary).
        let q = apply_rope(&q, cos, sin)?;
        let k = apply_rope(&k, cos, sin)?;
        kv.write(first_slot, start, &k, &v)?;
        let (rows, _, seq, _) = q.dims4()?;
        let (k, v) = kv.read(first_slot, rows, start + seq)?;
        let out = match self.softcap {
            None => attention(&q, &k, &v, self.scale, mask, self.pdl)?,
            Some(cap) => softcapped_attention(&q, &k, &v, self.scale, cap, mask)?,
        };
        Ok(self.o_proj.forward(&merge_heads(&out)?)?)
    }

    /// Whether the step kernels can run this attention: BF16 weights of a head size they take
    /// (even; at most 256, or at most 64 when not a multiple of 8). The device and dtype are
    /// checked by the caller.
    pub fn step_supported(&self) -> bool {
        let d = self.head_dim;
        d.is_multiple_of(2)
            && d > 0
            && if d.is_multiple_of(8) {
                d <= 256
            } else {
                d <= 64
            }
    }

    /// One decode token per row (CUDA, BF16): projections, q/k norm + RoPE + cache write in one
    /// launch, flash-decoding over the row's cached positions, the output projection.
    #[cfg(feature = "cuda")]
    pub fn step(&self, x: &Tensor, ctx: &crate::step::StepCtx<'_>, kv: &KvCache) -> Result<Tensor> {
        let rows = x.dim(0)?;
        let q = self.queries_in_place(x, ctx, kv)?;
        let out = self.attend_in_place(&q, kv, ctx)?;
        let out = out.reshape((rows, 1, self.heads * self.head_dim))?;
        Ok(self.o_proj.forward(&out)?)
    }

    /// The queries of `x` (`[rows, seq, hidden]`, one token per row of `ctx`'s positions and
    /// slots) as `[rows * seq, heads, head_dim]`, normed and rotated, with the keys and values
    /// written into the cache: the projections, then one launch.
    #[cfg(feature = "cuda")]
    fn queries_in_place(
        &self,
        x: &Tensor,
        ctx: &crate::step::StepCtx<'_>,
        kv: &KvCache,
    ) -> Result<Tensor> {
        use crate::ops::{qk_norm_rope_kv, HeadNorm};
        let (q, k, v) = self.project_rows(x)?;
        let one_plus = self.norm == crate::spec::NormKind::OnePlusWeight;
        let norms = self.head_norms_f32.as_ref().map(|(qw, kw)| {
            (
                HeadNorm {
                    weight: qw,
                    one_plus,
                },
                HeadNorm {
                    weight: kw,
                    one_plus,
                },
            )
        });
        Ok(qk_norm_rope_kv(
            &q,
            &k,
            &v,
            norms,
            self.eps as f32,
            ctx.cos,
            ctx.sin,
            ctx.positions,
            ctx.slots,
            kv.tensor(),
            self.heads,
            self.pdl,
        )?)
    }

    /// Attention of one query per row of `q` `[rows, heads, head_dim]` over its sequence in the
    /// cache (`ctx`'s positions and slots), by the flash-decoding kernel: `[rows, heads *
    /// head_dim]`. The decode step's attention, and a prompt's with
    /// [`crate::PromptAttention::FlashDecoding`].
    #[cfg(feature = "cuda")]
    fn attend_in_place(
        &self,
        q: &Tensor,
        kv: &KvCache,
        ctx: &crate::step::StepCtx<'_>,
    ) -> Result<Tensor> {
        Ok(crate::ops::flash_decode(
            q,
            kv.tensor(),
            ctx.positions,
            ctx.slots,
            self.scale as f32,
            self.softcap.map(|c| c as f32),
            ctx.window,
            ctx.splits,
            self.pdl,
        )?)
    }

    /// Key/value heads and head size.
    pub fn kv_shape(&self) -> (usize, usize) {
        (self.kv_heads, self.head_dim)
    }

    /// Query heads per key/value head.
    pub fn groups(&self) -> usize {
        self.heads / self.kv_heads
    }
}
