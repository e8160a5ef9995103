//! Rotary position embeddings (the "rotate half" form of HF Llama/Qwen/Mistral/Gemma).
//!
//! The cos/sin tables are computed in f32, as transformers does (position × inverse frequency,
//! both f32), then converted to the compute dtype. They grow on demand in chunks, so a model with
//! a huge `max_position_embeddings` does not pay for positions it never reaches.

use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::config::RopeConfig;
use crate::error::{LlmError, Result};

/// Positions are added to the tables this many at a time.
const TABLE_CHUNK: usize = 1024;

/// The standard inverse frequencies `1 / base^(2i/dim)` for `i < dim/2`, computed in f32 like
/// transformers' default RoPE initialisation.
pub fn default_inv_freq(base: f64, dim: usize) -> Vec<f32> {
    let base = base as f32;
    (0..dim)
        .step_by(2)
        .map(|i| 1.0 / base.powf(i as f32 / dim as f32))
        .collect()
}

/// A RoPE frequency scaling (`rope_scaling` / `rope_parameters` of config.json), applied to the
/// default inverse frequencies the way transformers' `ROPE_INIT_FUNCTIONS` do, in f32.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE (`rope_type` absent or `default`).
    None,
    /// `linear`: every inverse frequency divided by `factor`.
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// `llama3` (Llama 3.1 and later): low frequencies divided by `factor`, high ones kept,
    /// the band between interpolated smoothly.
    Llama3 {
        /// Divisor of the low frequencies.
        factor: f64,
        /// Wavelengths above `original_max_position_embeddings / low_freq_factor` are scaled.
        low_freq_factor: f64,
        /// Wavelengths below `original_max_position_embeddings / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The pre-training context length.
        original_max_position_embeddings: f64,
    },
}

impl RopeScaling {
    /// The scaling `rope` asks for; `path` (the config file) names errors. Types other than
    /// `linear` and `llama3` are refused.
    pub fn from_config(rope: &RopeConfig, path: &Path) -> Result<Self> {
        let Some(kind) = rope.rope_type.as_deref() else {
            return Ok(Self::None);
        };
        let field = |name: &str| {
            rope.scaling
                .as_ref()
                .and_then(|s| s.get(name))
                .and_then(serde_json::Value::as_f64)
                .ok_or_else(|| {
                    LlmError::config(path, format!("RoPE scaling `{kind}` needs `{name}`"))
                })
        };
        let scaling = match kind {
            "linear" => Self::Linear {
                factor: field("factor")?,
            },
            // Values checked below, with the other kinds' ([`RopeScaling::problem`]).
            "llama3" => Self::Llama3 {
                factor: field("factor")?,
                low_freq_factor: field("low_freq_factor")?,
                high_freq_factor: field("high_freq_factor")?,
                original_max_position_embeddings: field("original_max_position_embeddings")?,
            },
            other => {
                return Err(LlmError::config(
                    path,
                    format!("RoPE scaling `{other}` is not supported (supported: linear, llama3)"),
                ))
            }
        };
        match scaling.problem() {
            Some(problem) => Err(LlmError::config(path, problem)),
            None => Ok(scaling),
        }
    }

    /// Why the scaling's values cannot be, if they cannot: each factor finite and positive
    /// (`linear` and `llama3` divide frequencies by `factor`), llama3's band ordered.
    pub fn problem(&self) -> Option<String> {
        let positive = |name: &str, v: f64| {
            (!(v.is_finite() && v > 0.0)).then(|| {
                format!(
                    "rope_scaling.{name} {} is not a finite positive number",
                    crate::error::shown(v)
                )
            })
        };
        match *self {
            Self::None => None,
            Self::Linear { factor } => positive("factor", factor),
            Self::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => positive("factor", factor)
                .or_else(|| positive("low_freq_factor", low_freq_factor))
                .or_else(|| positive("high_freq_factor", high_freq_factor))
                .or_else(|| {
                    positive(
                        "original_max_position_embeddings",
                        original_max_position_embeddings,
                    )
                })
                .or_else(|| {
                    (high_freq_factor <= low_freq_factor).then(|| {
                        format!("rope_scaling.high_freq_factor {high_freq_factor} is not above low_freq_factor {low_freq_factor}")
                    })
                }),
        }
    }

