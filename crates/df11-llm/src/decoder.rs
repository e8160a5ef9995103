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

use candle_core::{DType, Module, Tensor};
use df11_candle::{Linear, ModelWeights};

use crate::activation::gated;
use crate::attention::{attention, merge_heads, softcapped_attention, split_heads};
use crate::error::Result;
use crate::kv_cache::KvCache;
use crate::norm::RmsNorm;
use crate::rope::apply_rope;
use crate::spec::DecoderSpec;

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
}

impl SelfAttention {
    /// The projections.
    fn linears(&self) -> Vec<&Linear> {
        let mut all = match &self.qkv {
            QkvProj::Separate { q, k, v } => vec![q, k, v],
            QkvProj::Fused(qkv) => vec![qkv],
        };
        all.push(&self.o_proj);
        all
    }

    /// The projections' names and `[out, in]` shapes ([`Self::load`] loads them with these).
    fn projections(spec: &DecoderSpec) -> Vec<(&'static str, usize, usize)> {
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
                let prompt = df11_candle::ops::PromptAt {
                    rows,
                    seq,
                    first_slot,
                    start,
                };
                df11_candle::ops::prefill_attention(
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
            None => attention(&q, &k, &v, self.scale, mask)?,
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
        use df11_candle::ops::{qk_norm_rope_kv, HeadNorm};
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
        Ok(df11_candle::ops::flash_decode(
            q,
            kv.tensor(),
            ctx.positions,
            ctx.slots,
            self.scale as f32,
            self.softcap.map(|c| c as f32),
            ctx.window,
            ctx.splits,
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

/// The gate/up projections: two, or one whose rows are `[gate; up]`.
enum GateUpProj {
    Separate { gate: Linear, up: Linear },
    Fused(Linear),
}

/// The gated MLP: `down(act(gate(x)) * up(x))`.
pub struct GatedMlp {
    gate_up: GateUpProj,
    down_proj: Linear,
    intermediate: usize,
    activation: crate::spec::Activation,
}

impl GatedMlp {
    /// The projections.
    fn linears(&self) -> Vec<&Linear> {
        let mut all = match &self.gate_up {
            GateUpProj::Separate { gate, up } => vec![gate, up],
            GateUpProj::Fused(gate_up) => vec![gate_up],
        };
        all.push(&self.down_proj);
        all
    }

    /// The projections' names and `[out, in]` shapes ([`Self::load`] loads them with these).
    fn projections(spec: &DecoderSpec) -> Vec<(&'static str, usize, usize)> {
        let (hidden, inter) = (spec.hidden_size, spec.intermediate_size);
        let mut all = if spec.fused_gate_up {
            vec![("gate_up_proj", 2 * inter, hidden)]
        } else {
            vec![("gate_proj", inter, hidden), ("up_proj", inter, hidden)]
        };
        all.push(("down_proj", hidden, inter));
        all
    }

    /// Loads `{prefix}.{gate,up,down}_proj` (or `gate_up_proj`, `down_proj`).
    pub fn load(spec: &DecoderSpec, weights: &ModelWeights, prefix: &str) -> Result<Self> {
        let shapes = Self::projections(spec);
        let linear = |name: &str| {
            let &(_, out, inp) = shapes
                .iter()
                .find(|p| p.0 == name)
                .expect("a name of Self::projections");
            weights.linear(&format!("{prefix}.{name}"), out, inp, spec.mlp_bias)
        };
        let stacked = if spec.fused_gate_up {
            None
        } else {
            // gate and up read the same input: one stacked layer where the weights allow it.
            let names = ["gate_proj", "up_proj"].map(|n| format!("{prefix}.{n}"));
            let modules: Vec<(&str, usize)> = names
                .iter()
                .map(|n| (n.as_str(), spec.intermediate_size))
                .collect();
            weights.stacked_linear(&modules, spec.hidden_size, spec.mlp_bias)?
        };
        let gate_up = if spec.fused_gate_up {
            GateUpProj::Fused(linear("gate_up_proj")?)
        } else if let Some(gate_up) = stacked {
            GateUpProj::Fused(gate_up)
        } else {
            GateUpProj::Separate {
                gate: linear("gate_proj")?,
                up: linear("up_proj")?,
            }
        };
        Ok(Self {
            gate_up,
            down_proj: linear("down_proj")?,
            intermediate: spec.intermediate_size,
            activation: spec.activation,
        })
    }

    /// Applies the MLP.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // A stacked gate/up output on CUDA in BF16: the activation reads its two halves in place.
        #[cfg(feature = "cuda")]
        if let (GateUpProj::Fused(gate_up), crate::spec::Activation::Silu) =
            (&self.gate_up, self.activation)
        {
            if x.device().is_cuda() && x.dtype() == DType::BF16 {
                let both = gate_up.forward(x)?;
                let act = df11_candle::ops::silu_mul_halves_bf16(&both)?;
                return Ok(self.down_proj.forward(&act)?);
            }
        }
        let (gate, up) = match &self.gate_up {
            GateUpProj::Separate { gate, up } => (gate.forward(x)?, up.forward(x)?),
            GateUpProj::Fused(gate_up) => {
                let both = gate_up.forward(x)?;
                let last = both.rank() - 1;
                (
                    both.narrow(last, 0, self.intermediate)?,
                    both.narrow(last, self.intermediate, self.intermediate)?,
                )
            }
        };
        Ok(self
            .down_proj
            .forward(&gated(self.activation, &gate, &up)?)?)
    }
}
