//! Hub resolution of the two repos through a Hugging Face cache folder laid out as hf-hub lays
//! it out (`models--{owner}--{name}/{blobs/, refs/<rev>, snapshots/<commit>/…}`, the snapshot
//! files linked to blobs), built from the fixture; no network.

mod common;

use std::path::{Path, PathBuf};

use df11_llm::{LlmError, ModelSource};
use flux_df11::source::{default_base_id, DEFAULT_MODEL_ID};
use flux_df11::{FluxError, SourceOptions};

use common::{BASE_COMMIT, BASE_ID, COMMIT, MODEL_ID};

use common::fake_cache;

fn offline(cache: &Path) -> SourceOptions {
    SourceOptions {
        model_id: Some(MODEL_ID.into()),
        offline: true,
        cache_dir: Some(cache.to_path_buf()),
        ..Default::default()
    }
}

#[test]
fn base_repos_follow_the_df11_repos() {
    for (model, base) in [
        ("DFloat11/FLUX.1-dev-DF11", "black-forest-labs/FLUX.1-dev"),
        (
            "DFloat11/FLUX.1-schnell-DF11",
            "black-forest-labs/FLUX.1-schnell",
        ),
        (
            "DFloat11/FLUX.1-Krea-dev-DF11",
            "black-forest-labs/FLUX.1-Krea-dev",
        ),
    ] {
        assert_eq!(default_base_id(model).as_deref(), Some(base));
    }
    for other in [
        "DFloat11/Qwen3-8B-DF11",
        "someone/FLUX.1-dev-DF11",
        "DFloat11/FLUX.1-dev",
        "DFloat11/FLUX.1--DF11",
        "no-owner",
    ] {
        assert_eq!(default_base_id(other), None, "{other}");
    }
    let sources = SourceOptions::default().sources().unwrap();
    match (&sources.model, &sources.base) {
        (ModelSource::Hub { repo: m, .. }, ModelSource::Hub { repo: b, .. }) => {
            assert_eq!(m, DEFAULT_MODEL_ID);
            assert_eq!(b, "black-forest-labs/FLUX.1-schnell");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn offline_resolution_by_branch_tag_and_commit() {
    let (cache, df11, base) = fake_cache();
    for (rev, base_rev) in [
        (None, None),
        (Some("v1"), Some("main")),
        (Some(COMMIT), Some(BASE_COMMIT)),
    ] {
        let options = SourceOptions {
            revision: rev.map(str::to_string),
            base_revision: base_rev.map(str::to_string),
            ..offline(cache.path())
        };
        let folders = options.sources().unwrap().resolve(false, false).unwrap();
        assert_eq!(folders.df11.as_deref(), Some(df11.as_path()), "{rev:?}");
        assert_eq!(folders.base, base, "{base_rev:?}");
    }
    // An explicit base repo, and local folders mixed with the cache.
    let options = SourceOptions {
        model_id: Some("DFloat11/other".into()),
        model_dir: Some(df11.clone()),
        base_id: Some(BASE_ID.into()),
        ..offline(cache.path())
    };
    let folders = options.sources().unwrap().resolve(false, false).unwrap();
    assert_eq!(folders.base, base);
    // The base repo's BF16 transformer: the DF11 repo is not needed.
    let options = SourceOptions {
        model_id: Some("DFloat11/FLUX.1-nothing-DF11".into()),
        base_id: Some(BASE_ID.into()),
        ..offline(cache.path())
    };
    let folders = options.sources().unwrap().resolve(true, false).unwrap();
    assert_eq!((folders.df11, folders.base), (None, base));
}

#[test]
fn repos_missing_from_the_cache_are_named() {
    let (cache, _, _) = fake_cache();
    let cases = [
        // No such DF11 repo (its base would be FLUX.1-other).
        (
            "DFloat11/FLUX.1-other-DF11",
            None,
            None,
            "DFloat11/FLUX.1-other-DF11",
        ),
        // The DF11 repo is cached, its base named explicitly is not.
        (
            MODEL_ID,
            Some("black-forest-labs/FLUX.1-dev"),
            None,
            "black-forest-labs/FLUX.1-dev",
        ),
        (MODEL_ID, None, Some("no-such-branch"), MODEL_ID),
    ];
    for (model, base, rev, want) in cases {
        let options = SourceOptions {
            model_id: Some(model.into()),
            base_id: base.map(str::to_string),
            revision: rev.map(str::to_string),
            ..offline(cache.path())
        };
        match options.sources().unwrap().resolve(false, false) {
            Err(FluxError::Source(e)) => match *e {
                LlmError::NotInCache { repo, cache: c, .. } => {
                    assert_eq!(repo, want);
                    assert_eq!(c, cache.path());
                }
                other => panic!("{model} / {base:?}: expected NotInCache, got {other:?}"),
            },
            other => panic!("{model} / {base:?}: expected NotInCache, got {other:?}"),
        }
    }
}

/// A change to the cached DF11 and base snapshots.
type Damage = Box<dyn FnOnce(&Path, &Path)>;

/// Resolves the fake cache after `damage` and returns the missing file's repo and path.
fn missing_after(bf16: bool, damage: impl FnOnce(&Path, &Path)) -> (String, String) {
    let (cache, df11, base) = fake_cache();
    damage(&df11, &base);
    match offline(cache.path())
        .sources()
        .unwrap()
        .resolve(bf16, false)
    {
        Err(e @ FluxError::MissingFile { .. }) => {
            let text = e.to_string();
            let FluxError::MissingFile {
                source_name, file, ..
            } = e
            else {
                unreachable!()
            };
            assert!(
                text.contains(&file) && text.contains(&source_name),
                "{text}"
            );
            (source_name, file)
        }
        other => panic!("expected MissingFile, got {other:?}"),
    }
}

/// Removes the file or folder `p`.
fn rm(p: PathBuf) {
    if p.is_dir() {
        std::fs::remove_dir_all(p).unwrap()
    } else {
        std::fs::remove_file(p).unwrap()
    }
}

#[test]
fn files_missing_from_a_cached_repo_are_named_with_the_repo() {
    let df11_repo = format!("{MODEL_ID} (revision main)");
    let base_repo = format!("{BASE_ID} (revision main)");
    let cases: Vec<(Damage, &str, &str)> = vec![
        (
            Box::new(|d, _| rm(d.join("config.json"))),
            &df11_repo,
            "config.json",
        ),
        (
            Box::new(|d, _| {
                for e in std::fs::read_dir(d).unwrap() {
                    let p = e.unwrap().path();
                    if p.extension().is_some_and(|x| x == "safetensors") {
                        rm(p);
                    }
                }
            }),
            &df11_repo,
            "*.safetensors",
        ),
        (
            Box::new(|_, b| rm(b.join("scheduler/scheduler_config.json"))),
            &base_repo,
            "scheduler/scheduler_config.json",
        ),
        (
            Box::new(|_, b| rm(b.join("vae"))),
            &base_repo,
            "vae/config.json",
        ),
        (
            Box::new(|_, b| rm(b.join("vae/diffusion_pytorch_model.safetensors"))),
            &base_repo,
            "vae/*.safetensors",
        ),
        (
            Box::new(|_, b| rm(b.join("transformer/config.json"))),
            &base_repo,
            "transformer/config.json",
        ),
        (
            Box::new(|_, b| rm(b.join("tokenizer_2/tokenizer.json"))),
            &base_repo,
            "tokenizer_2/tokenizer.json",
        ),
        // CLIP's tokenizer without tokenizer.json needs vocab.json and merges.txt.
        (
            Box::new(|_, b| {
                rm(b.join("tokenizer/tokenizer.json"));
                rm(b.join("tokenizer/merges.txt"));
            }),
            &base_repo,
            "tokenizer/merges.txt",
        ),
        (
            Box::new(|_, b| rm(b.join("text_encoder"))),
            &base_repo,
            "text_encoder/config.json",
        ),
        // A sharded text encoder whose index lists a shard that is not there.
        (
            Box::new(|_, b| {
                let index = r#"{"metadata": {}, "weight_map": {
                    "shared.weight": "model-00001-of-00002.safetensors",
                    "encoder.final_layer_norm.weight": "model-00002-of-00002.safetensors"}}"#;
                let dir = b.join("text_encoder_2");
                std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
                std::fs::copy(
                    dir.join("model.safetensors"),
                    dir.join("model-00001-of-00002.safetensors"),
                )
                .unwrap();
                rm(dir.join("model.safetensors"));
            }),
            &base_repo,
            "text_encoder_2/model-00002-of-00002.safetensors",
        ),
    ];
    for (damage, repo, file) in cases {
        assert_eq!(
            missing_after(false, damage),
            (repo.to_string(), file.to_string())
        );
    }
    // The BF16 transformer's weights are needed only to run it.
    let no_weights =
        |_: &Path, b: &Path| rm(b.join("transformer/diffusion_pytorch_model.safetensors"));
    assert_eq!(
        missing_after(true, no_weights),
        (base_repo.clone(), "transformer/*.safetensors".to_string())
    );
}

#[test]
fn flags_that_name_no_base_are_usage_errors() {
    let local_without_base = SourceOptions {
        model_dir: Some("/models/flux-df11".into()),
        ..Default::default()
    };
    let unknown_repo = SourceOptions {
        model_id: Some("someone/my-flux-df11".into()),
        ..Default::default()
    };
    for options in [local_without_base, unknown_repo] {
        match options.sources() {
            Err(FluxError::Usage(text)) => assert!(text.contains("--base-"), "{text}"),
            other => panic!("{options:?}: expected a usage error, got {other:?}"),
        }
    }
}