    /// The inverse frequencies for base `theta` and rotary dimension `dim`: the default ones
    /// ([`default_inv_freq`]) scaled.
    pub fn inv_freq(&self, theta: f64, dim: usize) -> Vec<f32> {
        let inv = default_inv_freq(theta, dim);
        match *self {
            Self::None => inv,
            Self::Linear { factor } => inv.iter().map(|f| f / factor as f32).collect(),
            Self::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => llama3_inv_freq(
                &inv,
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            ),
        }
    }
}

/// transformers' `_compute_llama3_parameters`, operation for operation on f32 tensors: Python
/// scalars enter each operation as f32, and `scalar / tensor` is `tensor.reciprocal() * scalar`.
fn llama3_inv_freq(inv: &[f32], factor: f64, low: f64, high: f64, old_context: f64) -> Vec<f32> {
    let low_freq_wavelen = (old_context / low) as f32;
    let high_freq_wavelen = (old_context / high) as f32;
    let two_pi = (2.0 * std::f64::consts::PI) as f32;
    let (factor_f, low_f, band) = (factor as f32, low as f32, (high - low) as f32);
    inv.iter()
        .map(|&f| {
            let wavelen = (1.0 / f) * two_pi;
            let scaled = if wavelen > low_freq_wavelen {
                f / factor_f
            } else {
                f
            };
            let smooth = ((1.0 / wavelen) * old_context as f32 - low_f) / band;
            let smoothed = (1.0 - smooth) * scaled / factor_f + smooth * scaled;
            // `~(wavelen < high) * ~(wavelen > low)` (wavelengths are never NaN).
            let medium = wavelen >= high_freq_wavelen && wavelen <= low_freq_wavelen;
            if medium {
                smoothed
            } else {
                scaled
            }
        })
        .collect()
}

/// cos/sin tables for one set of inverse frequencies, grown on demand.
#[derive(Debug, Clone)]
pub struct RotaryEmbedding {
    inv_freq: Vec<f32>,
    /// Multiplies cos and sin (HF's `attention_scaling`; 1 for plain RoPE).
    scaling: f32,
    max_positions: usize,
    dtype: DType,
    device: Device,
    cos: Option<Tensor>,
    sin: Option<Tensor>,
}

impl RotaryEmbedding {
    /// Tables for `inv_freq` (length `rotary_dim / 2`), positions up to `max_positions`
    /// (exclusive), in `dtype` on `device`.
    pub fn new(inv_freq: Vec<f32>, max_positions: usize, dtype: DType, device: &Device) -> Self {
        Self {
            inv_freq,
            scaling: 1.0,
            max_positions,
            dtype,
            device: device.clone(),
            cos: None,
            sin: None,
        }
    }

    /// The same tables with cos and sin multiplied by `scaling` (e.g. YaRN/longrope factors).
    pub fn with_scaling(mut self, scaling: f32) -> Self {
        self.scaling = scaling;
        self.cos = None;
        self.sin = None;
        self
    }

    /// Rows in the tables now.
    fn rows(&self) -> usize {
        self.cos.as_ref().map_or(0, |t| t.dims()[0])
    }

    /// Makes sure the tables cover positions `< end`.
    fn ensure(&mut self, end: usize) -> Result<()> {
        if end > self.max_positions {
            return Err(LlmError::Usage(format!(
                "position {} is beyond the model's {} positions",
                end - 1,
                self.max_positions
            )));
        }
        if end <= self.rows() {
            return Ok(());
        }
        let rows = end
            .div_ceil(TABLE_CHUNK)
            .saturating_mul(TABLE_CHUNK)
            .min(self.max_positions);
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(rows * half);
        let mut sin = Vec::with_capacity(rows * half);
        for p in 0..rows {
            for &f in &self.inv_freq {
                let angle = p as f32 * f;
                cos.push(angle.cos() * self.scaling);
                sin.push(angle.sin() * self.scaling);
            }
        }
        let to = |v: Vec<f32>| -> Result<Tensor> {
            Ok(Tensor::from_vec(v, (rows, half), &self.device)?.to_dtype(self.dtype)?)
        };
        self.cos = Some(to(cos)?);
        self.sin = Some(to(sin)?);
        Ok(())
    }

