//! Gemma 3's building blocks: the `(1 + w)` RMSNorm, the GELU-tanh gated MLP and grouped-query
//! attention with q/k norms, RoPE and optional logit soft-capping.

use candle_core::{DType, Module, Tensor};
use df11_candle::{Linear, ModelWeights};
use df11_llm::{apply_rope, attention, merge_heads, split_heads, KvCache, LlmError, Result};

use crate::config::Gemma3Config;

/// Gemma's RMSNorm, computed like transformers: `x` in f32, normalised, multiplied by `1 + w` in
/// f32, then converted back to the input dtype.
#[derive(Debug, Clone)]
pub struct GemmaRmsNorm {
    /// `1 + w`, f32.
    scale: Tensor,
    eps: f32,
}

impl GemmaRmsNorm {
    /// The norm whose weight is `{module}.weight` (`size` values).
    pub fn load(weights: &ModelWeights, module: &str, size: usize, eps: f64) -> Result<Self> {
        let w = weights.tensor_as(&format!("{module}.weight"), &[size], DType::F32)?;
        Self::new(&w, eps)
    }

    /// A norm with weight `w` (any float dtype; the scale `1 + w` is formed in f32).
    pub fn new(w: &Tensor, eps: f64) -> Result<Self> {
        Ok(Self {
            scale: w.to_dtype(DType::F32)?.affine(1.0, 1.0)?,
            eps: eps as f32,
        })
    }
}

impl Module for GemmaRmsNorm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let dtype = x.dtype();
        let x32 = x.to_dtype(DType::F32)?.contiguous()?;
        candle_nn::ops::rms_norm(&x32, &self.scale, self.eps)?.to_dtype(dtype)
    }
}

/// `cap · tanh(x / cap)`.
pub fn softcap(x: &Tensor, cap: f64) -> Result<Tensor> {
    Ok(((x / cap)?.tanh()? * cap)?)
}

/// The gated MLP: `down(gelu_tanh(gate(x)) * up(x))`, the GELU computed in f32 (as PyTorch does
/// for any input dtype) and rounded once to the compute dtype.
pub struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    /// The MLP of module `prefix` (`{prefix}.gate_proj`, …).
    pub fn load(cfg: &Gemma3Config, weights: &ModelWeights, prefix: &str) -> Result<Self> {
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

    /// Applies the MLP.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let gate = self.gate_proj.forward(x)?;
        let dtype = gate.dtype();
        let gate = gate.to_dtype(DType::F32)?.gelu()?.to_dtype(dtype)?;
        let up = self.up_proj.forward(x)?;
        Ok(self.down_proj.forward(&(gate * up)?)?)
    }
}

/// Grouped-query self-attention: q/k/v projections, `(1 + w)` RMSNorm on each query and key head,
/// RoPE, then scaled dot-product attention over the cache.
pub struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: GemmaRmsNorm,
    k_norm: GemmaRmsNorm,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    scale: f64,
    softcap: Option<f64>,
    /// The layer's keys and values.
    pub cache: KvCache,
}

impl Attention {
    /// The attention of module `prefix` (`{prefix}.q_proj`, …).
    pub fn load(cfg: &Gemma3Config, weights: &ModelWeights, prefix: &str) -> Result<Self> {
        let (hidden, d, bias) = (cfg.hidden_size, cfg.head_dim, cfg.attention_bias);
        let (heads, kv_heads) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        let linear = |name: &str, out: usize, inp: usize| {
            weights.linear(&format!("{prefix}.{name}"), out, inp, bias)
        };
        let norm = |name: &str| {
            GemmaRmsNorm::load(weights, &format!("{prefix}.{name}"), d, cfg.rms_norm_eps)
        };
        Ok(Self {
            q_proj: linear("q_proj", heads * d, hidden)?,
            k_proj: linear("k_proj", kv_heads * d, hidden)?,
            v_proj: linear("v_proj", kv_heads * d, hidden)?,
            o_proj: linear("o_proj", hidden, heads * d)?,
            q_norm: norm("q_norm")?,
            k_norm: norm("k_norm")?,
            heads,
            kv_heads,
            head_dim: d,
            scale: cfg.attention_scale(),
            softcap: cfg.attn_logit_softcapping,
            cache: KvCache::new(cfg.max_position_embeddings),
        })
    }

