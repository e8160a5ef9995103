//! Compressing a BF16 model folder into the official DF11 layout.
//!
//! Output, as `dfloat11.compress_model(..., save_single_file=False)` writes it: one safetensors
//! file per unit, named after its module path (`model_layers_0.safetensors`), holding the six
//! tensors and that module's other tensors (norms, biases); everything else in
//! `model.safetensors`; `config.json` with `dfloat11_config`; other files copied. Units are
//! encoded a few at a time, so memory stays bounded by a few units, not by the model.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

use rayon::prelude::*;
use safetensors::Dtype;
use serde_json::Value;

use crate::codec::encode::{encode_unit, EncodedUnit};
use crate::error::{Df11Error, Result};
use crate::format::config::{read_config_json, Df11Config, Pattern, PatternDict};
use crate::format::model::natural_cmp;
use crate::format::patterns::builtin_pattern_dict;
use crate::format::safetensors_index::{RawTensor, SafetensorsIndex};

/// Options of [`compress_model`].
#[derive(Debug, Clone)]
pub struct CompressOptions {
    /// Use this `pattern_dict` instead of the built-in one for the architecture.
    pub pattern_dict: Option<PatternDict>,
    /// Units encoded at the same time (memory grows with it).
    pub units_in_flight: usize,
}

impl Default for CompressOptions {
    fn default() -> Self {
        Self {
            pattern_dict: None,
            units_in_flight: 2,
        }
    }
}

/// Progress, reported after each batch of units.
#[derive(Debug, Clone, Copy)]
pub struct CompressProgress {
    /// Units written so far.
    pub units_done: usize,
    /// Units in the model.
    pub units_total: usize,
    /// Weights encoded so far.
    pub weights_done: u64,
    /// Weights to encode.
    pub weights_total: u64,
}

/// What [`compress_model`] did.
#[derive(Debug, Clone)]
pub struct CompressReport {
    /// Units written.
    pub units: usize,
    /// Weights compressed.
    pub weights: u64,
    /// Bytes of those weights in BF16.
    pub bf16_bytes: u64,
    /// Bytes of their six DF11 tensors.
    pub df11_bytes: u64,
    /// Wall time.
    pub seconds: f64,
    /// The `pattern_dict` used.
    pub pattern_dict: PatternDict,
}

/// A unit to compress, found from the source tensor names.
#[derive(Debug, Clone)]
pub struct PlannedUnit {
    /// Module path.
    pub name: String,
    /// Weight tensors, in concatenation order.
    pub members: Vec<String>,
    /// The module's other tensors (stored plain in the unit's file).
    pub extras: Vec<String>,
}

/// Finds the units of a model: every module path (a dotted prefix of some tensor name) that
/// full-matches a pattern.
pub fn plan_units(index: &SafetensorsIndex, dict: &PatternDict) -> Result<Vec<PlannedUnit>> {
    let path_of = |t: &str| index.path_of(t);
    let mut modules: Vec<String> = Vec::new();
    for name in index.names() {
        let mut end = 0;
        while let Some(off) = name[end..].find('.') {
            end += off;
            modules.push(name[..end].to_string());
            end += 1;
        }
    }
    modules.sort_by(|a, b| natural_cmp(a, b));
    modules.dedup();

    let mut units: Vec<(String, &Pattern)> = Vec::new();
    for m in &modules {
        match dict.matching(m).as_slice() {
            [] => {}
            [p] => units.push((m.clone(), p)),
            many => {
                return Err(Df11Error::AmbiguousUnit {
                    path: path_of(m),
                    unit: m.clone(),
                    patterns: many.iter().map(|p| p.key.clone()).collect(),
                })
            }
        }
    }
    for (a, _) in &units {
        if let Some((b, _)) = units.iter().find(|(b, _)| a.starts_with(&format!("{b}."))) {
            return Err(Df11Error::InvalidConfig {
                path: path_of(a),
                reason: format!(
                    "unit `{a}` lies inside unit `{b}`; pattern_dict keys must not nest"
                ),
            });
        }
    }

    let mut planned = Vec::with_capacity(units.len());
    for (name, pattern) in units {
        let members = pattern.member_weights(&name);
        for m in &members {
            let t = index.get(m).ok_or_else(|| Df11Error::MissingTensor {
                path: path_of(&name),
                tensor: m.clone(),
            })?;
            if t.dtype != Dtype::BF16 {
                return Err(Df11Error::Unencodable {
                    path: path_of(m),
                    tensor: m.clone(),
                    reason: format!("dtype {:?}; DF11 compresses BF16 weights only", t.dtype),
                });
            }
        }
        let prefix = format!("{name}.");
        let extras = index
            .names()
            .filter(|n| n.starts_with(&prefix) && !members.iter().any(|m| m == n))
            .map(str::to_string)
            .collect();
        planned.push(PlannedUnit {
            name,
            members,
            extras,
        });
    }
    Ok(planned)
}

