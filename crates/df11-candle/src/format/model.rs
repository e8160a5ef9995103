//! Opening a DF11 model folder: config, tensor index, units matched to `pattern_dict`, and
//! validation of every unit before anything is decoded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use half::bf16;
use safetensors::Dtype;
use serde_json::Value;

use crate::codec::decode::{decode_parallel, decode_sequential, DecodeTable};
use crate::error::{Df11Error, Result, UnitDefect};
use crate::format::config::{read_df11_config, Df11Config};
use crate::format::safetensors_index::{RawTensor, SafetensorsIndex};
use crate::format::unit::{UnitLayout, UnitTensors, UNIT_FIELDS};

/// One compressed unit of a model, validated.
#[derive(Debug, Clone)]
pub struct Df11Unit {
    /// Module path of the unit, e.g. `model.layers.0`.
    pub name: String,
    /// The `pattern_dict` key it matched.
    pub pattern: String,
    /// Names of the weights it decodes into, in concatenation order.
    pub members: Vec<String>,
    /// Validated sizes and index data.
    pub layout: UnitLayout,
}

impl Df11Unit {
    /// Name of one of the six tensors, e.g. `model.layers.0.luts`.
    pub fn tensor_name(&self, field: &str) -> String {
        format!("{}.{field}", self.name)
    }

    /// Element range of member `i` in the decoded flat buffer.
    pub fn member_range(&self, i: usize) -> std::ops::Range<usize> {
        self.layout.member_ranges()[i].clone()
    }

    /// Bits per weight of the compressed unit (all six tensors).
    pub fn bits_per_weight(&self, bytes: usize) -> f64 {
        bytes as f64 * 8.0 / self.layout.n_elements.max(1) as f64
    }
}

/// An opened DF11 model folder.
pub struct Df11Model {
    dir: PathBuf,
    config: Value,
    df11: Df11Config,
    index: SafetensorsIndex,
    units: Vec<Df11Unit>,
    /// Member weight name -> (unit index, member index).
    members: BTreeMap<String, (usize, usize)>,
    plain: Vec<String>,
    warnings: Vec<String>,
}

impl std::fmt::Debug for Df11Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Df11Model")
            .field("dir", &self.dir)
            .field("units", &self.units.len())
            .field("plain", &self.plain.len())
            .finish()
    }
}

/// Splits `name` into `(unit, field)` when it is one of the six unit tensors.
fn split_unit_field(name: &str) -> Option<(&str, &str)> {
    let (unit, field) = name.rsplit_once('.')?;
    UNIT_FIELDS.contains(&field).then_some((unit, field))
}

impl Df11Model {
    /// Opens `dir`: reads `config.json`, indexes every safetensors file, matches units to
    /// `pattern_dict` and validates each unit. Nothing is decoded yet.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let (config, df11) = read_df11_config(&dir)?;
        let mut warnings = Vec::new();
        if !df11.version_is_known() {
            warnings.push(format!(
                "{}: unknown dfloat11_config.version `{}`; reading it as the 0.2.0+ format, which has not changed since",
                dir.join("config.json").display(),
                df11.version
            ));
        }
        let index = SafetensorsIndex::open_dir(&dir)?;
        if index.files().next().is_none() {
            return Err(Df11Error::NotAModel {
                path: dir,
                reason: "no *.safetensors files in this folder".into(),
            });
        }

        let unit_names: Vec<String> = {
            let mut v: Vec<String> = index
                .names()
                .filter_map(split_unit_field)
                .map(|(u, _)| u.to_string())
                .collect();
            v.dedup();
            v.sort_by(|a, b| natural_cmp(a, b));
            v.dedup();
            v
        };

