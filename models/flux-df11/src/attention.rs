//! FLUX's attention (diffusers' `Attention` with `FluxAttnProcessor2_0`): q, k, v per head with
//! RMS-normed queries and keys, rotated by the positions' tables; in a double-stream block the
//! text's own projections joined in front of the image's (one attention over text + image),
//! then each stream's output projection.

use candle_core::{DType, Module, Tensor, D};
use df11_candle::{Linear, ModelWeights};

use crate::embed::apply_rope;
use crate::error::Result;

/// diffusers' `RMSNorm` over a head (`qk_norm="rms_norm"`, eps 1e-6, with a weight):
/// `x * rsqrt(mean(x²) + eps)` in f32, rounded to the weight's dtype, times the weight.
#[derive(Debug, Clone)]
struct HeadNorm {
    weight: Tensor,
}

const EPS: f64 = 1e-6;

impl HeadNorm {
    fn load(weights: &ModelWeights, name: &str, head_dim: usize) -> Result<Self> {
        Ok(Self {
            weight: weights.tensor(&format!("{name}.weight"), &[head_dim])?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x32 = x.to_dtype(DType::F32)?;
        let var = x32.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = x32.broadcast_mul(&(var + EPS)?.sqrt()?.recip()?)?;
        Ok(normed
            .to_dtype(self.weight.dtype())?
            .broadcast_mul(&self.weight)?)
    }
}

/// Projections of one stream: q, k, v and the q/k norms.
#[derive(Debug, Clone)]
struct Qkv {
    q: Linear,
    k: Linear,
    v: Linear,
    norm_q: HeadNorm,
    norm_k: HeadNorm,
}

impl Qkv {
    /// `[B, H, L, D]` queries (normed), keys (normed) and values of `x` (`[B, L, H*D]`).
    fn forward(&self, x: &Tensor, heads: usize) -> Result<(Tensor, Tensor, Tensor)> {
        let (b, l, _) = x.dims3()?;
        let split = |t: Tensor| -> Result<Tensor> {
            let d = t.dim(2)? / heads;
            Ok(t.reshape((b, l, heads, d))?.transpose(1, 2)?.contiguous()?)
        };
        let q = self.norm_q.forward(&split(self.q.forward(x)?)?)?;
        let k = self.norm_k.forward(&split(self.k.forward(x)?)?)?;
        let v = split(self.v.forward(x)?)?;
        Ok((q, k, v))
    }
}

/// The text stream's side of a double-stream block's attention.
#[derive(Debug, Clone)]
struct TextSide {
    qkv: Qkv,
    out: Linear,
}

/// One block's attention.
#[derive(Debug, Clone)]
pub struct Attention {
    image: Qkv,
    /// `to_out.0` (double-stream blocks; single-stream ones project with the MLP).
    image_out: Option<Linear>,
    /// The text stream (double-stream blocks).
    text: Option<TextSide>,
    heads: usize,
}

impl Attention {
    /// `{prefix}.to_q|to_k|to_v`, `norm_q|norm_k` and, for a double-stream block (`joint`),
    /// `to_out.0`, `add_q_proj|add_k_proj|add_v_proj`, `norm_added_q|norm_added_k`,
    /// `to_add_out`.
    pub fn load(
        weights: &ModelWeights,
        prefix: &str,
        heads: usize,
        head_dim: usize,
        joint: bool,
    ) -> Result<Self> {
        let dim = heads * head_dim;
        let linear = |name: &str| weights.linear(&format!("{prefix}.{name}"), dim, dim, true);
        let norm = |name: &str| HeadNorm::load(weights, &format!("{prefix}.{name}"), head_dim);
        let image = Qkv {
            q: linear("to_q")?,
            k: linear("to_k")?,
            v: linear("to_v")?,
            norm_q: norm("norm_q")?,
            norm_k: norm("norm_k")?,
        };
        if !joint {
            return Ok(Self {
                image,
                image_out: None,
                text: None,
                heads,
            });
        }
        let text = TextSide {
            qkv: Qkv {
                q: linear("add_q_proj")?,
                k: linear("add_k_proj")?,
                v: linear("add_v_proj")?,
                norm_q: norm("norm_added_q")?,
                norm_k: norm("norm_added_k")?,
            },
            out: linear("to_add_out")?,
        };
        Ok(Self {
            image,
            image_out: Some(linear("to_out.0")?),
            text: Some(text),
            heads,
        })
    }

    /// Attention over `text` (`[B, T, dim]`, double-stream blocks) and `image` (`[B, N, dim]`),
    /// the positions' tables `[T + N, D]` (text first): the image's output `[B, N, dim]` and,
    /// for a double-stream block, the text's `[B, T, dim]`.
    pub fn forward(
        &self,
        image: &Tensor,
        text: Option<&Tensor>,
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let (mut q, mut k, mut v) = self.image.forward(image, self.heads)?;
        let text_len = match (&self.text, text) {
            (Some(side), Some(t)) => {
                let (tq, tk, tv) = side.qkv.forward(t, self.heads)?;
                q = Tensor::cat(&[tq, q], 2)?;
                k = Tensor::cat(&[tk, k], 2)?;
                v = Tensor::cat(&[tv, v], 2)?;
                t.dim(1)?
            }
            _ => 0,
        };
        let q = apply_rope(&q, cos, sin)?;
        let k = apply_rope(&k, cos, sin)?;
        let out = attend(&q, &k, &v)?;
        let (b, h, l, d) = out.dims4()?;
        let out = out.transpose(1, 2)?.reshape((b, l, h * d))?;
        match (&self.text, &self.image_out) {
            (Some(side), Some(image_out)) => {
                let text_out = side
                    .out
                    .forward(&out.narrow(1, 0, text_len)?.contiguous()?)?;
                let image_part = out.narrow(1, text_len, l - text_len)?.contiguous()?;
                Ok((image_out.forward(&image_part)?, Some(text_out)))
            }
            _ => Ok((out, None)),
        }
    }
}

/// Lets the f32 matrix products of this process (on CUDA: the attention's, the only ones a BF16
/// run makes) round their inputs to TF32 (candle's `set_gemm_reduced_precision_f32`, a process-
/// wide setting: for programs, which `flux-df11` turns on unless `--exact-attention`). In a BF16
/// run the queries and keys are BF16 values, exact in TF32, so the scores are the f32 ones up to
/// the order of the sums; the probabilities keep 11 bits, more than the BF16 probabilities of a
/// flash attention. A DF11 and a BF16 transformer run alike still agree bit for bit. No effect
/// on the CPU.
pub fn allow_tf32(allow: bool) {
    #[cfg(feature = "cuda")]
    candle_core::cuda::set_gemm_reduced_precision_f32(allow);
    #[cfg(not(feature = "cuda"))]
    let _ = allow;
}

/// The most bytes of f32 scores attention makes at once: at FLUX.1's 4,608 tokens a head's
/// scores are 85 MB, all 24 heads' 2 GB (and softmax makes two more of them), so heads go
/// through in groups.
const SCORE_BYTES: usize = 256 << 20;

/// `softmax(q kᵀ / sqrt(D)) v` over `[B, H, L, D]`, in f32 (PyTorch's CPU attention accumulates
/// half types in f32 too), rounded once to the inputs' dtype; heads in groups whose scores fit
/// [`SCORE_BYTES`] (each head's result is the same either way).
fn attend(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
    attend_in_groups(q, k, v, SCORE_BYTES)
}

/// [`attend`] with at most `score_bytes` of scores a group (at least one head).
fn attend_in_groups(q: &Tensor, k: &Tensor, v: &Tensor, score_bytes: usize) -> Result<Tensor> {
    let (b, h, l, _) = q.dims4()?;
    let per_head = (b * l * l * 4).max(1);
    let group = (score_bytes / per_head).clamp(1, h.max(1));
    if group >= h {
        return attend_heads(q, k, v);
    }
    let mut outs = Vec::with_capacity(h.div_ceil(group));
    for start in (0..h).step_by(group) {
        let n = group.min(h - start);
        outs.push(attend_heads(
            &q.narrow(1, start, n)?,
            &k.narrow(1, start, n)?,
            &v.narrow(1, start, n)?,
        )?);
    }
    Ok(Tensor::cat(&outs, 1)?)
}

/// [`attend`] over all of its heads at once.
fn attend_heads(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
    let dtype = q.dtype();
    let scale = 1.0 / (q.dim(3)? as f64).sqrt();
    let (q, k, v) = (
        q.to_dtype(DType::F32)?,
        k.to_dtype(DType::F32)?,
        v.to_dtype(DType::F32)?,
    );
    let scores = (q.matmul(&k.t()?.contiguous()?)? * scale)?;
    let probs = candle_nn::ops::softmax_last_dim(&scores)?;
    Ok(probs.matmul(&v)?.to_dtype(dtype)?)
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::{attend_heads, attend_in_groups};

    /// Heads in groups give every head's result bit for bit as all heads at once.
    #[test]
    fn heads_in_groups_equal_all_heads_at_once() {
        let dev = Device::Cpu;
        let shape = (1, 5, 12, 8);
        let q = Tensor::randn(0f32, 1.0, shape, &dev).unwrap();
        let k = Tensor::randn(0f32, 1.0, shape, &dev).unwrap();
        let v = Tensor::randn(0f32, 1.0, shape, &dev).unwrap();
        let all = attend_heads(&q, &k, &v).unwrap();
        let head_bytes = 12 * 12 * 4;
        for budget in [0, head_bytes, 2 * head_bytes + 1, 4 * head_bytes] {
            let grouped = attend_in_groups(&q, &k, &v, budget).unwrap();
            let diff = (&grouped - &all).unwrap().abs().unwrap().max_all().unwrap();
            assert_eq!(diff.to_scalar::<f32>().unwrap(), 0.0, "budget {budget}");
            assert_eq!(grouped.dims(), all.dims());
        }
    }
}
