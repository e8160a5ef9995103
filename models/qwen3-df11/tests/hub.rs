//! Hub resolution through a hand-made Hugging Face cache folder (no network):
//! `models--{owner}--{name}/{refs/<rev>, snapshots/<commit>/…}`.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use df11_llm::testing::{comparable_greedy, ids, model_dir, reference};
use df11_llm::{
    generate, load, GenerationParams, LlmError, LoadOptions, ModelSource, SamplingParams,
};
use qwen3_df11::Qwen3Arch;

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// A cache holding `org/qwen3-tiny-df11` at `COMMIT`, with `refs/main` and `refs/v1`.
fn fake_cache() -> (tempfile::TempDir, PathBuf) {
    let cache = tempfile::tempdir().unwrap();
    let repo = cache.path().join("models--org--qwen3-tiny-df11");
    let snapshot = repo.join("snapshots").join(COMMIT);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), COMMIT).unwrap();
    std::fs::write(repo.join("refs/v1"), format!("{COMMIT}\n")).unwrap();
    for entry in std::fs::read_dir(model_dir("qwen3-tiny", "df11")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), snapshot.join(entry.file_name())).unwrap();
    }
    (cache, snapshot)
}

fn hub(cache: &Path, repo: &str, revision: Option<&str>) -> ModelSource {
    ModelSource::Hub {
        repo: repo.into(),
        revision: revision.map(str::to_string),
        offline: true,
        cache_dir: Some(cache.to_path_buf()),
    }
}

#[test]
fn offline_resolution_by_branch_tag_and_commit() {
    let (cache, snapshot) = fake_cache();
    for rev in [None, Some("main"), Some("v1"), Some(COMMIT)] {
        let dir = hub(cache.path(), "org/qwen3-tiny-df11", rev)
            .resolve(false)
            .unwrap_or_else(|e| panic!("revision {rev:?}: {e}"));
        assert_eq!(dir, snapshot, "revision {rev:?}");
    }
}

#[test]
fn a_cached_model_loads_and_generates() {
    let (cache, _) = fake_cache();
    let r = reference("qwen3-tiny");
    let opts = LoadOptions {
        source: hub(cache.path(), "org/qwen3-tiny-df11", None),
        bf16: false,
        device: Device::Cpu,
        split: None,
        offload: Default::default(),
        dtype: DType::F32,
        show_progress: false,
        weights: Default::default(),
        decode: Default::default(),
    };
    let mut loaded = load::<Qwen3Arch>(&opts).unwrap_or_else(|e| panic!("{e}"));
    let want = comparable_greedy(&r, 1e-3);
    let params = GenerationParams {
        max_new_tokens: want.len(),
        eos_token_ids: Vec::new(),
        sampling: SamplingParams::greedy(),
    };
    let prompt = ids(&r["prompt_ids"]);
    let g = generate(
        &mut loaded.model,
        &loaded.tokenizer,
        &prompt,
        &params,
        &mut |_| Ok(()),
    )
    .unwrap();
    assert_eq!(g.generated_tokens, want);
}

#[test]
fn not_in_cache_is_a_typed_error() {
    let (cache, _) = fake_cache();
    for (repo, rev) in [
        ("org/other-model", None),
        ("org/qwen3-tiny-df11", Some("no-such-branch")),
        (
            "org/qwen3-tiny-df11",
            Some("fedcba9876543210fedcba9876543210fedcba98"),
        ),
    ] {
        match hub(cache.path(), repo, rev).resolve(false) {
            Err(LlmError::NotInCache {
                repo: r, cache: c, ..
            }) => {
                assert_eq!(r, repo);
                assert_eq!(c, cache.path());
            }
            other => panic!("{repo}@{rev:?}: expected NotInCache, got {other:?}"),
        }
    }
}

#[test]
fn malformed_model_id_is_a_usage_error() {
    let (cache, _) = fake_cache();
    let e = hub(cache.path(), "no-owner", None)
        .resolve(false)
        .unwrap_err();
    assert!(matches!(e, LlmError::Usage(_)), "{e:?}");
}