        let mut units = Vec::with_capacity(unit_names.len());
        let mut members = BTreeMap::new();
        for name in unit_names {
            let unit = Self::load_unit(&index, &df11, &name)?;
            for (i, m) in unit.members.iter().enumerate() {
                if index.contains(m) {
                    return Err(Df11Error::DuplicateTensor {
                        tensor: m.clone(),
                        first: index.path_of(m),
                        second: index.path_of(&unit.tensor_name("encoded_exponent")),
                    });
                }
                members.insert(m.clone(), (units.len(), i));
            }
            units.push(unit);
        }
        let plain = index
            .names()
            .filter(|n| split_unit_field(n).is_none())
            .map(str::to_string)
            .collect();
        Ok(Self {
            dir,
            config,
            df11,
            index,
            units,
            members,
            plain,
            warnings,
        })
    }

    fn load_unit(index: &SafetensorsIndex, df11: &Df11Config, name: &str) -> Result<Df11Unit> {
        let path = unit_file(index, name);
        let matching = df11.pattern_dict.matching(name);
        let pattern = match matching.as_slice() {
            [] => {
                return Err(Df11Error::UnmatchedUnit {
                    path,
                    unit: name.to_string(),
                })
            }
            [p] => *p,
            many => {
                return Err(Df11Error::AmbiguousUnit {
                    path,
                    unit: name.to_string(),
                    patterns: many.iter().map(|p| p.key.clone()).collect(),
                })
            }
        };
        let tensors = Self::unit_tensors_of(index, name)?;
        let invalid = |defect| Df11Error::InvalidUnit {
            path: path.clone(),
            unit: name.to_string(),
            defect,
        };
        let layout = UnitLayout::validate(&tensors).map_err(invalid)?;
        let members = pattern.member_weights(name);
        if members.len() != layout.split_positions.len() + 1 {
            return Err(invalid(UnitDefect::SplitPositions(format!(
                "{} split positions, but pattern `{}` names {} members",
                layout.split_positions.len(),
                pattern.key,
                members.len()
            ))));
        }
        Ok(Df11Unit {
            name: name.to_string(),
            pattern: pattern.key.clone(),
            members,
            layout,
        })
    }

    /// Fetches the six tensors and checks their dtypes and shapes.
    fn unit_tensors_of<'a>(index: &'a SafetensorsIndex, name: &str) -> Result<UnitTensors<'a>> {
        // A missing tensor is reported in the file holding the unit's other tensors.
        let require = |tensor: &str, dtype, rank| {
            index.require(tensor, dtype, rank).map_err(|e| match e {
                Df11Error::MissingTensor { tensor, .. } => Df11Error::MissingTensor {
                    path: unit_file(index, name),
                    tensor,
                },
                e => e,
            })
        };
        let u8_1d = |field: &str| -> Result<RawTensor<'a>> {
            require(&format!("{name}.{field}"), Dtype::U8, Some(1))
        };
        let luts_name = format!("{name}.luts");
        let luts = require(&luts_name, Dtype::U8, Some(2))?;
        if luts.shape[1] != 256 {
            return Err(Df11Error::WrongShape {
                path: index.path_of(&luts_name),
                tensor: luts_name,
                expected: "[K, 256]".into(),
                found: luts.shape.to_vec(),
            });
        }
        let split = require(&format!("{name}.split_positions"), Dtype::I64, Some(1))?;
        Ok(UnitTensors {
            encoded_exponent: u8_1d("encoded_exponent")?.data,
            sign_mantissa: u8_1d("sign_mantissa")?.data,
            luts: luts.data,
            gaps: u8_1d("gaps")?.data,
            output_positions: u8_1d("output_positions")?.data,
            split_positions: split.data,
        })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The whole `config.json`.
    pub fn config_json(&self) -> &Value {
        &self.config
    }

    /// The `dfloat11_config` block.
    pub fn df11_config(&self) -> &Df11Config {
        &self.df11
    }

    /// Non-fatal findings (e.g. an unknown format version).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The compressed units, in natural name order (`layers.2` before `layers.10`).
    pub fn units(&self) -> &[Df11Unit] {
        &self.units
    }

    /// A unit by module path.
    pub fn unit(&self, name: &str) -> Option<&Df11Unit> {
        self.units.iter().find(|u| u.name == name)
    }

    /// The unit and member index a compressed weight belongs to.
    pub fn find_member(&self, weight: &str) -> Option<(&Df11Unit, usize)> {
        self.members.get(weight).map(|&(u, i)| (&self.units[u], i))
    }

    /// Names of every compressed weight.
    pub fn compressed_weights(&self) -> impl Iterator<Item = &str> {
        self.members.keys().map(String::as_str)
    }

    /// Names of the plain (uncompressed) tensors, sorted.
    pub fn plain_tensors(&self) -> &[String] {
        &self.plain
    }

    /// A plain tensor's dtype, shape and bytes.
    pub fn plain_tensor(&self, name: &str) -> Option<RawTensor<'_>> {
        if split_unit_field(name).is_some() {
            return None;
        }
        self.index.get(name)
    }

    /// The underlying tensor index (all files, all tensors).
    pub fn index(&self) -> &SafetensorsIndex {
        &self.index
    }

    /// The six tensors of a unit, borrowed from the mapped files.
    pub fn unit_tensors(&self, unit: &Df11Unit) -> Result<UnitTensors<'_>> {
        Self::unit_tensors_of(&self.index, &unit.name)
    }

    /// Total bytes of the six tensors of a unit on disk.
    pub fn unit_bytes(&self, unit: &Df11Unit) -> usize {
        UNIT_FIELDS
            .iter()
            .filter_map(|f| self.index.entry(&unit.tensor_name(f)))
            .map(|e| e.range.len())
            .sum()
    }

    /// The file that holds a tensor (for error messages).
    pub fn path_of(&self, tensor: &str) -> PathBuf {
        self.index.path_of(tensor)
    }

    /// Decodes a whole unit into `out` (N BF16 values) with the parallel CPU decoder.
    pub fn decode_unit_into(&self, unit: &Df11Unit, out: &mut [bf16]) -> Result<()> {
        let t = self.unit_tensors(unit)?;
        let table = DecodeTable::new(t.luts);
        decode_parallel(&t, &unit.layout, &table, out).map_err(|defect| self.invalid(unit, defect))
    }

    /// Decodes a whole unit with the sequential reference decoder.
    pub fn decode_unit_sequential_into(&self, unit: &Df11Unit, out: &mut [bf16]) -> Result<()> {
        let t = self.unit_tensors(unit)?;
        let table = DecodeTable::new(t.luts);
        decode_sequential(&t, &unit.layout, &table, out)
            .map_err(|defect| self.invalid(unit, defect))
    }

    /// Decodes a whole unit into a new vector.
    pub fn decode_unit(&self, unit: &Df11Unit) -> Result<Vec<bf16>> {
        let mut out = vec![bf16::ZERO; unit.layout.n_elements];
        self.decode_unit_into(unit, &mut out)?;
        Ok(out)
    }

    /// The error for a defect found in `unit`.
    pub fn invalid(&self, unit: &Df11Unit, defect: UnitDefect) -> Df11Error {
        Df11Error::InvalidUnit {
            path: self.path_of(&unit.tensor_name("encoded_exponent")),
            unit: unit.name.clone(),
            defect,
        }
    }
}

