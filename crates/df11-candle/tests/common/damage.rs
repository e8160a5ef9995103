//! Helpers of the damaged-folder tests (`damaged_*.rs`): temporary copies of the qwen3-tiny DF11
//! fixture, safetensors and config edits, and checks of the errors a damaged folder gives.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use df11_candle::{
    decode_parallel, decode_sequential, DecodeTable, Df11Error, Df11Model, RawTensor, UnitDefect,
    UnitLayout, UnitTensors,
};
use half::bf16;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

/// The unit most cases damage, and its file.
pub const UNIT: &str = "model.layers.0";
pub const UNIT_FILE: &str = "model_layers_0.safetensors";

// ---------------------------------------------------------------------------------------------
// Making damaged copies.

/// A temporary copy of the qwen3-tiny DF11 folder; the folder is `<tmp>/df11`.
pub struct FolderCopy {
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
}

pub fn fixture() -> PathBuf {
    super::model_dir("qwen3-tiny", "df11")
}

pub fn copy_fixture() -> FolderCopy {
    let tmp = super::temp_dir();
    let dir = tmp.path().join("df11");
    std::fs::create_dir(&dir).unwrap();
    for e in std::fs::read_dir(fixture()).unwrap().flatten() {
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    FolderCopy { _tmp: tmp, dir }
}

/// An owned tensor read from a safetensors file.
#[derive(Clone)]
pub struct Tensor {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

pub fn read_tensors(path: &Path) -> (Vec<Tensor>, Option<HashMap<String, String>>) {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let mut v: Vec<Tensor> = st
        .tensors()
        .into_iter()
        .map(|(name, t)| Tensor {
            name,
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            data: t.data().to_vec(),
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    (v, meta.metadata().clone())
}

pub fn write_tensors(path: &Path, tensors: &[Tensor], meta: Option<HashMap<String, String>>) {
    let views = tensors.iter().map(|t| {
        (
            t.name.clone(),
            RawTensor {
                dtype: t.dtype,
                shape: &t.shape,
                data: &t.data,
            },
        )
    });
    safetensors::serialize_to_file(views, meta, path).unwrap();
}

/// Reads every tensor of `dir/file`, lets `edit` change the list, and writes the file again.
pub fn rewrite(dir: &Path, file: &str, edit: impl FnOnce(&mut Vec<Tensor>)) {
    let path = dir.join(file);
    let (mut tensors, meta) = read_tensors(&path);
    edit(&mut tensors);
    write_tensors(&path, &tensors, meta);
}

/// Rewrites one tensor of the damaged unit (`<UNIT>.<field>`).
pub fn edit_field(dir: &Path, field: &str, edit: impl FnOnce(&mut Tensor)) {
    let name = format!("{UNIT}.{field}");
    rewrite(dir, UNIT_FILE, |ts| {
        let t = ts
            .iter_mut()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name} not in {UNIT_FILE}"));
        edit(t);
    });
}

pub fn edit_config(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("config.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Edits of a config, a tensor, split positions (given N) and output positions.
pub type ConfigEdit = Box<dyn Fn(&mut Value)>;
pub type TensorEdit = fn(&mut Tensor);
pub type SplitEdit = fn(&mut Vec<i64>, i64);
pub type PositionsEdit = fn(&mut Vec<u32>);

pub fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

pub fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn i64s(bytes: &[u8]) -> Vec<i64> {
    bytes
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Checking errors.

/// Opens `dir`, which must fail (and must not panic).
pub fn open_err(dir: &Path, case: &str) -> Df11Error {
    match catch_unwind(|| Df11Model::open(dir)) {
        Err(_) => panic!("{case}: Df11Model::open panicked"),
        Ok(Ok(_)) => panic!("{case}: the damaged folder opened without error"),
        Ok(Err(e)) => e,
    }
}

/// Opens `dir`, which must succeed (and must not panic).
pub fn open_ok(dir: &Path, case: &str) -> Df11Model {
    match catch_unwind(|| Df11Model::open(dir)) {
        Err(_) => panic!("{case}: Df11Model::open panicked"),
        Ok(Err(e)) => panic!("{case}: open failed: {e}"),
        Ok(Ok(m)) => m,
    }
}

/// The error's message names every one of `needles` (file names, tensors, units).
pub fn assert_mentions(err: &Df11Error, needles: &[&str], case: &str) {
    let msg = err.to_string();
    for n in needles {
        assert!(
            msg.contains(n),
            "{case}: the message does not name `{n}`: {msg}"
        );
    }
}

pub fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// The error must be `InvalidUnit` for `UNIT` in `UNIT_FILE`; returns its defect.
pub fn unit_defect(err: &Df11Error, case: &str) -> UnitDefect {
    match err {
        Df11Error::InvalidUnit { path, unit, defect } => {
            assert_eq!(unit, UNIT, "{case}: {err}");
            assert_eq!(file_name(path), UNIT_FILE, "{case}: {err}");
            assert_mentions(err, &[UNIT_FILE, UNIT], case);
            defect.clone()
        }
        other => panic!("{case}: expected InvalidUnit, got {other:?} ({other})"),
    }
}

/// Decodes the damaged unit with the parallel decoder, which must not panic.
pub fn decode_layer(model: &Df11Model, case: &str) -> Result<Vec<bf16>, Df11Error> {
    let unit = model
        .unit(UNIT)
        .unwrap_or_else(|| panic!("{case}: no unit {UNIT}"));
    catch_unwind(AssertUnwindSafe(|| model.decode_unit(unit)))
        .unwrap_or_else(|_| panic!("{case}: decode_unit panicked"))
}

/// The undamaged unit's decoded weights.
pub fn original_layer() -> Vec<bf16> {
    let m = Df11Model::open(fixture()).unwrap();
    m.decode_unit(m.unit(UNIT).unwrap()).unwrap()
}

pub fn is_index_defect(d: &UnitDefect) -> bool {
    matches!(d, UnitDefect::Stream(_) | UnitDefect::OutputPositions(_))
}

// ---------------------------------------------------------------------------------------------
// Units in memory, for the random trials.

/// An owned copy of a unit's six tensors.
#[derive(Clone)]
pub struct OwnedUnit {
    pub encoded_exponent: Vec<u8>,
    pub sign_mantissa: Vec<u8>,
    pub luts: Vec<u8>,
    pub gaps: Vec<u8>,
    pub output_positions: Vec<u8>,
    pub split_positions: Vec<u8>,
}

impl OwnedUnit {
    pub fn of(t: &UnitTensors<'_>) -> Self {
        Self {
            encoded_exponent: t.encoded_exponent.to_vec(),
            sign_mantissa: t.sign_mantissa.to_vec(),
            luts: t.luts.to_vec(),
            gaps: t.gaps.to_vec(),
            output_positions: t.output_positions.to_vec(),
            split_positions: t.split_positions.to_vec(),
        }
    }

    pub fn tensors(&self) -> UnitTensors<'_> {
        UnitTensors {
            encoded_exponent: &self.encoded_exponent,
            sign_mantissa: &self.sign_mantissa,
            luts: &self.luts,
            gaps: &self.gaps,
            output_positions: &self.output_positions,
            split_positions: &self.split_positions,
        }
    }
}

/// Every unit of the fixture, with its decoded weights and the bit position where each
/// element's code starts (one more entry: the end of the last code).
pub struct Reference {
    pub name: String,
    pub unit: OwnedUnit,
    pub decoded: Vec<bf16>,
    pub code_starts: Vec<u64>,
}

pub fn references() -> Vec<Reference> {
    let model = Df11Model::open(fixture()).unwrap();
    model
        .units()
        .iter()
        .map(|u| {
            let t = model.unit_tensors(u).unwrap();
            let decoded = model.decode_unit(u).unwrap();
            let lengths = &t.luts[t.luts.len() - 256..];
            let mut code_starts = Vec::with_capacity(decoded.len() + 1);
            let mut at = 0u64;
            for w in &decoded {
                code_starts.push(at);
                at += lengths[((w.to_bits() >> 7) & 0xFF) as usize] as u64;
            }
            code_starts.push(at);
            Reference {
                name: u.name.clone(),
                unit: OwnedUnit::of(&t),
                decoded,
                code_starts,
            }
        })
        .collect()
}

/// Decodes with both decoders, catching panics; the parallel result first.
pub type Decoded = (Result<Vec<bf16>, UnitDefect>, Result<Vec<bf16>, UnitDefect>);

pub fn decode_both(u: &OwnedUnit, case: &str) -> Result<Decoded, UnitDefect> {
    let t = u.tensors();
    let layout = catch_unwind(|| UnitLayout::validate(&t))
        .unwrap_or_else(|_| panic!("{case}: validate panicked"))?;
    let run = |parallel: bool| {
        catch_unwind(AssertUnwindSafe(|| {
            let table = DecodeTable::new(t.luts);
            let mut out = vec![bf16::ZERO; layout.n_elements];
            if parallel {
                decode_parallel(&t, &layout, &table, &mut out)
            } else {
                decode_sequential(&t, &layout, &table, &mut out)
            }
            .map(|()| out)
        }))
        .unwrap_or_else(|_| panic!("{case}: decoder (parallel: {parallel}) panicked"))
    };
    Ok((run(true), run(false)))
}
