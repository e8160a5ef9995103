//! Where a FLUX pipeline's two parts come from: the DF11 transformer (a
//! `DFloat11/FLUX.1-*-DF11` repo) and the BF16 base repo (`black-forest-labs/FLUX.1-*`: text
//! encoders, tokenizers, VAE, scheduler and the transformer's config). Each is a local folder
//! or a Hub repo resolved through the standard Hugging Face cache by df11-llm's
//! [`ModelSource`] (`HF_HUB_CACHE` / `HF_HOME`, the token from `HF_TOKEN`, `HF_TOKEN_PATH` or
//! `HF_HOME/token`). Only the files the run needs are downloaded, and a folder is checked for
//! them before anything is loaded: a missing file is a [`FluxError::MissingFile`] naming the
//! repo and the file.

use std::path::{Path, PathBuf};

use df11_llm::{LlmError, ModelSource};

use crate::error::{FluxError, Result};

/// The DF11 transformer repo used when none is given.
pub const DEFAULT_MODEL_ID: &str = "DFloat11/FLUX.1-schnell-DF11";

/// The files of a DF11 transformer repo: `config.json`, the weights and their index.
pub const DF11_FILE_PATTERNS: [&str; 2] = ["*.json", "*.safetensors"];

/// The files of the base repo a run with the DF11 transformer needs: neither the repo's BF16
/// transformer weights nor its single-file checkpoints (`flux1-*.safetensors`,
/// `ae.safetensors`).
pub const BASE_FILE_PATTERNS: [&str; 8] = [
    "model_index.json",
    "scheduler/*",
    "text_encoder/*",
    "text_encoder_2/*",
    "tokenizer/*",
    "tokenizer_2/*",
    "vae/*",
    "transformer/config.json",
];

/// The BF16 transformer of the base repo, added to [`BASE_FILE_PATTERNS`] to run it (`--bf16`).
pub const BASE_TRANSFORMER_PATTERN: &str = "transformer/*";

/// The base repo of a DFloat11 FLUX repo: `DFloat11/FLUX.1-<variant>-DF11` ->
/// `black-forest-labs/FLUX.1-<variant>`; `None` for other repos.
pub fn default_base_id(model_id: &str) -> Option<String> {
    let (owner, name) = model_id.split_once('/')?;
    let stem = name.strip_suffix("-DF11")?;
    (owner.eq_ignore_ascii_case("DFloat11") && stem.starts_with("FLUX.1-") && stem.len() > 7)
        .then(|| format!("black-forest-labs/{stem}"))
}

/// The flags that name the two parts (the binary's `--model-id`, `--base-dir`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceOptions {
    /// The DF11 transformer repo [default: [`DEFAULT_MODEL_ID`]].
    pub model_id: Option<String>,
    /// Its branch, tag or commit [default: main].
    pub revision: Option<String>,
    /// A local DF11 transformer folder instead of the repo.
    pub model_dir: Option<PathBuf>,
    /// The base repo [default: [`default_base_id`] of the DF11 repo].
    pub base_id: Option<String>,
    /// Its branch, tag or commit [default: main].
    pub base_revision: Option<String>,
    /// A local base folder instead of the repo.
    pub base_dir: Option<PathBuf>,
    /// Use only the Hugging Face cache; never touch the network.
    pub offline: bool,
    /// The cache folder [default: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
    /// `~/.cache/huggingface/hub`].
    pub cache_dir: Option<PathBuf>,
}

/// Where the two parts are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FluxSources {
    /// The DF11 transformer.
    pub model: ModelSource,
    /// The base repo.
    pub base: ModelSource,
}

/// The local folders of a resolved pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedFolders {
    /// The DF11 transformer folder (`None` when the base repo's BF16 transformer runs).
    pub df11: Option<PathBuf>,
    /// The base folder.
    pub base: PathBuf,
}

impl SourceOptions {
    /// The sources these flags name; a usage error when the base repo cannot be told.
    pub fn sources(&self) -> Result<FluxSources> {
        let hub = |repo: String, revision: &Option<String>| ModelSource::Hub {
            repo,
            revision: revision.clone(),
            offline: self.offline,
            cache_dir: self.cache_dir.clone(),
        };
        let model_id = self
            .model_id
            .clone()
            .unwrap_or_else(|| DEFAULT_MODEL_ID.to_string());
        let model = match &self.model_dir {
            Some(dir) => ModelSource::Local(dir.clone()),
            None => hub(model_id.clone(), &self.revision),
        };
        let base =
            match (&self.base_dir, &self.base_id) {
                (Some(dir), _) => ModelSource::Local(dir.clone()),
                (None, Some(id)) => hub(id.clone(), &self.base_revision),
                (None, None) if self.model_dir.is_some() => return Err(FluxError::Usage(
                    "--model-dir needs the base pipeline too: give --base-dir (a local folder) \
                     or --base-id (a Hub repo such as black-forest-labs/FLUX.1-schnell)"
                        .into(),
                )),
                (None, None) => match default_base_id(&model_id) {
                    Some(id) => hub(id, &self.base_revision),
                    None => {
                        return Err(FluxError::Usage(format!(
                            "no known base repo for `{model_id}`: give --base-id (e.g. \
                         black-forest-labs/FLUX.1-dev) or --base-dir"
                        )))
                    }
                },
            };
        Ok(FluxSources { model, base })
    }
}