/// The file holding unit `name`'s tensors (the first of its six that exists).
fn unit_file(index: &SafetensorsIndex, name: &str) -> PathBuf {
    UNIT_FIELDS
        .iter()
        .map(|f| format!("{name}.{f}"))
        .find(|t| index.contains(t))
        .map_or_else(|| index.path_of(name), |t| index.path_of(&t))
}

/// Orders names so that digit runs compare as numbers (`layers.2` < `layers.10`).
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return std::cmp::Ordering::Equal,
            (None, _) => return std::cmp::Ordering::Less,
            (_, None) => return std::cmp::Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let na = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let nb = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (da, db) = (&a[..na], &b[..nb]);
                let ta = trim_zeros(da);
                let tb = trim_zeros(db);
                let ord = ta.len().cmp(&tb.len()).then(ta.cmp(tb)).then(na.cmp(&nb));
                if ord != std::cmp::Ordering::Equal {
                    return ord;
                }
                a = &a[na..];
                b = &b[nb..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let z = d.iter().take_while(|&&c| c == b'0').count();
    &d[z.min(d.len().saturating_sub(1))..]
}

#[cfg(test)]
mod tests {
    use super::natural_cmp;

    #[test]
    fn natural_order() {
        let mut v = vec![
            "model.layers.10",
            "model.layers.2",
            "lm_head",
            "model.layers.1",
        ];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            [
                "lm_head",
                "model.layers.1",
                "model.layers.2",
                "model.layers.10"
            ]
        );
    }
}
