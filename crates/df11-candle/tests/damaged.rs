//! Damaged model folders: every validation rule reports its own error variant (and, for units,
//! its own `UnitDefect`), names the file and the tensor or unit, and never panics.
//!
//! Each case copies `tests/fixtures/models/qwen3-tiny/df11` into a temporary folder and damages
//! one thing. Random trials draw a fresh seed per run, printed in the assertion messages; replay
//! one with `DF11_TEST_SEED=<seed>`.

mod common;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use df11_candle::{
    decode_parallel, decode_sequential, DecodeTable, Df11Error, Df11Model, RawTensor, UnitDefect,
    UnitLayout, UnitTensors,
};
use half::bf16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

/// The unit most cases damage, and its file.
const UNIT: &str = "model.layers.0";
const UNIT_FILE: &str = "model_layers_0.safetensors";

fn seeded(test: &str) -> (u64, StdRng) {
    let seed = std::env::var("DF11_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("{test}: seed {seed} (replay with DF11_TEST_SEED={seed})");
    (seed, StdRng::seed_from_u64(seed))
}

// ---------------------------------------------------------------------------------------------
// Making damaged copies.

/// A temporary copy of the qwen3-tiny DF11 folder; the folder is `<tmp>/df11`.
struct FolderCopy {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

fn fixture() -> PathBuf {
    common::model_dir("qwen3-tiny", "df11")
}

fn copy_fixture() -> FolderCopy {
    let tmp = common::temp_dir();
    let dir = tmp.path().join("df11");
    std::fs::create_dir(&dir).unwrap();
    for e in std::fs::read_dir(fixture()).unwrap().flatten() {
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    FolderCopy { _tmp: tmp, dir }
}

/// An owned tensor read from a safetensors file.
#[derive(Clone)]
struct Tensor {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

fn read_tensors(path: &Path) -> (Vec<Tensor>, Option<HashMap<String, String>>) {
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

fn write_tensors(path: &Path, tensors: &[Tensor], meta: Option<HashMap<String, String>>) {
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
fn rewrite(dir: &Path, file: &str, edit: impl FnOnce(&mut Vec<Tensor>)) {
    let path = dir.join(file);
    let (mut tensors, meta) = read_tensors(&path);
    edit(&mut tensors);
    write_tensors(&path, &tensors, meta);
}

/// Rewrites one tensor of the damaged unit (`<UNIT>.<field>`).
fn edit_field(dir: &Path, field: &str, edit: impl FnOnce(&mut Tensor)) {
    let name = format!("{UNIT}.{field}");
    rewrite(dir, UNIT_FILE, |ts| {
        let t = ts
            .iter_mut()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name} not in {UNIT_FILE}"));
        edit(t);
    });
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("config.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Edits of a config, a tensor, split positions (given N) and output positions.
type ConfigEdit = Box<dyn Fn(&mut Value)>;
type TensorEdit = fn(&mut Tensor);
type SplitEdit = fn(&mut Vec<i64>, i64);
type PositionsEdit = fn(&mut Vec<u32>);

fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i64s(bytes: &[u8]) -> Vec<i64> {
    bytes
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Checking errors.

/// Opens `dir`, which must fail (and must not panic).
fn open_err(dir: &Path, case: &str) -> Df11Error {
    match catch_unwind(|| Df11Model::open(dir)) {
        Err(_) => panic!("{case}: Df11Model::open panicked"),
        Ok(Ok(_)) => panic!("{case}: the damaged folder opened without error"),
        Ok(Err(e)) => e,
    }
}

/// Opens `dir`, which must succeed (and must not panic).
fn open_ok(dir: &Path, case: &str) -> Df11Model {
    match catch_unwind(|| Df11Model::open(dir)) {
        Err(_) => panic!("{case}: Df11Model::open panicked"),
        Ok(Err(e)) => panic!("{case}: open failed: {e}"),
        Ok(Ok(m)) => m,
    }
}

/// The error's message names every one of `needles` (file names, tensors, units).
fn assert_mentions(err: &Df11Error, needles: &[&str], case: &str) {
    let msg = err.to_string();
    for n in needles {
        assert!(
            msg.contains(n),
            "{case}: the message does not name `{n}`: {msg}"
        );
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// The error must be `InvalidUnit` for `UNIT` in `UNIT_FILE`; returns its defect.
fn unit_defect(err: &Df11Error, case: &str) -> UnitDefect {
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
fn decode_layer(model: &Df11Model, case: &str) -> Result<Vec<bf16>, Df11Error> {
    let unit = model
        .unit(UNIT)
        .unwrap_or_else(|| panic!("{case}: no unit {UNIT}"));
    catch_unwind(AssertUnwindSafe(|| model.decode_unit(unit)))
        .unwrap_or_else(|_| panic!("{case}: decode_unit panicked"))
}

/// The undamaged unit's decoded weights.
fn original_layer() -> Vec<bf16> {
    let m = Df11Model::open(fixture()).unwrap();
    m.decode_unit(m.unit(UNIT).unwrap()).unwrap()
}

fn is_index_defect(d: &UnitDefect) -> bool {
    matches!(d, UnitDefect::Stream(_) | UnitDefect::OutputPositions(_))
}

// ---------------------------------------------------------------------------------------------
// Files and folders.

#[test]
fn truncated_safetensors_file_is_a_safetensors_error() {
    let len = std::fs::metadata(fixture().join(UNIT_FILE)).unwrap().len() as usize;
    let header = {
        let b = std::fs::read(fixture().join(UNIT_FILE)).unwrap();
        u64::from_le_bytes(b[..8].try_into().unwrap()) as usize
    };
    for keep in [0, 5, 8, 8 + header / 2, 8 + header, len / 2, len - 1] {
        let case = format!("{UNIT_FILE} truncated to {keep} of {len} bytes");
        let c = copy_fixture();
        let path = c.dir.join(UNIT_FILE);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..keep]).unwrap();
        let err = open_err(&c.dir, &case);
        match &err {
            Df11Error::Safetensors { path, .. } => assert_eq!(file_name(path), UNIT_FILE),
            other => panic!("{case}: expected Safetensors, got {other:?}"),
        }
        assert_mentions(&err, &[UNIT_FILE], &case);
    }
}

#[test]
fn garbage_safetensors_header_is_a_safetensors_error() {
    let c = copy_fixture();
    let path = c.dir.join("model.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[9] = b'!'; // inside the JSON header
    std::fs::write(&path, &bytes).unwrap();
    let err = open_err(&c.dir, "garbage header");
    assert!(matches!(err, Df11Error::Safetensors { .. }), "{err:?}");
    assert_mentions(&err, &["model.safetensors"], "garbage header");
}

#[test]
fn legacy_pickle_repos_are_refused() {
    // A 0.1.0 repo: a config of only `dfloat11_version`, and pickled units.
    let tmp = common::temp_dir();
    let dir = tmp.path().join("legacy-repo");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"dfloat11_version": "0.1.0"}"#).unwrap();
    std::fs::write(dir.join("layer_0.pkl"), b"\x80\x04\x95 not really a pickle").unwrap();
    let err = open_err(&dir, "legacy repo");
    assert!(matches!(err, Df11Error::LegacyPickle { .. }), "{err:?}");
    assert_mentions(&err, &["legacy-repo", "0.1.0"], "legacy repo");

    // The same config alone is refused the same way.
    std::fs::remove_file(dir.join("layer_0.pkl")).unwrap();
    let err = open_err(&dir, "legacy config");
    assert!(matches!(err, Df11Error::LegacyPickle { .. }), "{err:?}");

    // Only pickle files, no config.json.
    let dir = tmp.path().join("only-pickles");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..3 {
        std::fs::write(dir.join(format!("layer_{i}.pkl")), b"\x80\x04").unwrap();
    }
    let err = open_err(&dir, "only pickles");
    assert!(matches!(err, Df11Error::LegacyPickle { .. }), "{err:?}");
    assert_mentions(&err, &["only-pickles"], "only pickles");
}

#[test]
fn plain_bf16_folder_is_not_df11() {
    let dir = common::model_dir("qwen3-tiny", "bf16");
    let err = open_err(&dir, "bf16 folder");
    match &err {
        Df11Error::NotDf11 { path } => assert_eq!(file_name(path), "config.json"),
        other => panic!("expected NotDf11, got {other:?}"),
    }
    assert_mentions(&err, &["bf16", "config.json"], "bf16 folder");
}

#[test]
fn missing_folder_or_config_is_not_a_model() {
    let tmp = common::temp_dir();
    let missing = tmp.path().join("no-such-folder");
    let err = open_err(&missing, "missing folder");
    assert!(matches!(err, Df11Error::NotAModel { .. }), "{err:?}");
    assert_mentions(&err, &["no-such-folder"], "missing folder");

    let file = tmp.path().join("a-file.json");
    std::fs::write(&file, "{}").unwrap();
    let err = open_err(&file, "a file");
    assert!(matches!(err, Df11Error::NotAModel { .. }), "{err:?}");
    assert_mentions(&err, &["a-file.json"], "a file");

    let empty = tmp.path().join("empty-folder");
    std::fs::create_dir(&empty).unwrap();
    let err = open_err(&empty, "empty folder");
    assert!(matches!(err, Df11Error::NotAModel { .. }), "{err:?}");
    assert_mentions(&err, &["empty-folder", "config.json"], "empty folder");

    // The DF11 folder without its config.json.
    let c = copy_fixture();
    std::fs::remove_file(c.dir.join("config.json")).unwrap();
    let err = open_err(&c.dir, "no config.json");
    assert!(matches!(err, Df11Error::NotAModel { .. }), "{err:?}");
    assert_mentions(&err, &["df11", "config.json"], "no config.json");

    // A config but no safetensors files.
    let c = copy_fixture();
    for e in std::fs::read_dir(&c.dir).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "safetensors") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let err = open_err(&c.dir, "no safetensors");
    assert!(matches!(err, Df11Error::NotAModel { .. }), "{err:?}");
    assert_mentions(&err, &["df11", "safetensors"], "no safetensors");
}

#[test]
fn unknown_version_opens_with_a_warning() {
    let c = copy_fixture();
    edit_config(&c.dir, |v| v["dfloat11_config"]["version"] = "0.9.7".into());
    let model = open_ok(&c.dir, "unknown version");
    assert_eq!(model.warnings().len(), 1, "{:?}", model.warnings());
    let w = &model.warnings()[0];
    assert!(w.contains("0.9.7") && w.contains("config.json"), "{w}");
    // The format has not changed: the units still decode exactly.
    let decoded = decode_layer(&model, "unknown version").unwrap();
    assert!(decoded == original_layer());

    // The known versions open without a warning.
    for v in ["0.2.0", "0.3.1", "0.5.0"] {
        let c = copy_fixture();
        edit_config(&c.dir, |j| j["dfloat11_config"]["version"] = v.into());
        assert!(open_ok(&c.dir, v).warnings().is_empty(), "{v}");
    }
}

#[test]
fn bad_dfloat11_config_is_invalid_config() {
    let cases: Vec<(&str, ConfigEdit)> = vec![
        (
            "threads_per_block [256]",
            Box::new(|v| v["dfloat11_config"]["threads_per_block"] = serde_json::json!([256])),
        ),
        (
            "threads_per_block [512, 512]",
            Box::new(|v| v["dfloat11_config"]["threads_per_block"] = serde_json::json!([512, 512])),
        ),
        (
            "threads_per_block missing",
            Box::new(|v| {
                v["dfloat11_config"]
                    .as_object_mut()
                    .unwrap()
                    .remove("threads_per_block");
            }),
        ),
        (
            "bytes_per_thread 4",
            Box::new(|v| v["dfloat11_config"]["bytes_per_thread"] = 4.into()),
        ),
        (
            "pattern_dict with a bad regex",
            Box::new(|v| {
                v["dfloat11_config"]["pattern_dict"]["model.layers.(\\d+"] = serde_json::json!([])
            }),
        ),
        (
            "pattern_dict empty",
            Box::new(|v| v["dfloat11_config"]["pattern_dict"] = serde_json::json!({})),
        ),
        (
            "pattern_dict members not strings",
            Box::new(|v| v["dfloat11_config"]["pattern_dict"]["lm_head"] = serde_json::json!([1])),
        ),
        (
            "dfloat11_config not an object",
            Box::new(|v| v["dfloat11_config"] = serde_json::json!([512])),
        ),
    ];
    for (case, edit) in cases {
        let c = copy_fixture();
        edit_config(&c.dir, edit);
        let err = open_err(&c.dir, case);
        match &err {
            Df11Error::InvalidConfig { path, .. } => assert_eq!(file_name(path), "config.json"),
            other => panic!("{case}: expected InvalidConfig, got {other:?}"),
        }
        assert_mentions(&err, &["config.json"], case);
    }

    // A config.json that is not JSON.
    let c = copy_fixture();
    std::fs::write(c.dir.join("config.json"), "{\"dfloat11_config\": ").unwrap();
    let err = open_err(&c.dir, "broken JSON");
    assert!(matches!(err, Df11Error::Json { .. }), "{err:?}");
    assert_mentions(&err, &["config.json"], "broken JSON");
}

#[test]
fn same_tensor_in_two_files_is_a_duplicate() {
    // A plain tensor copied into a second file.
    let c = copy_fixture();
    let (tensors, _) = read_tensors(&c.dir.join("model.safetensors"));
    let norm: Vec<Tensor> = tensors
        .into_iter()
        .filter(|t| t.name == "model.norm.weight")
        .collect();
    assert_eq!(norm.len(), 1);
    write_tensors(&c.dir.join("extra.safetensors"), &norm, None);
    let err = open_err(&c.dir, "plain duplicate");
    match &err {
        Df11Error::DuplicateTensor {
            tensor,
            first,
            second,
        } => {
            assert_eq!(tensor, "model.norm.weight");
            let mut files = [file_name(first), file_name(second)];
            files.sort();
            assert_eq!(files, ["extra.safetensors", "model.safetensors"]);
        }
        other => panic!("expected DuplicateTensor, got {other:?}"),
    }
    assert_mentions(
        &err,
        &[
            "model.norm.weight",
            "extra.safetensors",
            "model.safetensors",
        ],
        "plain duplicate",
    );

    // A unit tensor copied into a second file.
    let c = copy_fixture();
    let (tensors, _) = read_tensors(&c.dir.join(UNIT_FILE));
    let luts: Vec<Tensor> = tensors
        .into_iter()
        .filter(|t| t.name == format!("{UNIT}.luts"))
        .collect();
    write_tensors(&c.dir.join("zz_copy.safetensors"), &luts, None);
    let err = open_err(&c.dir, "unit tensor duplicate");
    assert!(matches!(err, Df11Error::DuplicateTensor { .. }), "{err:?}");
    assert_mentions(
        &err,
        &["model.layers.0.luts", UNIT_FILE, "zz_copy.safetensors"],
        "unit tensor duplicate",
    );

    // A compressed weight also stored plain.
    let c = copy_fixture();
    let q = format!("{UNIT}.self_attn.q_proj.weight");
    rewrite(&c.dir, "model.safetensors", |ts| {
        ts.push(Tensor {
            name: q.clone(),
            dtype: Dtype::BF16,
            shape: vec![128, 128],
            data: vec![0; 128 * 128 * 2],
        })
    });
    let err = open_err(&c.dir, "weight both compressed and plain");
    match &err {
        Df11Error::DuplicateTensor { tensor, .. } => assert_eq!(tensor, &q),
        other => panic!("expected DuplicateTensor, got {other:?}"),
    }
    assert_mentions(
        &err,
        &[&q, "model.safetensors", UNIT_FILE],
        "compressed and plain",
    );
}

// ---------------------------------------------------------------------------------------------
// Tensors of a unit: presence, dtype, shape.

#[test]
fn missing_unit_tensor() {
    for field in ["gaps", "encoded_exponent", "split_positions", "luts"] {
        let case = format!("{UNIT}.{field} dropped");
        let c = copy_fixture();
        let name = format!("{UNIT}.{field}");
        rewrite(&c.dir, UNIT_FILE, |ts| ts.retain(|t| t.name != name));
        let err = open_err(&c.dir, &case);
        match &err {
            Df11Error::MissingTensor { path, tensor } => {
                assert_eq!(tensor, &name, "{case}");
                assert_eq!(file_name(path), UNIT_FILE, "{case}: {err}");
            }
            other => panic!("{case}: expected MissingTensor, got {other:?}"),
        }
        assert_mentions(&err, &[&name, UNIT_FILE], &case);
    }
}

#[test]
fn wrong_dtypes() {
    let cases: [(&str, Dtype, Dtype); 4] = [
        ("sign_mantissa", Dtype::I8, Dtype::U8),
        ("encoded_exponent", Dtype::I8, Dtype::U8),
        ("output_positions", Dtype::U32, Dtype::U8),
        ("split_positions", Dtype::U64, Dtype::I64),
    ];
    for (field, to, expected) in cases {
        let case = format!("{field} as {to:?}");
        let c = copy_fixture();
        edit_field(&c.dir, field, |t| {
            t.dtype = to;
            let size = to.bitsize() / 8;
            let n = t.data.len() / size;
            t.data.truncate(n * size);
            t.shape = vec![n];
        });
        let err = open_err(&c.dir, &case);
        let name = format!("{UNIT}.{field}");
        match &err {
            Df11Error::WrongDtype {
                path,
                tensor,
                expected: e,
                found,
            } => {
                assert_eq!(tensor, &name, "{case}");
                assert_eq!(file_name(path), UNIT_FILE, "{case}");
                assert_eq!(e, &format!("{expected:?}"), "{case}");
                assert_eq!(found, &format!("{to:?}"), "{case}");
            }
            other => panic!("{case}: expected WrongDtype, got {other:?}"),
        }
        assert_mentions(&err, &[&name, UNIT_FILE], &case);
    }
}

#[test]
fn luts_with_a_wrong_shape() {
    let name = format!("{UNIT}.luts");
    let cases: [(&str, TensorEdit); 3] = [
        ("[K, 255]", |t| {
            let k = t.shape[0];
            t.data = t.data.chunks(256).flat_map(|r| r[..255].to_vec()).collect();
            t.shape = vec![k, 255];
        }),
        ("[K * 256]", |t| t.shape = vec![t.data.len()]),
        ("[K, 16, 16]", |t| t.shape = vec![t.shape[0], 16, 16]),
    ];
    for (case, edit) in cases {
        let c = copy_fixture();
        edit_field(&c.dir, "luts", edit);
        let err = open_err(&c.dir, case);
        match &err {
            Df11Error::WrongShape { path, tensor, .. } => {
                assert_eq!(tensor, &name, "{case}");
                assert_eq!(file_name(path), UNIT_FILE, "{case}");
            }
            other => panic!("{case}: expected WrongShape, got {other:?}"),
        }
        assert_mentions(&err, &[&name, UNIT_FILE], case);
    }
    // Other unit tensors must be 1-D.
    let c = copy_fixture();
    edit_field(&c.dir, "gaps", |t| t.shape = vec![t.data.len() / 2, 2]);
    let err = open_err(&c.dir, "2-D gaps");
    assert!(
        matches!(&err, Df11Error::WrongShape { tensor, .. } if tensor == "model.layers.0.gaps"),
        "{err:?}"
    );
    assert_mentions(&err, &["model.layers.0.gaps", UNIT_FILE], "2-D gaps");
}

// ---------------------------------------------------------------------------------------------
// Unit invariants checked at open (`UnitDefect`).

#[test]
fn luts_row_count_out_of_range() {
    for rows in [1usize, 19, 40] {
        let case = format!("luts with {rows} rows");
        let c = copy_fixture();
        edit_field(&c.dir, "luts", |t| {
            let k = t.shape[0];
            let lengths = t.data[(k - 1) * 256..].to_vec();
            if rows < k {
                t.data.truncate(rows * 256);
            } else {
                // Extra decode rows (copies of row 0) before the length row.
                let row0 = t.data[..256].to_vec();
                t.data.truncate((k - 1) * 256);
                while t.data.len() < (rows - 1) * 256 {
                    t.data.extend_from_slice(&row0);
                }
                t.data.extend_from_slice(&lengths);
            }
            t.shape = vec![rows, 256];
        });
        let err = open_err(&c.dir, &case);
        let d = unit_defect(&err, &case);
        assert!(matches!(d, UnitDefect::LutShape(_)), "{case}: {d:?}");
    }
}

#[test]
fn luts_pointer_to_a_missing_row() {
    let k = {
        let (ts, _) = read_tensors(&fixture().join(UNIT_FILE));
        ts.iter()
            .find(|t| t.name == format!("{UNIT}.luts"))
            .unwrap()
            .shape[0]
    };
    // 256 - (K - 1) points at the length row, 240 at row 16: neither is a decode row.
    for (row, index, value) in [
        (0usize, 0usize, (256 - (k - 1)) as u8),
        (0, 200, 240),
        (1, 255, 241),
    ] {
        let case = format!("luts[{row}][{index}] = {value} (K = {k})");
        let c = copy_fixture();
        edit_field(&c.dir, "luts", |t| t.data[row * 256 + index] = value);
        let err = open_err(&c.dir, &case);
        let d = unit_defect(&err, &case);
        assert_eq!(d, UnitDefect::LutPointer { row, index, value }, "{case}");
    }
}

#[test]
fn luts_symbol_with_a_bad_code_length() {
    let (ts, _) = read_tensors(&fixture().join(UNIT_FILE));
    let luts = &ts
        .iter()
        .find(|t| t.name == format!("{UNIT}.luts"))
        .unwrap()
        .data;
    let k = luts.len() / 256;
    let symbol = luts[0];
    assert!(symbol < 240 && luts[(k - 1) * 256 + symbol as usize] > 0);
    for length in [0u8, 33, 255] {
        let case = format!("symbol {symbol} with code length {length}");
        let c = copy_fixture();
        edit_field(&c.dir, "luts", |t| {
            t.data[(k - 1) * 256 + symbol as usize] = length
        });
        let err = open_err(&c.dir, &case);
        let d = unit_defect(&err, &case);
        assert_eq!(d, UnitDefect::LutCodeLength { symbol, length }, "{case}");
    }
}

#[test]
fn split_positions_not_increasing_or_miscounted() {
    let cases: [(&str, SplitEdit); 6] = [
        ("two entries swapped", |v, _| v.swap(1, 2)),
        ("a repeated entry", |v, _| v[3] = v[2]),
        ("a zero first entry", |v, _| v[0] = 0),
        ("a negative entry", |v, _| v[0] = -1),
        ("an entry at N", |v, n| *v.last_mut().unwrap() = n),
        ("one entry dropped", |v, _| {
            v.pop();
        }),
    ];
    for (case, edit) in cases {
        let c = copy_fixture();
        let n = original_layer().len() as i64;
        edit_field(&c.dir, "split_positions", |t| {
            let mut v = i64s(&t.data);
            edit(&mut v, n);
            t.data = i64_bytes(&v);
            t.shape = vec![v.len()];
        });
        let err = open_err(&c.dir, case);
        let d = unit_defect(&err, case);
        assert!(matches!(d, UnitDefect::SplitPositions(_)), "{case}: {d:?}");
    }
}

#[test]
fn gaps_too_short() {
    let c = copy_fixture();
    let mut expected = 0;
    edit_field(&c.dir, "gaps", |t| {
        expected = t.data.len();
        t.data.pop();
        t.shape = vec![t.data.len()];
    });
    let err = open_err(&c.dir, "gaps one byte short");
    let d = unit_defect(&err, "gaps one byte short");
    assert_eq!(
        d,
        UnitDefect::GapsLength {
            expected_at_least: expected,
            found: expected - 1
        }
    );
    assert_eq!(expected % 320, 0);
}

#[test]
fn empty_bitstream_is_a_size_defect() {
    let c = copy_fixture();
    edit_field(&c.dir, "encoded_exponent", |t| {
        t.data.clear();
        t.shape = vec![0];
    });
    let err = open_err(&c.dir, "empty encoded_exponent");
    let d = unit_defect(&err, "empty encoded_exponent");
    assert!(matches!(d, UnitDefect::Size(_)), "{d:?}");
}

#[test]
fn unit_matching_no_pattern() {
    let c = copy_fixture();
    rewrite(&c.dir, UNIT_FILE, |ts| {
        for t in ts.iter_mut() {
            if let Some(field) = t.name.strip_prefix(&format!("{UNIT}.")) {
                if df11_candle::unit::UNIT_FIELDS.contains(&field) {
                    t.name = format!("foo.bar.{field}");
                }
            }
        }
    });
    let err = open_err(&c.dir, "unit foo.bar");
    match &err {
        Df11Error::UnmatchedUnit { path, unit } => {
            assert_eq!(unit, "foo.bar");
            assert_eq!(file_name(path), UNIT_FILE);
        }
        other => panic!("expected UnmatchedUnit, got {other:?}"),
    }
    assert_mentions(&err, &["foo.bar", UNIT_FILE], "unit foo.bar");
}

#[test]
fn unit_matching_two_patterns() {
    let c = copy_fixture();
    edit_config(&c.dir, |v| {
        let dict = v["dfloat11_config"]["pattern_dict"]
            .as_object_mut()
            .unwrap();
        let members = dict["model.layers.\\d+"].clone();
        dict.insert("model\\.layers\\.0".into(), members);
    });
    let err = open_err(&c.dir, "ambiguous");
    match &err {
        Df11Error::AmbiguousUnit {
            path,
            unit,
            patterns,
        } => {
            assert_eq!(unit, UNIT);
            assert_eq!(file_name(path), UNIT_FILE);
            assert_eq!(patterns.len(), 2, "{patterns:?}");
        }
        other => panic!("expected AmbiguousUnit, got {other:?}"),
    }
    assert_mentions(&err, &[UNIT, UNIT_FILE], "ambiguous");
}

// ---------------------------------------------------------------------------------------------
// Index data and bitstream: caught at open or when decoding.

/// Flipping an `output_positions` entry is refused at open, or by the parallel decoder.
#[test]
fn flipped_output_positions() {
    let cases: [(&str, PositionsEdit); 7] = [
        ("first entry 1", |v| v[0] = 1),
        ("middle entry + 1", |v| v[3] += 1),
        ("middle entry - 1", |v| v[3] -= 1),
        ("middle entry byte flipped", |v| v[5] ^= 0x0100),
        ("decreasing", |v| v.swap(2, 3)),
        ("last entry - 1", |v| *v.last_mut().unwrap() -= 1),
        ("an entry dropped", |v| {
            v.remove(4);
        }),
    ];
    let original = original_layer();
    for (case, edit) in cases {
        let c = copy_fixture();
        edit_field(&c.dir, "output_positions", |t| {
            let mut v = u32s(&t.data);
            edit(&mut v);
            t.data = u32_bytes(&v);
            t.shape = vec![t.data.len()];
        });
        let d = match catch_unwind(|| Df11Model::open(&c.dir)) {
            Err(_) => panic!("{case}: open panicked"),
            Ok(Err(err)) => unit_defect(&err, case),
            Ok(Ok(model)) => {
                // The sequential decoder does not read output_positions: still exact.
                let unit = model.unit(UNIT).unwrap();
                let mut seq = vec![bf16::ZERO; unit.layout.n_elements];
                model.decode_unit_sequential_into(unit, &mut seq).unwrap();
                assert!(seq == original, "{case}");
                let err = decode_layer(&model, case).expect_err(case);
                unit_defect(&err, case)
            }
        };
        assert!(matches!(d, UnitDefect::OutputPositions(_)), "{case}: {d:?}");
    }
}

/// Where the first code of each 64-bit window starts is checked by the parallel decoder.
#[test]
fn flipped_gaps_are_caught_by_the_parallel_decoder() {
    let original = original_layer();
    // A byte in the middle of block 2, and one at a block start.
    for at in [2 * 320 + 100, 5 * 320] {
        let case = format!("gaps[{at}] flipped");
        let c = copy_fixture();
        edit_field(&c.dir, "gaps", |t| t.data[at] ^= 0xFF);
        let model = open_ok(&c.dir, &case);
        let err = decode_layer(&model, &case).expect_err(&case);
        let d = unit_defect(&err, &case);
        assert!(is_index_defect(&d), "{case}: {d:?}");
        // The sequential decoder ignores gaps.
        let unit = model.unit(UNIT).unwrap();
        let mut seq = vec![bf16::ZERO; unit.layout.n_elements];
        model.decode_unit_sequential_into(unit, &mut seq).unwrap();
        assert!(seq == original, "{case}");
    }
}

/// An owned copy of a unit's six tensors.
#[derive(Clone)]
struct OwnedUnit {
    encoded_exponent: Vec<u8>,
    sign_mantissa: Vec<u8>,
    luts: Vec<u8>,
    gaps: Vec<u8>,
    output_positions: Vec<u8>,
    split_positions: Vec<u8>,
}

impl OwnedUnit {
    fn of(t: &UnitTensors<'_>) -> Self {
        Self {
            encoded_exponent: t.encoded_exponent.to_vec(),
            sign_mantissa: t.sign_mantissa.to_vec(),
            luts: t.luts.to_vec(),
            gaps: t.gaps.to_vec(),
            output_positions: t.output_positions.to_vec(),
            split_positions: t.split_positions.to_vec(),
        }
    }

    fn tensors(&self) -> UnitTensors<'_> {
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
struct Reference {
    name: String,
    unit: OwnedUnit,
    decoded: Vec<bf16>,
    code_starts: Vec<u64>,
}

fn references() -> Vec<Reference> {
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
type Decoded = (Result<Vec<bf16>, UnitDefect>, Result<Vec<bf16>, UnitDefect>);

fn decode_both(u: &OwnedUnit, case: &str) -> Result<Decoded, UnitDefect> {
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

/// Random flips of single `gaps` bytes inside the windows the codes use are always caught by
/// the parallel decoder; the sequential decoder ignores them.
#[test]
fn random_gaps_flips_are_always_caught() {
    let (seed, mut rng) = seeded("random_gaps_flips_are_always_caught");
    for r in references() {
        // The last window holding a code start; later windows (EOF tail, padding) are unused.
        let last_start = r.code_starts[r.code_starts.len() - 2];
        let last_window = (last_start / 64) as usize;
        // Bytes whose 8 bits all belong to windows 0..=last_window.
        let max_byte = (5 * (last_window + 1) - 8) / 8;
        let mut bytes: Vec<usize> = vec![0, 1, max_byte];
        bytes.extend((0..60).map(|_| rng.gen_range(0..=max_byte)));
        for at in bytes {
            let mask: u8 = rng.gen_range(1..=255);
            let case = format!("seed {seed}: {}: gaps[{at}] ^= {mask:#04x}", r.name);
            let mut u = r.unit.clone();
            u.gaps[at] ^= mask;
            let (par, seq) = decode_both(&u, &case).unwrap_or_else(|d| panic!("{case}: {d}"));
            match par {
                Ok(_) => panic!("{case}: damaged gaps decoded without error"),
                Err(d) => assert!(is_index_defect(&d), "{case}: {d:?}"),
            }
            assert!(
                seq.unwrap() == r.decoded,
                "{case}: the sequential decoder read gaps"
            );
        }
        // Bits of window 0: the first code starts at bit 0.
        for g in 1..32u8 {
            let case = format!("{}: window 0 gap {g}", r.name);
            let mut u = r.unit.clone();
            u.gaps[0] = (u.gaps[0] & 0x07) | (g << 3);
            let (par, _) = decode_both(&u, &case).unwrap();
            assert!(
                matches!(&par, Err(d) if is_index_defect(d)),
                "{case}: {:?}",
                par.map(|v| v == r.decoded)
            );
        }
    }
}

/// Random flips of `output_positions` bytes are refused at validation or by the parallel
/// decoder.
#[test]
fn random_output_positions_flips_are_always_caught() {
    let (seed, mut rng) = seeded("random_output_positions_flips_are_always_caught");
    for r in references() {
        for _ in 0..60 {
            let at = rng.gen_range(0..r.unit.output_positions.len());
            let mask: u8 = rng.gen_range(1..=255);
            let case = format!(
                "seed {seed}: {}: output_positions[{at}] ^= {mask:#04x}",
                r.name
            );
            let mut u = r.unit.clone();
            u.output_positions[at] ^= mask;
            match decode_both(&u, &case) {
                Err(d) => assert!(matches!(d, UnitDefect::OutputPositions(_)), "{case}: {d:?}"),
                Ok((par, seq)) => {
                    assert!(
                        matches!(&par, Err(UnitDefect::OutputPositions(_))),
                        "{case}: {:?}",
                        par.map(|v| v == r.decoded)
                    );
                    assert!(seq.unwrap() == r.decoded, "{case}");
                }
            }
        }
    }
}

/// A corrupted bitstream never panics; decoding fails with a unit defect, or succeeds with
/// output that differs from the original only from the first damaged code on (and, for the
/// parallel decoder, only within the damaged block).
#[test]
fn corrupted_bitstream_never_panics() {
    let (seed, mut rng) = seeded("corrupted_bitstream_never_panics");
    let mut outcomes = [0usize; 3]; // parallel: error, ok-and-different, ok-and-equal
    for r in references() {
        let layout = UnitLayout::validate(&r.unit.tensors()).unwrap();
        let n_bytes = r.unit.encoded_exponent.len();
        for trial in 0..150 {
            let at = rng.gen_range(0..n_bytes);
            let mask: u8 = rng.gen_range(1..=255);
            let case = format!(
                "seed {seed}: {}: trial {trial}: encoded_exponent[{at}] ^= {mask:#04x}",
                r.name
            );
            let mut u = r.unit.clone();
            u.encoded_exponent[at] ^= mask;
            let (par, seq) = decode_both(&u, &case).unwrap_or_else(|d| panic!("{case}: {d}"));
            // The first element whose code reaches into the damaged byte.
            let first = r.code_starts[1..].partition_point(|&end| end <= 8 * at as u64);
            let differs = |v: &[bf16]| -> Option<(usize, usize)> {
                let d: Vec<usize> = (0..v.len()).filter(|&i| v[i] != r.decoded[i]).collect();
                Some((*d.first()?, *d.last()?))
            };
            match &par {
                Err(d) => {
                    assert!(is_index_defect(d), "{case}: {d:?}");
                    outcomes[0] += 1;
                }
                Ok(v) => match differs(v) {
                    None => outcomes[2] += 1,
                    Some((lo, hi)) => {
                        outcomes[1] += 1;
                        let block = at / 4096;
                        let end = layout.output_positions[block + 1] as usize;
                        assert!(
                            lo >= first && hi < end,
                            "{case}: elements {lo}..={hi} differ, damage covers {first}..{end}"
                        );
                    }
                },
            }
            match &seq {
                Err(d) => assert!(matches!(d, UnitDefect::Stream(_)), "{case}: {d:?}"),
                Ok(v) => {
                    if let Some((lo, _)) = differs(v) {
                        assert!(
                            lo >= first,
                            "{case}: element {lo} differs, damage from {first}"
                        );
                    }
                }
            }
        }
        // Several flips at once, and a zeroed or 0xFF-filled stretch.
        for trial in 0..40 {
            let mut u = r.unit.clone();
            let what = match trial % 3 {
                0 => {
                    for _ in 0..rng.gen_range(2..20) {
                        let at = rng.gen_range(0..n_bytes);
                        u.encoded_exponent[at] ^= rng.gen_range(1..=255u8);
                    }
                    "several flips".to_string()
                }
                _ => {
                    let a = rng.gen_range(0..n_bytes);
                    let b = (a + rng.gen_range(1..600)).min(n_bytes);
                    let fill = if trial % 3 == 1 { 0 } else { 0xFF };
                    u.encoded_exponent[a..b].fill(fill);
                    format!("bytes {a}..{b} set to {fill:#04x}")
                }
            };
            let case = format!("seed {seed}: {}: {what}", r.name);
            let (par, seq) = decode_both(&u, &case).unwrap_or_else(|d| panic!("{case}: {d}"));
            for (which, res) in [("parallel", par), ("sequential", seq)] {
                if let Err(d) = res {
                    assert!(is_index_defect(&d), "{case}: {which}: {d:?}");
                }
            }
        }
    }
    eprintln!("seed {seed}: parallel decoder outcomes (error, ok but different, ok and equal): {outcomes:?}");
    assert!(
        outcomes[0] > 0,
        "seed {seed}: no corruption was detected at all"
    );
}

/// Damage in the folder itself: a flipped and a truncated bitstream.
#[test]
fn corrupted_bitstream_in_a_folder() {
    let original = original_layer();
    // Flip a byte in the middle of the stream.
    let c = copy_fixture();
    edit_field(&c.dir, "encoded_exponent", |t| t.data[10_000] ^= 0x5A);
    let model = open_ok(&c.dir, "flipped stream");
    match decode_layer(&model, "flipped stream") {
        Err(err) => {
            let d = unit_defect(&err, "flipped stream");
            assert!(is_index_defect(&d), "{d:?}");
        }
        Ok(v) => assert_eq!(v.len(), original.len()),
    }

    // Cut the last bytes off the stream: refused at open when the block count changes,
    // otherwise when the codes run past the end.
    for cut in [1usize, 3, 100] {
        let case = format!("stream cut by {cut} bytes");
        let c = copy_fixture();
        edit_field(&c.dir, "encoded_exponent", |t| {
            t.data.truncate(t.data.len() - cut);
            t.shape = vec![t.data.len()];
        });
        let d = match catch_unwind(|| Df11Model::open(&c.dir)) {
            Err(_) => panic!("{case}: open panicked"),
            Ok(Err(err)) => unit_defect(&err, &case),
            Ok(Ok(model)) => unit_defect(&decode_layer(&model, &case).expect_err(&case), &case),
        };
        assert!(is_index_defect(&d), "{case}: {d:?}");
    }
}

/// A model whose original has other member sizes is refused by verify with `MemberSizes`.
#[test]
fn member_sizes_that_do_not_tile_the_unit() {
    let tmp = common::temp_dir();
    let bf16_dir = tmp.path().join("bf16");
    std::fs::create_dir(&bf16_dir).unwrap();
    for e in std::fs::read_dir(common::model_dir("qwen3-tiny", "bf16"))
        .unwrap()
        .flatten()
    {
        std::fs::copy(e.path(), bf16_dir.join(e.file_name())).unwrap();
    }
    rewrite(&bf16_dir, "model.safetensors", |ts| {
        let q = ts
            .iter_mut()
            .find(|t| t.name == "model.layers.0.self_attn.q_proj.weight")
            .unwrap();
        q.shape[0] -= 1;
        q.data.truncate(q.shape.iter().product::<usize>() * 2);
    });
    let err = df11_candle::verify_model(&fixture(), &bf16_dir, |_| {}).expect_err("verify");
    let d = match &err {
        Df11Error::InvalidUnit { unit, path, defect } => {
            assert_eq!(unit, UNIT);
            assert_eq!(file_name(path), UNIT_FILE);
            defect.clone()
        }
        other => panic!("expected InvalidUnit, got {other:?}"),
    };
    assert!(matches!(d, UnitDefect::MemberSizes { .. }), "{d:?}");
    assert_mentions(&err, &[UNIT, UNIT_FILE], "member sizes");
}