/// Compresses the BF16 model in `src` into `dst` (created if needed; it must hold no
/// safetensors files yet). `on_progress` is called after each batch of units.
pub fn compress_model(
    src: &Path,
    dst: &Path,
    options: &CompressOptions,
    mut on_progress: impl FnMut(&CompressProgress),
) -> Result<CompressReport> {
    let start = Instant::now();
    let (config_path, mut config) = read_config_json(src)?;
    if config.get("dfloat11_config").is_some() {
        return Err(Df11Error::InvalidConfig {
            path: config_path,
            reason: "this model is already DF11-compressed".into(),
        });
    }
    let dict = match &options.pattern_dict {
        Some(d) => d.clone(),
        None => builtin_pattern_dict(&config).map_err(|reason| Df11Error::InvalidConfig {
            path: config_path.clone(),
            reason,
        })?,
    };
    let index = SafetensorsIndex::open_dir(src)?;
    if index.files().next().is_none() {
        return Err(Df11Error::NotAModel {
            path: src.to_path_buf(),
            reason: "no *.safetensors files in this folder".into(),
        });
    }
    let units = plan_units(&index, &dict)?;
    if units.is_empty() {
        return Err(Df11Error::InvalidConfig {
            path: config_path,
            reason: "no module matches the pattern_dict: nothing to compress".into(),
        });
    }

    prepare_output_dir(src, dst)?;

    let weights_total: u64 = units
        .iter()
        .flat_map(|u| &u.members)
        .map(|m| index.get(m).map_or(0, |t| t.data.len() as u64 / 2))
        .sum();
    let mut progress = CompressProgress {
        units_done: 0,
        units_total: units.len(),
        weights_done: 0,
        weights_total,
    };
    on_progress(&progress);
    let mut df11_bytes = 0u64;
    for batch in units.chunks(options.units_in_flight.max(1)) {
        let results: Vec<Result<(u64, u64)>> = batch
            .par_iter()
            .map(|u| write_unit(&index, u, dst))
            .collect();
        for r in results {
            let (weights, bytes) = r?;
            progress.weights_done += weights;
            df11_bytes += bytes;
        }
        progress.units_done += batch.len();
        on_progress(&progress);
    }

    // Everything not inside a unit goes to model.safetensors (a diffusers model:
    // diffusion_pytorch_model.safetensors), with the metadata `save_pretrained` writes.
    let diffusers = crate::format::patterns::diffusers_class(&config).is_some();
    let inside_unit = |n: &str| units.iter().any(|u| n.starts_with(&format!("{}.", u.name)));
    let rest: Vec<(String, RawTensor<'_>)> = index
        .names()
        .filter(|n| !inside_unit(n))
        .map(|n| (n.to_string(), index.get(n).unwrap()))
        .collect();
    let meta: HashMap<String, String> = [("format".to_string(), "pt".to_string())].into();
    let model_path = dst.join(if diffusers {
        "diffusion_pytorch_model.safetensors"
    } else {
        "model.safetensors"
    });
    safetensors::serialize_to_file(rest, Some(meta), &model_path).map_err(|e| {
        Df11Error::Safetensors {
            path: model_path.clone(),
            reason: e.to_string(),
        }
    })?;

    let df11 = Df11Config::for_writing(dict.clone());
    if diffusers {
        // The official compressor writes a diffusers model's config.json with the DF11 block
        // alone (the model's config stays in the base repo).
        config = serde_json::json!({ "dfloat11_config": df11.to_json() });
    } else if let Value::Object(obj) = &mut config {
        obj.insert("dfloat11_config".into(), df11.to_json());
    }
    let out_config = dst.join("config.json");
    let mut text = serde_json::to_string_pretty(&config).expect("a JSON value serializes");
    // transformers' save_pretrained ends the file with a newline, the official compressor's
    // diffusers config not.
    if !diffusers {
        text.push('\n');
    }
    std::fs::write(&out_config, text).map_err(|e| Df11Error::io(&out_config, e))?;

    Ok(CompressReport {
        units: units.len(),
        weights: weights_total,
        bf16_bytes: weights_total * 2,
        df11_bytes,
        seconds: start.elapsed().as_secs_f64(),
        pattern_dict: dict,
    })
}

/// Creates `dst`, refuses one that already holds safetensors files (the loader would read them
/// all), and copies the source's other files (tokenizer, generation config, ...).
fn prepare_output_dir(src: &Path, dst: &Path) -> Result<()> {
    std::fs::create_dir_all(dst).map_err(|e| Df11Error::io(dst, e))?;
    let same = std::fs::canonicalize(src).ok() == std::fs::canonicalize(dst).ok();
    let has_weights = std::fs::read_dir(dst)
        .map_err(|e| Df11Error::io(dst, e))?
        .flatten()
        .any(|e| e.path().extension().is_some_and(|x| x == "safetensors"));
    if same || has_weights {
        return Err(Df11Error::NotAModel {
            path: dst.to_path_buf(),
            reason: "the output folder already holds safetensors files; use an empty folder".into(),
        });
    }
    for entry in std::fs::read_dir(src)
        .map_err(|e| Df11Error::io(src, e))?
        .flatten()
    {
        let p = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        let skip = name == "config.json"
            || name.ends_with(".safetensors")
            || name.ends_with(".safetensors.index.json");
        if p.is_file() && !skip {
            let to = dst.join(&name);
            std::fs::copy(&p, &to).map_err(|e| Df11Error::io(&to, e))?;
        }
    }
    Ok(())
}

/// Encodes one unit and writes its file; returns (weights, bytes of the six tensors).
fn write_unit(index: &SafetensorsIndex, unit: &PlannedUnit, dst: &Path) -> Result<(u64, u64)> {
    let members: Vec<&[u8]> = unit
        .members
        .iter()
        .map(|m| index.get(m).expect("planned members exist").data)
        .collect();
    let enc: EncodedUnit = encode_unit(&members).map_err(|e| {
        let tensor = e
            .member
            .map(|i| unit.members[i].clone())
            .unwrap_or_else(|| unit.name.clone());
        Df11Error::Unencodable {
            path: index.path_of(&tensor),
            tensor,
            reason: e.reason,
        }
    })?;
    let shapes: BTreeMap<&str, Vec<usize>> = [
        ("encoded_exponent", vec![enc.encoded_exponent.len()]),
        ("sign_mantissa", vec![enc.sign_mantissa.len()]),
        ("luts", vec![enc.lut_rows(), 256]),
        ("gaps", vec![enc.gaps.len()]),
        ("output_positions", vec![enc.output_positions.len()]),
        ("split_positions", vec![enc.split_positions.len() / 8]),
    ]
    .into();
    let fields: [(&str, &[u8], Dtype); 6] = [
        ("encoded_exponent", &enc.encoded_exponent, Dtype::U8),
        ("sign_mantissa", &enc.sign_mantissa, Dtype::U8),
        ("luts", &enc.luts, Dtype::U8),
        ("gaps", &enc.gaps, Dtype::U8),
        ("output_positions", &enc.output_positions, Dtype::U8),
        ("split_positions", &enc.split_positions, Dtype::I64),
    ];
    let mut tensors: Vec<(String, RawTensor<'_>)> = fields
        .iter()
        .map(|&(f, data, dtype)| {
            (
                format!("{}.{f}", unit.name),
                RawTensor {
                    dtype,
                    shape: &shapes[f],
                    data,
                },
            )
        })
        .collect();
    for extra in &unit.extras {
        tensors.push((extra.clone(), index.get(extra).expect("indexed")));
    }
    let path: PathBuf = dst.join(format!("{}.safetensors", unit.name.replace('.', "_")));
    safetensors::serialize_to_file(tensors, None, &path).map_err(|e| Df11Error::Safetensors {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    Ok((enc.sign_mantissa.len() as u64, enc.total_bytes() as u64))
}
