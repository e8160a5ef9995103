//! Progress bars on stderr (indicatif): one for Hub downloads, one for loading a model's layers.
//! Both are hidden when asked to be, and indicatif hides them when stderr is not a terminal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hf_hub::progress::{DownloadEvent, Progress, ProgressEvent, ProgressHandler};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

fn bar(len: u64, visible: bool, template: &str) -> ProgressBar {
    let target = if visible {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(len), target);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// A byte bar fed by hf-hub's download events.
pub struct DownloadBar {
    state: Arc<DownloadState>,
}

struct DownloadState {
    bar: ProgressBar,
    files: Mutex<HashMap<String, u64>>,
}

impl DownloadBar {
    /// A bar for downloading `repo`.
    pub fn new(repo: &str, visible: bool) -> Self {
        let bar = bar(
            0,
            visible,
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
        );
        bar.set_message(format!("downloading {repo}"));
        Self {
            state: Arc::new(DownloadState {
                bar,
                files: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The handler to pass to hf-hub.
    pub fn handler(&self) -> Progress {
        Progress::from(self.state.clone())
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.state.bar.finish_and_clear();
    }
}

impl ProgressHandler for DownloadState {
    fn on_progress(&self, event: &ProgressEvent) {
        let ProgressEvent::Download(event) = event else {
            return;
        };
        match event {
            DownloadEvent::Start { total_bytes, .. } => self.bar.set_length(*total_bytes),
            DownloadEvent::Progress { files } => {
                let mut seen = self.files.lock().unwrap_or_else(|e| e.into_inner());
                for f in files {
                    seen.insert(f.filename.clone(), f.bytes_completed);
                }
                let done: u64 = seen.values().sum();
                if done > self.bar.position() {
                    self.bar.set_position(done);
                }
            }
            DownloadEvent::AggregateProgress {
                bytes_completed, ..
            } => {
                if *bytes_completed > self.bar.position() {
                    self.bar.set_position(*bytes_completed);
                }
            }
            DownloadEvent::Complete => self.bar.finish_and_clear(),
        }
    }
}

/// A bar counting loaded layers (or any load steps).
#[derive(Debug, Clone)]
pub struct LoadBar {
    bar: ProgressBar,
}

impl LoadBar {
    /// A bar of `steps` steps.
    pub fn new(steps: usize, visible: bool) -> Self {
        let bar = bar(
            steps as u64,
            visible,
            "{msg} [{bar:30}] {pos}/{len} {elapsed}",
        );
        bar.set_message("loading");
        Self { bar }
    }

    /// A bar that draws nothing (library use, tests).
    pub fn hidden() -> Self {
        Self::new(0, false)
    }

    /// Sets the number of steps.
    pub fn set_steps(&self, steps: usize) {
        self.bar.set_length(steps as u64);
    }

    /// One step done.
    pub fn step(&self) {
        self.bar.inc(1);
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
