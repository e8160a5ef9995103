//! Checking a DF11 folder against its BF16 original, byte for byte.

use std::path::Path;

use half::bf16;
use safetensors::Dtype;

use crate::error::Result;
use crate::format::model::Df11Model;
use crate::format::safetensors_index::SafetensorsIndex;

/// The first difference found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Difference {
    /// A decoded or plain value differs.
    Value {
        /// Tensor name.
        tensor: String,
        /// Flat element index.
        element: usize,
        /// Raw bits in the BF16 original (for BF16 tensors; the byte otherwise).
        expected: u16,
        /// Raw bits found in the DF11 model.
        found: u16,
    },
    /// Dtype or shape differ.
    Layout {
        /// Tensor name.
        tensor: String,
        /// What differs.
        detail: String,
    },
    /// A tensor of the original is neither compressed nor plain in the DF11 model.
    MissingInDf11 {
        /// Tensor name.
        tensor: String,
    },
    /// A DF11 tensor has no counterpart in the original.
    MissingInOriginal {
        /// Tensor name.
        tensor: String,
    },
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Value { tensor, element, expected, found } => write!(
                f,
                "`{tensor}` differs at element {element}: original 0x{expected:04x}, DF11 0x{found:04x}"
            ),
            Self::Layout { tensor, detail } => write!(f, "`{tensor}`: {detail}"),
            Self::MissingInDf11 { tensor } => write!(f, "`{tensor}` is in the original but not in the DF11 model"),
            Self::MissingInOriginal { tensor } => write!(f, "`{tensor}` is in the DF11 model but not in the original"),
        }
    }
}

/// What [`verify_model`] checked.
#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    /// Units decoded.
    pub units: usize,
    /// Compressed weights compared.
    pub weights: u64,
    /// Plain tensors compared.
    pub plain_tensors: usize,
    /// The first difference, if any.
    pub difference: Option<Difference>,
}

impl VerifyReport {
    /// True when nothing differs.
    pub fn is_ok(&self) -> bool {
        self.difference.is_none()
    }
}

/// Decodes every unit of the DF11 model in `df11_dir` (parallel decoder, which also checks the
/// index data) and compares every weight and every plain tensor with the BF16 model in
/// `bf16_dir`. `on_unit` is called after each unit. Stops at the first difference.
pub fn verify_model(
    df11_dir: &Path,
    bf16_dir: &Path,
    mut on_unit: impl FnMut(&str),
) -> Result<VerifyReport> {
    let model = Df11Model::open(df11_dir)?;
    let original = SafetensorsIndex::open_dir(bf16_dir)?;
    let mut report = VerifyReport::default();
    let mut buf: Vec<bf16> = Vec::new();

    for unit in model.units() {
        let mut numels = Vec::with_capacity(unit.members.len());
        for m in &unit.members {
            let Some(t) = original.get(m) else {
                report.difference = Some(Difference::MissingInOriginal { tensor: m.clone() });
                return Ok(report);
            };
            if t.dtype != Dtype::BF16 {
                report.difference = Some(Difference::Layout {
                    tensor: m.clone(),
                    detail: format!("the original is {:?}, not BF16", t.dtype),
                });
                return Ok(report);
            }
            numels.push(t.shape.iter().product::<usize>());
        }
        unit.layout
            .check_members(&numels)
            .map_err(|d| model.invalid(unit, d))?;
        buf.resize(unit.layout.n_elements, bf16::ZERO);
        model.decode_unit_into(unit, &mut buf)?;
        let decoded: &[u16] = bytemuck::cast_slice(&buf);
        for (i, m) in unit.members.iter().enumerate() {
            let range = unit.member_range(i);
            let orig = original.get(m).expect("checked above").data;
            if let Some(d) = first_difference(m, orig, &decoded[range]) {
                report.difference = Some(d);
                return Ok(report);
            }
            report.weights += numels[i] as u64;
        }
        report.units += 1;
        on_unit(&unit.name);
    }

    for name in model.plain_tensors() {
        let t = model.plain_tensor(name).expect("listed");
        let Some(o) = original.get(name) else {
            report.difference = Some(Difference::MissingInOriginal {
                tensor: name.clone(),
            });
            return Ok(report);
        };
        if o.dtype != t.dtype || o.shape != t.shape {
            report.difference = Some(Difference::Layout {
                tensor: name.clone(),
                detail: format!(
                    "original {:?} {:?}, DF11 {:?} {:?}",
                    o.dtype, o.shape, t.dtype, t.shape
                ),
            });
            return Ok(report);
        }
        if let Some(i) = o.data.iter().zip(t.data).position(|(a, b)| a != b) {
            let (expected, found) = if o.dtype == Dtype::BF16 {
                let e = i / 2 * 2;
                (
                    u16::from_le_bytes([o.data[e], o.data[e + 1]]),
                    u16::from_le_bytes([t.data[e], t.data[e + 1]]),
                )
            } else {
                (o.data[i] as u16, t.data[i] as u16)
            };
            let size = o.dtype.bitsize().div_ceil(8).max(1);
            report.difference = Some(Difference::Value {
                tensor: name.clone(),
                element: i / size,
                expected,
                found,
            });
            return Ok(report);
        }
        report.plain_tensors += 1;
    }

    for name in original.names() {
        if model.find_member(name).is_none() && model.plain_tensor(name).is_none() {
            report.difference = Some(Difference::MissingInDf11 {
                tensor: name.to_string(),
            });
            return Ok(report);
        }
    }
    Ok(report)
}

fn first_difference(tensor: &str, original: &[u8], decoded: &[u16]) -> Option<Difference> {
    original
        .chunks_exact(2)
        .zip(decoded)
        .position(|(o, &d)| u16::from_le_bytes([o[0], o[1]]) != d)
        .map(|element| Difference::Value {
            tensor: tensor.to_string(),
            element,
            expected: u16::from_le_bytes([original[2 * element], original[2 * element + 1]]),
            found: decoded[element],
        })
}