    /// The cos and sin rows of positions `start..start + len`: two `[len, rotary_dim/2]` tensors.
    pub fn tables(&mut self, start: usize, len: usize) -> Result<(Tensor, Tensor)> {
        self.ensure(start + len)?;
        let (cos, sin) = (self.cos.as_ref(), self.sin.as_ref());
        let (Some(cos), Some(sin)) = (cos, sin) else {
            return Err(LlmError::Usage("empty rotary table".into()));
        };
        Ok((cos.narrow(0, start, len)?, sin.narrow(0, start, len)?))
    }
}

/// Applies RoPE to `x` of shape `[batch, heads, seq, head_dim]` with tables from
/// [`RotaryEmbedding::tables`] (`[seq, rotary_dim/2]`). With `rotary_dim < head_dim` (partial
/// rotary, HF's `partial_rotary_factor`) only the first `rotary_dim` features of each head are
/// rotated and the rest pass through unchanged.
pub fn apply_rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let head_dim = x.dim(3)?;
    let rotary_dim = 2 * cos.dim(1)?;
    if rotary_dim == head_dim {
        return Ok(candle_nn::rotary_emb::rope(&x.contiguous()?, cos, sin)?);
    }
    if rotary_dim > head_dim {
        return Err(LlmError::Usage(format!(
            "rotary tables of {rotary_dim} features for heads of {head_dim}"
        )));
    }
    let rotated =
        candle_nn::rotary_emb::rope(&x.narrow(3, 0, rotary_dim)?.contiguous()?, cos, sin)?;
    let passed = x.narrow(3, rotary_dim, head_dim - rotary_dim)?;
    Ok(Tensor::cat(&[&rotated, &passed], 3)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_match_direct_formula_and_grow() {
        let inv = default_inv_freq(10_000.0, 8);
        assert_eq!(inv.len(), 4);
        assert_eq!(inv[0], 1.0);
        let mut rope = RotaryEmbedding::new(inv.clone(), 5000, DType::F32, &Device::Cpu);
        let (cos, sin) = rope.tables(3, 2).unwrap();
        assert_eq!(cos.dims(), &[2, 4]);
        let cos = cos.to_vec2::<f32>().unwrap();
        let sin = sin.to_vec2::<f32>().unwrap();
        assert_eq!(cos[1][2], (4.0 * inv[2]).cos());
        assert_eq!(sin[0][1], (3.0 * inv[1]).sin());
        assert_eq!(rope.rows(), TABLE_CHUNK);
        let (cos, _) = rope.tables(2000, 1).unwrap();
        assert_eq!(cos.to_vec2::<f32>().unwrap()[0][3], (2000.0 * inv[3]).cos());
        assert_eq!(rope.rows(), 2 * TABLE_CHUNK);
        assert!(rope.tables(4999, 2).is_err());
        assert!(rope.tables(4999, 1).is_ok());
        assert_eq!(rope.rows(), 5000);
    }

    #[test]
    fn partial_rope_rotates_the_first_features_only() {
        let dev = Device::Cpu;
        let mut rope = RotaryEmbedding::new(default_inv_freq(100.0, 4), 16, DType::F32, &dev);
        let (cos, sin) = rope.tables(0, 3).unwrap();
        let x = Tensor::randn(0f32, 1.0, (1, 2, 3, 6), &dev).unwrap();
        let got = apply_rope(&x, &cos, &sin).unwrap();
        let head = apply_rope(&x.narrow(3, 0, 4).unwrap(), &cos, &sin).unwrap();
        let want = Tensor::cat(&[&head, &x.narrow(3, 4, 2).unwrap()], 3).unwrap();
        let diff = (got - want).unwrap().abs().unwrap().max_all().unwrap();
        assert_eq!(diff.to_scalar::<f32>().unwrap(), 0.0);
        let (cos, sin) = rope.tables(0, 3).unwrap();
        let narrow = x.narrow(3, 0, 2).unwrap();
        assert!(apply_rope(&narrow, &cos, &sin).is_err());
    }

    fn rope_config(scaling: serde_json::Value) -> RopeConfig {
        let rope_type = scaling
            .get("rope_type")
            .and_then(|t| t.as_str())
            .map(str::to_string);
        RopeConfig {
            theta: 5e5,
            rope_type,
            scaling: Some(scaling),
        }
    }

    #[test]
    fn scaling_types_from_config() {
        let path = Path::new("config.json");
        let plain = RopeConfig {
            theta: 1e4,
            rope_type: None,
            scaling: None,
        };
        assert_eq!(
            RopeScaling::from_config(&plain, path).unwrap(),
            RopeScaling::None
        );
        let linear = rope_config(serde_json::json!({"rope_type": "linear", "factor": 8.0}));
        let s = RopeScaling::from_config(&linear, path).unwrap();
        assert_eq!(s, RopeScaling::Linear { factor: 8.0 });
        assert_eq!(s.inv_freq(1e4, 8)[1], default_inv_freq(1e4, 8)[1] / 8.0);
        for bad in [
            serde_json::json!({"rope_type": "yarn", "factor": 4.0}),
            serde_json::json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}),
            serde_json::json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                "high_freq_factor": 1.0, "original_max_position_embeddings": 64}),
        ] {
            let e = RopeScaling::from_config(&rope_config(bad.clone()), path);
            assert!(matches!(e, Err(LlmError::InvalidConfig { .. })), "{bad}");
        }
    }

    #[test]
    fn llama3_keeps_high_scales_low_and_smooths_the_band() {
        // Llama 3.1's constants with a short original context, so all three bands occur.
        let rope = rope_config(serde_json::json!({
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64
        }));
        let scaling = RopeScaling::from_config(&rope, Path::new("config.json")).unwrap();
        let base = default_inv_freq(5e5, 32);
        let got = scaling.inv_freq(5e5, 32);
        let (mut high, mut low, mut medium) = (0, 0, 0);
        for (&f, &g) in base.iter().zip(&got) {
            // The formula in f64: smooth = (64 / wavelen - 1) / 3.
            let wavelen = 2.0 * std::f64::consts::PI / f as f64;
            if wavelen < 16.0 {
                assert_eq!(g, f);
                high += 1;
            } else if wavelen > 64.0 {
                assert_eq!(g, f / 8.0);
                low += 1;
            } else {
                let smooth = (64.0 / wavelen - 1.0) / 3.0;
                let want = (1.0 - smooth) * f as f64 / 8.0 + smooth * f as f64;
                assert!(((g as f64 - want) / want).abs() < 1e-6, "{g} vs {want}");
                assert!(g < f && g > f / 8.0);
                medium += 1;
            }
        }
        assert!(high > 0 && low > 0 && medium > 0, "{high} {low} {medium}");
    }

    #[test]
    fn rope_rotates_halves() {
        // One head of dim 4 at position 1, frequencies [1, 0.01]: x' = x*cos + rotate_half(x)*sin.
        let mut rope = RotaryEmbedding::new(vec![1.0, 0.01], 16, DType::F32, &Device::Cpu);
        let (cos, sin) = rope.tables(1, 1).unwrap();
        let x = Tensor::new(&[1f32, 2., 3., 4.], &Device::Cpu)
            .unwrap()
            .reshape((1, 1, 1, 4))
            .unwrap();
        let y = apply_rope(&x, &cos, &sin).unwrap().flatten_all().unwrap();
        let y = y.to_vec1::<f32>().unwrap();
        let (c0, s0, c1, s1) = (1f32.cos(), 1f32.sin(), 0.01f32.cos(), 0.01f32.sin());
        let want = [
            1. * c0 - 3. * s0,
            2. * c1 - 4. * s1,
            3. * c0 + 1. * s0,
            4. * c1 + 2. * s1,
        ];
        for (a, b) in y.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{y:?} vs {want:?}");
        }
    }
}
