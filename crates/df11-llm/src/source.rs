//! Where a model comes from: a local folder, or a Hugging Face Hub repo resolved through the
//! standard HF cache (`models--{owner}--{name}/snapshots/<commit>/…`) with hf-hub.

use std::path::PathBuf;

use hf_hub::{HFClient, HFError};

use crate::error::{LlmError, Result};
use crate::progress::DownloadBar;

/// The files of a model repo that inference needs.
pub const MODEL_FILE_PATTERNS: [&str; 3] = ["*.json", "*.safetensors", "*.jinja"];

/// Where to find a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A local folder, used as is.
    Local(PathBuf),
    /// A Hub repo, through the HF cache.
    Hub {
        /// `owner/name`.
        repo: String,
        /// Branch, tag or commit; `main` when `None`.
        revision: Option<String>,
        /// Use only what is cached; never touch the network.
        offline: bool,
        /// The cache folder; the standard one (`HF_HUB_CACHE`, `HF_HOME/hub`, …) when `None`.
        cache_dir: Option<PathBuf>,
    },
}

impl ModelSource {
    /// The local folder holding the model: the folder itself, or the cached snapshot of the
    /// repo (downloaded first unless offline). `show_progress` draws a download bar.
    pub fn resolve(&self, show_progress: bool) -> Result<PathBuf> {
        self.resolve_files(&MODEL_FILE_PATTERNS, show_progress)
    }

    /// As [`Self::resolve`], downloading only the repo files that match `patterns` (globs over
    /// the paths in the repo, e.g. `vae/*`).
    pub fn resolve_files(&self, patterns: &[&str], show_progress: bool) -> Result<PathBuf> {
        match self {
            Self::Local(dir) => {
                if dir.is_dir() {
                    Ok(dir.clone())
                } else {
                    Err(LlmError::FolderNotFound { path: dir.clone() })
                }
            }
            Self::Hub {
                repo,
                revision,
                offline,
                cache_dir,
            } => resolve_hub(
                repo,
                revision.as_deref(),
                *offline,
                cache_dir.clone(),
                patterns,
                show_progress,
            ),
        }
    }
}

fn resolve_hub(
    repo_id: &str,
    revision: Option<&str>,
    offline: bool,
    cache_dir: Option<PathBuf>,
    patterns: &[&str],
    show_progress: bool,
) -> Result<PathBuf> {
    let cache = cache_dir.unwrap_or_else(hf_hub::resolve_cache_dir);
    let (owner, name) = hf_hub::split_id(repo_id);
    if owner.is_empty() || name.is_empty() {
        return Err(LlmError::Usage(format!(
            "model id `{repo_id}` is not of the form owner/name"
        )));
    }
    let client = HFClient::builder().cache_dir(cache.clone()).build_sync()?;
    let repo = client.model(owner, name);
    let not_in_cache = |e: HFError| match e {
        HFError::LocalEntryNotFound { path } => LlmError::NotInCache {
            repo: repo_id.to_string(),
            revision: revision.unwrap_or("main").to_string(),
            cache: cache.clone(),
            reason: format!("no {path}"),
        },
        other => LlmError::Hub(other),
    };
    let cached = || {
        repo.snapshot_download()
            .maybe_revision(revision.map(str::to_string))
            .local_files_only(true)
            .send()
            .map_err(not_in_cache)
    };
    if offline {
        return cached();
    }
    let bar = DownloadBar::new(repo_id, show_progress);
    let downloaded = repo
        .snapshot_download()
        .maybe_revision(revision.map(str::to_string))
        .allow_patterns(patterns.iter().map(|p| p.to_string()).collect())
        .progress(bar.handler())
        .send();
    bar.finish();
    match downloaded {
        Ok(dir) => Ok(dir),
        // The Hub is unreachable: use the cache if it has the model (as huggingface_hub does).
        Err(e) if hub_unreachable(&e) => cached().map_err(|cache_err| match cache_err {
            LlmError::NotInCache {
                repo,
                revision,
                cache,
                reason,
            } => LlmError::NotInCache {
                repo,
                revision,
                cache,
                reason: format!("{reason}, and the Hub is unreachable ({e})"),
            },
            other => other,
        }),
        Err(e) => Err(LlmError::Hub(e)),
    }
}

/// Whether a Hub error means the Hub could not be reached (connection, timeout, server error,
/// rate limit), as opposed to an answer such as "no such repo".
fn hub_unreachable(e: &HFError) -> bool {
    matches!(
        e,
        HFError::Request { .. } | HFError::Http { .. } | HFError::RateLimited { .. }
    )
}
