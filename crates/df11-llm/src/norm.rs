//! RMSNorm with transformers' semantics: normalise in f32, convert back to the compute dtype,
//! then multiply by the weight (`weight * (x * rsqrt(mean(x²) + eps)).to(dtype)`).

use candle_core::{DType, Module, Tensor};
use df11_candle::ModelWeights;

use crate::error::Result;

/// An RMSNorm layer.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    weight: Tensor,
    /// All ones, f32, for the fused kernel's normalise-only pass.
    ones: Tensor,
    eps: f32,
}

impl RmsNorm {
    /// A norm with `weight` (in the compute dtype) and `eps`.
    pub fn new(weight: Tensor, eps: f64) -> Result<Self> {
        let ones = Tensor::ones(weight.dims1()?, DType::F32, weight.device())?;
        Ok(Self {
            weight,
            ones,
            eps: eps as f32,
        })
    }

    /// The norm of module `module` (weight `{module}.weight`, `[size]`) in the compute dtype.
    pub fn load(weights: &ModelWeights, module: &str, size: usize, eps: f64) -> Result<Self> {
        Self::new(weights.tensor(&format!("{module}.weight"), &[size])?, eps)
    }

    /// The weight.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = x.contiguous()?;
        if x.dtype() == DType::F32 && self.weight.dtype() == DType::F32 {
            // One rounding either way: the fused kernel computes x * r * w in f32.
            return candle_nn::ops::rms_norm(&x, &self.weight, self.eps);
        }
        let normed = candle_nn::ops::rms_norm(&x.to_dtype(DType::F32)?, &self.ones, self.eps)?;
        normed.to_dtype(x.dtype())?.broadcast_mul(&self.weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn matches_formula_in_f32_and_bf16() {
        let dev = Device::Cpu;
        let x = Tensor::new(&[[1f32, -2., 3., 0.5], [0.1, 0.2, -0.3, 4.]], &dev).unwrap();
        let w = Tensor::new(&[1.5f32, 0.5, 1., 2.], &dev).unwrap();
        let eps = 1e-6;
        let rows = x.to_vec2::<f32>().unwrap();
        let wv = w.to_vec1::<f32>().unwrap();
        let want: Vec<Vec<f32>> = rows
            .iter()
            .map(|r| {
                let ms = r.iter().map(|v| v * v).sum::<f32>() / r.len() as f32;
                let s = 1.0 / (ms + eps as f32).sqrt();
                r.iter().zip(&wv).map(|(v, w)| v * s * w).collect()
            })
            .collect();
        let got = RmsNorm::new(w.clone(), eps).unwrap().forward(&x).unwrap();
        for (g, w) in got
            .to_vec2::<f32>()
            .unwrap()
            .iter()
            .flatten()
            .zip(want.iter().flatten())
        {
            assert!((g - w).abs() < 1e-6);
        }
        let xb = x.to_dtype(DType::BF16).unwrap();
        let wb = w.to_dtype(DType::BF16).unwrap();
        let got = RmsNorm::new(wb, eps).unwrap().forward(&xb).unwrap();
        assert_eq!(got.dtype(), DType::BF16);
        let got = got.to_dtype(DType::F32).unwrap().to_vec2::<f32>().unwrap();
        for (g, w) in got.iter().flatten().zip(want.iter().flatten()) {
            assert!((g - w).abs() < 2e-2 * w.abs().max(1.0));
        }
    }
}
