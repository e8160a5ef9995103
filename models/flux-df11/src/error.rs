//! [`FluxError`]: what loading or running the transformer can refuse, naming the file or field.

use std::path::{Path, PathBuf};

/// An error of this crate.
#[derive(Debug, thiserror::Error)]
pub enum FluxError {
    /// A config file could not be read or parsed, or holds a value the model cannot take.
    #[error("{path}: {reason}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the field.
        reason: String,
    },
    /// An input of the wrong shape or dtype.
    #[error("{0}")]
    Input(String),
    /// A file the pipeline needs is missing from a model folder or a cached Hub repo.
    #[error("{source_name}: missing `{file}` (in {dir})")]
    MissingFile {
        /// The repo (`owner/name (revision r)`) or the folder it was looked for in.
        source_name: String,
        /// The folder (for a Hub repo, its snapshot in the cache).
        dir: PathBuf,
        /// The file's path in the folder.
        file: String,
    },
    /// The Hub refused access to a repo (a gated one such as FLUX.1-dev without a token, or
    /// with a token whose account has not accepted the repo's license).
    #[error(
        "{repo}: the Hugging Face Hub refused access ({source}); FLUX.1-dev and FLUX.1-Krea-dev \
         are gated: accept the license on the repo's page and give a token (HF_TOKEN, or \
         `hf auth login`)"
    )]
    HubAccess {
        /// `owner/name`.
        repo: String,
        /// The Hub's answer.
        source: Box<df11_llm::LlmError>,
    },
    /// The weights do not fit the config (block counts).
    #[error("{dir}: {reason}")]
    Mismatch {
        /// The weights' folder.
        dir: PathBuf,
        /// What differs, naming the config field and the tensors.
        reason: String,
    },
    /// A usage error: flags that do not go together or name no repo.
    #[error("{0}")]
    Usage(String),
    /// Resolving a model source failed (a folder not found, a repo not in the Hugging Face
    /// cache, the Hub unreachable).
    #[error(transparent)]
    Source(Box<df11_llm::LlmError>),
    /// The weights (a DF11 folder or a BF16 one) were refused.
    #[error(transparent)]
    Df11(#[from] df11_candle::Df11Error),
    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

impl From<df11_llm::LlmError> for FluxError {
    fn from(e: df11_llm::LlmError) -> Self {
        Self::Source(Box::new(e))
    }
}

/// This crate's result.
pub type Result<T> = std::result::Result<T, FluxError>;

impl FluxError {
    /// A refusal of the config file `path`.
    pub(crate) fn config(path: &Path, reason: impl Into<String>) -> Self {
        Self::Config {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }
}

/// The JSON file `path` parsed into `T`; errors name the file.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| FluxError::config(path, e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| FluxError::config(path, e.to_string()))
}
