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
    /// The weights (a DF11 folder or a BF16 one) were refused.
    #[error(transparent)]
    Df11(#[from] df11_candle::Df11Error),
    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
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
