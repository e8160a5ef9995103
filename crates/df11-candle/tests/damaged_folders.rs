//! Damaged model folders, files and configs: every validation rule reports its own error variant
//! and names the file (the other `damaged_*.rs` files damage the units).
//!
//! Each case copies `tests/fixtures/models/qwen3-tiny/df11` into a temporary folder and damages
//! one thing (helpers: `common/damage.rs`). Random trials draw a fresh seed per run, printed in
//! the assertion messages; replay one with `DF11_TEST_SEED=<seed>`.

mod common;

use common::damage::*;
use df11_candle::Df11Error;
use safetensors::Dtype;

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
fn unseen_version_of_the_format_opens_with_a_warning() {
    let c = copy_fixture();
    edit_config(&c.dir, |v| v["dfloat11_config"]["version"] = "0.4.1".into());
    let model = open_ok(&c.dir, "unseen version");
    assert_eq!(model.warnings().len(), 1, "{:?}", model.warnings());
    let w = &model.warnings()[0];
    assert!(w.contains("0.4.1") && w.contains("config.json"), "{w}");
    // The format has not changed: the units still decode exactly.
    let decoded = decode_layer(&model, "unseen version").unwrap();
    assert!(decoded == original_layer());

    // The known versions open without a warning.
    for v in ["0.2.0", "0.3.1", "0.5.0"] {
        let c = copy_fixture();
        edit_config(&c.dir, |j| j["dfloat11_config"]["version"] = v.into());
        assert!(open_ok(&c.dir, v).warnings().is_empty(), "{v}");
    }
}

#[test]
fn version_of_another_format_is_refused() {
    for v in [
        "9.9.9", "0.1.0", "0.6.0", "1.0.0", "0.5", "0.5.0.1", "", "v0.5.0", "0.5.x",
    ] {
        let c = copy_fixture();
        edit_config(&c.dir, |j| j["dfloat11_config"]["version"] = v.into());
        let case = format!("version `{v}`");
        let err = open_err(&c.dir, &case);
        match &err {
            Df11Error::UnsupportedVersion { path, version, .. } => {
                assert_eq!(file_name(path), "config.json", "{case}");
                assert_eq!(version, v, "{case}");
            }
            other => panic!("{case}: expected UnsupportedVersion, got {other:?}"),
        }
        assert_mentions(&err, &[&format!("`{v}`"), "0.2", "0.5"], &case);
    }
    // No version at all: the field is named.
    let c = copy_fixture();
    edit_config(&c.dir, |j| {
        j["dfloat11_config"]
            .as_object_mut()
            .unwrap()
            .remove("version");
    });
    let err = open_err(&c.dir, "no version");
    assert!(matches!(err, Df11Error::InvalidConfig { .. }), "{err:?}");
    assert_mentions(&err, &["dfloat11_config.version", "missing"], "no version");
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
