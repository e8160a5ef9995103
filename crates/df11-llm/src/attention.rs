//! Scaled dot-product attention with grouped-query heads and an additive causal mask, written
//! like transformers' eager attention: scores in the compute dtype, softmax in f32.
//!
//! Grouped-query attention is done without repeating keys and values: the query heads that share
//! a key/value head are stacked along the sequence axis, so the cache is read in place.

use candle_core::{DType, Device, Tensor};

use crate::error::{LlmError, Result};

/// Additive causal mask `[q_len, offset + q_len]` (f32): 0 where query `i` (at position
/// `offset + i`) may see key `j`, −∞ elsewhere. With `window`, keys more than `window - 1`
/// positions back are hidden too (sliding-window attention).
pub fn causal_mask(
    q_len: usize,
    offset: usize,
    window: Option<usize>,
    device: &Device,
) -> Result<Tensor> {
    let kv_len = offset + q_len;
    let mask: Vec<f32> = (0..q_len)
        .flat_map(|i| {
            let pos = offset + i;
            (0..kv_len).map(move |j| {
                let future = j > pos;
                let too_old = window.is_some_and(|w| pos >= j + w);
                if future || too_old {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Ok(Tensor::from_vec(mask, (q_len, kv_len), device)?)
}

/// The mask a decoder step needs: [`causal_mask`] when the step has several queries or when a
/// sliding `window` hides some cached keys, `None` otherwise (one query sees every key).
pub fn decoder_mask(
    q_len: usize,
    offset: usize,
    window: Option<usize>,
    device: &Device,
) -> Result<Option<Tensor>> {
    let window_hides_keys = window.is_some_and(|w| offset + q_len > w);
    if q_len > 1 || window_hides_keys {
        Ok(Some(causal_mask(q_len, offset, window, device)?))
    } else {
        Ok(None)
    }
}

/// `softmax(q kᵀ · scale + mask) v`.
///
/// `q`: `[batch, heads, q_len, head_dim]`; `k`, `v`: `[batch, kv_heads, kv_len, head_dim]` with
/// `heads` a multiple of `kv_heads` (query head `h` uses key/value head `h / (heads/kv_heads)`,
/// as HF's `repeat_kv`); `mask`: `[q_len, kv_len]` f32 or `None`; `pdl`: the fused CUDA softmax
/// may be a programmatic dependent launch ([`df11_candle::Df11Options::pdl`]). Returns
/// `[batch, heads, q_len, head_dim]`.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    mask: Option<&Tensor>,
    pdl: bool,
) -> Result<Tensor> {
    let (b, heads, q_len, head_dim) = q.dims4()?;
    let (_, kv_heads, kv_len, _) = k.dims4()?;
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(LlmError::Usage(format!(
            "{heads} query heads cannot share {kv_heads} key/value heads"
        )));
    }
    let groups = heads / kv_heads;
    let dtype = q.dtype();
    #[cfg(not(feature = "cuda"))]
    let _ = pdl;
    // [b, kv_heads, groups * q_len, head_dim]: the query heads of one kv head, stacked.
    let q = q
        .contiguous()?
        .reshape((b, kv_heads, groups * q_len, head_dim))?;
    // Decode steps on CUDA in BF16 (no mask): scale, f32 softmax and the cast back in one launch.
    #[cfg(feature = "cuda")]
    if mask.is_none() && q.device().is_cuda() && dtype == DType::BF16 {
        let scores = q.matmul(&k.transpose(2, 3)?)?;
        let probs = crate::ops::softmax_scaled_bf16(&scores, scale as f32, pdl)?;
        return Ok(probs
            .matmul(v)?
            .reshape((b, heads, q_len, head_dim))?
            .contiguous()?);
    }
    let scores = (q.matmul(&k.transpose(2, 3)?)? * scale)?.to_dtype(DType::F32)?;
    let scores = match mask {
        Some(m) => scores
            .reshape((b, kv_heads, groups, q_len, kv_len))?
            .broadcast_add(m)?
            .reshape((b, kv_heads, groups * q_len, kv_len))?,
        None => scores,
    };
    let probs = candle_nn::ops::softmax_last_dim(&scores)?.to_dtype(dtype)?;
    Ok(probs
        .matmul(v)?
        .reshape((b, heads, q_len, head_dim))?
        .contiguous()?)
}

/// `softmax(cap · tanh(q kᵀ · scale / cap) + mask) v` (Gemma 2's attention soft-capping; Gemma 3
/// releases leave it off). Shapes as [`attention`]; scores and softmax in f32.
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

/// `cap · tanh(x / cap)`.
pub fn softcap(x: &Tensor, cap: f64) -> Result<Tensor> {
    Ok(((x / cap)?.tanh()? * cap)?)
}

/// `[batch, seq, heads * head_dim]` → `[batch, heads, seq, head_dim]`.
pub fn split_heads(x: &Tensor, heads: usize, head_dim: usize) -> Result<Tensor> {
    let (b, seq, _) = x.dims3()?;
    Ok(x.reshape((b, seq, heads, head_dim))?.transpose(1, 2)?)
}

/// `[batch, heads, seq, head_dim]` → `[batch, seq, heads * head_dim]`.
pub fn merge_heads(x: &Tensor) -> Result<Tensor> {
    let (b, heads, seq, head_dim) = x.dims4()?;
    Ok(x.transpose(1, 2)?.reshape((b, seq, heads * head_dim))?)
}

/// The last position of `[batch, seq, hidden]`: `[batch, 1, hidden]`.
pub fn last_position(x: &Tensor) -> Result<Tensor> {
    let seq = x.dim(1)?;
    Ok(x.narrow(1, seq - 1, 1)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain formulation: keys/values repeated per query head, then per-head softmax.
    fn reference(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, mask: &Tensor) -> Tensor {
        let (_, heads, _, _) = q.dims4().unwrap();
        let kv_heads = k.dim(1).unwrap();
        let rep = |t: &Tensor| {
            let parts: Vec<Tensor> = (0..heads)
                .map(|h| t.narrow(1, h / (heads / kv_heads), 1).unwrap())
                .collect();
            Tensor::cat(&parts, 1).unwrap()
        };
        let (k, v) = (rep(k), rep(v));
        let s = (q.matmul(&k.t().unwrap()).unwrap() * scale).unwrap();
        let s = s.broadcast_add(mask).unwrap();
        candle_nn::ops::softmax_last_dim(&s)
            .unwrap()
            .matmul(&v)
            .unwrap()
    }

    #[test]
    fn grouped_attention_equals_repeated_kv() {
        let dev = Device::Cpu;
        let q = Tensor::randn(0f32, 1.0, (1, 6, 4, 8), &dev).unwrap();
        let k = Tensor::randn(0f32, 1.0, (1, 2, 7, 8), &dev).unwrap();
        let v = Tensor::randn(0f32, 1.0, (1, 2, 7, 8), &dev).unwrap();
        let mask = causal_mask(4, 3, None, &dev).unwrap();
        let got = attention(&q, &k, &v, 0.3, Some(&mask), true).unwrap();
        let want = reference(&q, &k, &v, 0.3, &mask);
        let diff = (got - want).unwrap().abs().unwrap().max_all().unwrap();
        assert!(diff.to_scalar::<f32>().unwrap() < 1e-6);
    }

    /// The one-launch CUDA softmax of decode steps against the formula on the host, within one
    /// BF16 step.
    #[cfg(feature = "cuda")]
    #[test]
    fn fused_cuda_softmax_matches_the_formula() {
        use half::bf16;
        let dev = Device::new_cuda(0).expect("the cuda feature is on but no CUDA device opened");
        for n in [1usize, 37, 700, 4100] {
            let x = (Tensor::randn(0f32, 4.0, (5, n), &Device::Cpu).unwrap())
                .to_dtype(DType::BF16)
                .unwrap();
            let got: Vec<Vec<bf16>> =
                crate::ops::softmax_scaled_bf16(&x.to_device(&dev).unwrap(), 0.3, true)
                    .unwrap()
                    .to_vec2()
                    .unwrap();
            for (r, row) in x.to_vec2::<bf16>().unwrap().iter().enumerate() {
                let v: Vec<f64> = row
                    .iter()
                    .map(|a| bf16::from_f32(a.to_f32() * 0.3).to_f64())
                    .collect();
                let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = v.iter().map(|a| (a - m).exp()).sum();
                for (i, a) in v.iter().enumerate() {
                    let want = bf16::from_f64((a - m).exp() / sum);
                    let steps = (got[r][i].to_bits() as i32 - want.to_bits() as i32).abs();
                    assert!(steps <= 1, "n {n} [{r}, {i}]: {} vs {want}", got[r][i]);
                }
            }
        }
    }

    #[test]
    fn softcapped_attention_tends_to_plain_attention() {
        let dev = Device::Cpu;
        let q = Tensor::randn(0f32, 1.0, (1, 4, 3, 8), &dev).unwrap();
        let k = Tensor::randn(0f32, 1.0, (1, 2, 5, 8), &dev).unwrap();
        let v = Tensor::randn(0f32, 1.0, (1, 2, 5, 8), &dev).unwrap();
        let mask = causal_mask(3, 2, Some(3), &dev).unwrap();
        let max_diff = |a: &Tensor, b: &Tensor| {
            let d = (a - b).unwrap().abs().unwrap().flatten_all().unwrap();
            d.max(0).unwrap().to_scalar::<f32>().unwrap()
        };
        let plain = attention(&q, &k, &v, 0.3, Some(&mask), true).unwrap();
        let capped = softcapped_attention(&q, &k, &v, 0.3, 1e4, Some(&mask)).unwrap();
        assert!(max_diff(&plain, &capped) < 1e-5);
        // A small cap changes the result: the scores are really capped.
        let tight = softcapped_attention(&q, &k, &v, 0.3, 0.1, Some(&mask)).unwrap();
        assert!(max_diff(&plain, &tight) > 1e-3);
    }

    #[test]
    fn decoder_mask_only_when_needed() {
        let dev = Device::Cpu;
        assert!(decoder_mask(1, 9, None, &dev).unwrap().is_none());
        assert!(decoder_mask(1, 3, Some(4), &dev).unwrap().is_none());
        let m = decoder_mask(1, 4, Some(4), &dev).unwrap().unwrap();
        assert_eq!(m.to_vec2::<f32>().unwrap()[0][0], f32::NEG_INFINITY);
        let m = decoder_mask(3, 2, None, &dev).unwrap().unwrap();
        assert_eq!(m.dims(), &[3, 5]);
    }

    #[test]
    fn mask_is_causal_with_offset_and_window() {
        let m = causal_mask(2, 3, None, &Device::Cpu).unwrap();
        let m = m.to_vec2::<f32>().unwrap();
        assert_eq!(m[0][..4], [0.0; 4]);
        assert_eq!(m[0][4], f32::NEG_INFINITY);
        assert_eq!(m[1], [0.0; 5]);
        let w = causal_mask(3, 0, Some(2), &Device::Cpu).unwrap();
        let w = w.to_vec2::<f32>().unwrap();
        assert_eq!(w[2][0], f32::NEG_INFINITY);
        assert_eq!(w[2][1..], [0.0, 0.0]);
    }
}