    /// Attends `x` (`[batch, seq, hidden]`) with RoPE tables `cos`/`sin` and additive `mask`.
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
        let q = apply_rope(&self.q_norm.forward(&q)?, cos, sin)?;
        let k = apply_rope(&self.k_norm.forward(&k)?, cos, sin)?;
        let (k, v) = self.cache.append(&k, &v)?;
        let out = match self.softcap {
            None => attention(&q, &k, &v, self.scale, mask)?,
            Some(cap) => softcapped_attention(&q, &k, &v, self.scale, cap, mask)?,
        };
        Ok(self.o_proj.forward(&merge_heads(&out)?)?)
    }
}

/// `softmax(cap · tanh(q kᵀ · scale / cap) + mask) v` (Gemma 2's attention soft-capping; Gemma 3
/// releases leave it off). Shapes as [`df11_llm::attention`]; scores and softmax in f32.
pub fn softcapped_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    cap: f64,
    mask: Option<&Tensor>,
) -> Result<Tensor> {
    let (b, heads, _, head_dim) = q.dims4()?;
    let (_, kv_heads, kv_len, _) = k.dims4()?;
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(LlmError::Usage(format!(
            "{heads} query heads cannot share {kv_heads} key/value heads"
        )));
    }
    // Query head h reads key/value head h / (heads / kv_heads), as HF's repeat_kv.
    let repeat = |t: &Tensor| -> Result<Tensor> {
        Ok(t.unsqueeze(2)?
            .broadcast_as((b, kv_heads, heads / kv_heads, kv_len, head_dim))?
            .reshape((b, heads, kv_len, head_dim))?)
    };
    let (k, v) = (repeat(k)?, repeat(v)?);
    let dtype = q.dtype();
    let scores = (q.contiguous()?.matmul(&k.t()?)? * scale)?.to_dtype(DType::F32)?;
    let scores = softcap(&scores, cap)?;
    let scores = match mask {
        Some(m) => scores.broadcast_add(m)?,
        None => scores,
    };
    let probs = candle_nn::ops::softmax_last_dim(&scores)?.to_dtype(dtype)?;
    Ok(probs.matmul(&v)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use df11_llm::causal_mask;

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        let d = (a - b).unwrap().abs().unwrap().flatten_all().unwrap();
        d.max(0).unwrap().to_scalar::<f32>().unwrap()
    }

    #[test]
    fn norm_multiplies_by_one_plus_w_in_f32() {
        let dev = Device::Cpu;
        let x = Tensor::new(&[[1f32, -2., 3., 0.5]], &dev).unwrap();
        let w = Tensor::new(&[0.5f32, -0.25, 0., 1.], &dev).unwrap();
        let got = GemmaRmsNorm::new(&w, 1e-6).unwrap().forward(&x).unwrap();
        let v = [1f32, -2., 3., 0.5];
        let r = 1.0 / (v.iter().map(|a| a * a).sum::<f32>() / 4.0 + 1e-6).sqrt();
        let want: Vec<f32> = v
            .iter()
            .zip([1.5f32, 0.75, 1., 2.])
            .map(|(a, s)| a * r * s)
            .collect();
        let want = Tensor::from_vec(want, (1, 4), &dev).unwrap();
        assert!(max_diff(&got, &want) < 1e-6);
        let bf = GemmaRmsNorm::new(&w, 1e-6)
            .unwrap()
            .forward(&x.to_dtype(DType::BF16).unwrap())
            .unwrap();
        assert_eq!(bf.dtype(), DType::BF16);
    }

    #[test]
    fn softcapped_attention_tends_to_plain_attention() {
        let dev = Device::Cpu;
        let q = Tensor::randn(0f32, 1.0, (1, 4, 3, 8), &dev).unwrap();
        let k = Tensor::randn(0f32, 1.0, (1, 2, 5, 8), &dev).unwrap();
        let v = Tensor::randn(0f32, 1.0, (1, 2, 5, 8), &dev).unwrap();
        let mask = causal_mask(3, 2, Some(3), &dev).unwrap();
        let plain = attention(&q, &k, &v, 0.3, Some(&mask)).unwrap();
        let capped = softcapped_attention(&q, &k, &v, 0.3, 1e4, Some(&mask)).unwrap();
        assert!(max_diff(&plain, &capped) < 1e-5);
        // A small cap changes the result: the scores are really capped.
        let tight = softcapped_attention(&q, &k, &v, 0.3, 0.1, Some(&mask)).unwrap();
        assert!(max_diff(&plain, &tight) > 1e-3);
    }
}