impl FluxSources {
    /// The local folders, downloading what is missing from the cache (unless offline), and
    /// checked for every file the run needs. `bf16`: the base repo's BF16 transformer runs
    /// (the DF11 repo is neither resolved nor needed). `show_progress` draws download bars.
    pub fn resolve(&self, bf16: bool, show_progress: bool) -> Result<ResolvedFolders> {
        let df11 = if bf16 {
            None
        } else {
            let dir = resolve(&self.model, &DF11_FILE_PATTERNS, show_progress)?;
            check_df11_folder(&dir, &source_name(&self.model))?;
            Some(dir)
        };
        let mut patterns = BASE_FILE_PATTERNS.to_vec();
        if bf16 {
            patterns.push(BASE_TRANSFORMER_PATTERN);
        }
        let base = resolve(&self.base, &patterns, show_progress)?;
        check_base_folder(&base, &source_name(&self.base), bf16)?;
        Ok(ResolvedFolders { df11, base })
    }
}

/// The folder of `source`, the Hub's refusals told apart (gated repos).
fn resolve(source: &ModelSource, patterns: &[&str], show_progress: bool) -> Result<PathBuf> {
    source
        .resolve_files(patterns, show_progress)
        .map_err(|e| match (e, source) {
            (LlmError::Hub(hub), ModelSource::Hub { repo, .. }) if refused(&hub) => {
                FluxError::HubAccess {
                    repo: repo.clone(),
                    source: Box::new(LlmError::Hub(hub)),
                }
            }
            (e, _) => e.into(),
        })
}

/// Whether the Hub refused access (no token, or a token without access to a gated repo).
fn refused(e: &hf_hub::HFError) -> bool {
    matches!(
        e,
        hf_hub::HFError::AuthRequired { .. } | hf_hub::HFError::Forbidden { .. }
    )
}

/// How errors name a source: `owner/name (revision r)` or the folder.
pub fn source_name(source: &ModelSource) -> String {
    match source {
        ModelSource::Local(dir) => dir.display().to_string(),
        ModelSource::Hub { repo, revision, .. } => {
            format!(
                "{repo} (revision {})",
                revision.as_deref().unwrap_or("main")
            )
        }
    }
}

/// Checks that the DF11 transformer folder `dir` (named `name` in errors) has `config.json`
/// and its weights (every shard its index lists, if it has one).
pub fn check_df11_folder(dir: &Path, name: &str) -> Result<()> {
    require(dir, name, "config.json")?;
    require_weights(dir, name, "")
}

/// Checks that the base folder `dir` (named `name` in errors) has every file a run reads:
/// the scheduler's and the transformer's configs, both text encoders, both tokenizers (CLIP's
/// as `tokenizer.json` or `vocab.json` + `merges.txt`) and the VAE; with `bf16` also the
/// transformer's weights.
pub fn check_base_folder(dir: &Path, name: &str, bf16: bool) -> Result<()> {
    for file in [
        "scheduler/scheduler_config.json",
        "transformer/config.json",
        "text_encoder/config.json",
        "text_encoder_2/config.json",
        "tokenizer_2/tokenizer.json",
        "vae/config.json",
    ] {
        require(dir, name, file)?;
    }
    if !dir.join("tokenizer/tokenizer.json").is_file() {
        require(dir, name, "tokenizer/vocab.json")?;
        require(dir, name, "tokenizer/merges.txt")?;
    }
    for sub in ["text_encoder", "text_encoder_2", "vae"] {
        require_weights(dir, name, sub)?;
    }
    if bf16 {
        require_weights(dir, name, "transformer")?;
    }
    Ok(())
}

fn missing(dir: &Path, name: &str, file: &str) -> FluxError {
    FluxError::MissingFile {
        source_name: name.to_string(),
        dir: dir.to_path_buf(),
        file: file.to_string(),
    }
}

fn require(dir: &Path, name: &str, file: &str) -> Result<()> {
    if dir.join(file).is_file() {
        Ok(())
    } else {
        Err(missing(dir, name, file))
    }
}

/// The folder `dir/sub` has safetensors weights: every shard listed by its
/// `*.safetensors.index.json`, or at least one `*.safetensors` file.
fn require_weights(dir: &Path, name: &str, sub: &str) -> Result<()> {
    let folder = dir.join(sub);
    let in_sub = |file: &str| {
        if sub.is_empty() {
            file.to_string()
        } else {
            format!("{sub}/{file}")
        }
    };
    let files: Vec<String> = std::fs::read_dir(&folder)
        .map_err(|_| missing(dir, name, &in_sub("")))?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    let mut any = false;
    for index in files
        .iter()
        .filter(|f| f.ends_with(".safetensors.index.json"))
    {
        let path = folder.join(index);
        let text =
            std::fs::read_to_string(&path).map_err(|e| FluxError::config(&path, e.to_string()))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| FluxError::config(&path, e.to_string()))?;
        let map = value
            .get("weight_map")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| FluxError::config(&path, "no `weight_map` object"))?;
        for shard in map.values() {
            let shard = shard.as_str().ok_or_else(|| {
                FluxError::config(&path, "a `weight_map` value is not a file name")
            })?;
            require(dir, name, &in_sub(shard))?;
            any = true;
        }
    }
    if any || files.iter().any(|f| f.ends_with(".safetensors")) {
        Ok(())
    } else {
        Err(missing(dir, name, &in_sub("*.safetensors")))
    }
}
