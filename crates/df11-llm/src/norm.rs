//! RMSNorm with transformers' semantics, in both flavours the architectures use:
//! - [`NormKind::Weight`] (Llama, Qwen, Mistral, Phi): normalise in f32, convert back to the
//!   compute dtype, then multiply by the weight (`weight * (x * rsqrt(mean(x²) + eps)).to(dtype)`);
//! - [`NormKind::OnePlusWeight`] (Gemma): normalise and multiply by `1 + w` in f32, then convert
//!   (`(x32 * rsqrt(mean(x32²) + eps) * (1 + w32)).to(dtype)`).

use candle_core::{DType, Module, Tensor};
use df11_candle::ModelWeights;

use crate::error::Result;
use crate::spec::NormKind;

/// An RMSNorm layer.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    /// `Weight`: the weight in the compute dtype; `OnePlusWeight`: `1 + w` in f32.
    weight: Tensor,
    /// All ones, f32, for the normalise-only pass of `Weight` in a half dtype.
    ones: Tensor,
    eps: f32,
    kind: NormKind,
    /// The fused CUDA launch may be a programmatic dependent launch
    /// ([`df11_candle::Df11Options::pdl`]).
    pdl: bool,
}

impl RmsNorm {
    /// A [`NormKind::Weight`] norm with `weight` (in the compute dtype) and `eps`.
    pub fn new(weight: Tensor, eps: f64) -> Result<Self> {
        let ones = Tensor::ones(weight.dims1()?, DType::F32, weight.device())?;
        Ok(Self {
            weight,
            ones,
            eps: eps as f32,
            kind: NormKind::Weight,
            pdl: true,
        })
    }

    /// A [`NormKind::OnePlusWeight`] norm with weight `w` (any float dtype; `1 + w` is formed
    /// in f32).
    pub fn one_plus(w: &Tensor, eps: f64) -> Result<Self> {
        let scale = w.to_dtype(DType::F32)?.affine(1.0, 1.0)?;
        Ok(Self {
            ones: scale.clone(),
            weight: scale,
            eps: eps as f32,
            kind: NormKind::OnePlusWeight,
            pdl: true,
        })
    }

    /// The norm of module `module` (weight `{module}.weight`, `[size]`).
    pub fn load(weights: &ModelWeights, module: &str, size: usize, eps: f64) -> Result<Self> {
        Self::load_kind(weights, module, size, eps, NormKind::Weight)
    }

    /// The norm of module `module` of flavour `kind`.
    pub fn load_kind(
        weights: &ModelWeights,
        module: &str,
        size: usize,
        eps: f64,
        kind: NormKind,
    ) -> Result<Self> {
        let name = format!("{module}.weight");
        let norm = match kind {
            NormKind::Weight => Self::new(weights.tensor(&name, &[size])?, eps),
            NormKind::OnePlusWeight => {
                Self::one_plus(&weights.tensor_as(&name, &[size], DType::F32)?, eps)
            }
        }?;
        Ok(Self {
            pdl: weights.options().pdl,
            ..norm
        })
    }

    /// Whether its CUDA launches may be programmatic dependent launches (the weights' options).
    pub fn pdl(&self) -> bool {
        self.pdl
    }

    /// The weight (`Weight`) or `1 + w` in f32 (`OnePlusWeight`).
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The flavour.
    pub fn kind(&self) -> NormKind {
        self.kind
    }

    /// Epsilon.
    pub fn eps(&self) -> f32 {
        self.eps
    }
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = x.contiguous()?;
        if self.kind == NormKind::OnePlusWeight {
            let dtype = x.dtype();
            let x32 = x.to_dtype(DType::F32)?;
            return candle_nn::ops::rms_norm(&x32, &self.weight, self.eps)?.to_dtype(dtype);
        }
        // CUDA, BF16: the same formula in one launch instead of four.
        #[cfg(feature = "cuda")]
        if x.device().is_cuda() && x.dtype() == DType::BF16 && self.weight.dtype() == DType::BF16 {
            return crate::ops::rms_norm_bf16(&x, &self.weight, self.eps, self.pdl);
        }
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

    /// The one-launch CUDA path against the formula computed here on the host (the f32 sum of
    /// squares may round differently, so a result may be one BF16 step away, never more).
    #[cfg(feature = "cuda")]
    #[test]
    fn fused_cuda_norm_matches_the_formula() {
        use half::bf16;
        let dev = Device::new_cuda(0).expect("the cuda feature is on but no CUDA device opened");
        for (rows, n) in [(1usize, 4096usize), (40, 128), (3, 160)] {
            let x = Tensor::randn(0f32, 1.0, (rows, n), &Device::Cpu).unwrap();
            let w = (Tensor::randn(0f32, 0.1, n, &Device::Cpu).unwrap() + 1.0).unwrap();
            let (xb, wb) = (
                x.to_dtype(DType::BF16).unwrap(),
                w.to_dtype(DType::BF16).unwrap(),
            );
            let norm = RmsNorm::new(wb.to_device(&dev).unwrap(), 1e-6).unwrap();
            let got: Vec<Vec<bf16>> = norm
                .forward(&xb.to_device(&dev).unwrap())
                .unwrap()
                .to_vec2()
                .unwrap();
            let xs: Vec<Vec<bf16>> = xb.to_vec2().unwrap();
            let ws: Vec<bf16> = wb.to_vec1().unwrap();
            for (r, row) in xs.iter().enumerate() {
                let ms = row.iter().map(|v| v.to_f64() * v.to_f64()).sum::<f64>() / n as f64;
                let scale = (1.0 / (ms + 1e-6).sqrt()) as f32;
                for (i, v) in row.iter().enumerate() {
                    let normed = bf16::from_f32(v.to_f32() * scale);
                    let want = bf16::from_f32(ws[i].to_f32() * normed.to_f32());
                    let steps = (got[r][i].to_bits() as i32 - want.to_bits() as i32).abs();
                    assert!(steps <= 1, "[{r}, {i}]: {} vs {}", got[r][i], want);
                }
            }
        }
    }
}
