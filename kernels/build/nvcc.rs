//! The kernels' build, shared by the build scripts of the crates that embed kernels
//! (`crates/df11-candle/build.rs`: the format's decode and product kernels;
//! `crates/df11-llm/build.rs`: the models' step kernels), each including this file with
//! `#[path]`. With the crate's `cuda` feature it compiles `kernels/<name>.cu` with nvcc into
//! `$OUT_DIR/<name>.fatbin` (SASS and PTX, embedded by `fatbin_module!` and loaded by
//! `df11_candle::cuda::module`).
//!
//! Target: `CUDA_COMPUTE_CAP` (e.g. `90`; default 80, whose PTX the driver JIT-compiles for any
//! newer GPU). nvcc is found as `$NVCC`, `$CUDA_HOME/bin/nvcc` or on PATH; `DF11_NVCC_FLAGS` adds
//! flags (e.g. `-DDF11_MIN_BLOCKS=4` to trade registers for occupancy).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where and how the kernels are compiled.
pub struct Build {
    nvcc: String,
    /// The compute capability without a dot or suffix (`80`, `90`).
    pub cap: String,
    kernels: PathBuf,
    out: PathBuf,
}

impl Build {
    /// The build of this crate, or `None` without its `cuda` feature (nothing to compile).
    pub fn from_env() -> Option<Self> {
        println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
        println!("cargo:rerun-if-env-changed=NVCC");
        println!("cargo:rerun-if-env-changed=DF11_NVCC_FLAGS");
        std::env::var_os("CARGO_FEATURE_CUDA")?;
        let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
        let cap = std::env::var("CUDA_COMPUTE_CAP")
            .ok()
            .map(|c| c.replace('.', "").trim_end_matches('a').to_string())
            .unwrap_or_else(|| "80".into());
        let nvcc = std::env::var("NVCC").unwrap_or_else(|_| {
            std::env::var("CUDA_HOME")
                .map(|h| format!("{h}/bin/nvcc"))
                .unwrap_or_else(|_| "nvcc".into())
        });
        Some(Self {
            nvcc,
            cap,
            kernels: manifest.join("../../kernels"),
            out: PathBuf::from(std::env::var("OUT_DIR").unwrap()),
        })
    }

    /// Compiles `kernels/<name>.cu` for every name, one nvcc each side by side (ptxas takes
    /// most of the time); a change to one of `headers` (in `kernels/`) rebuilds.
    pub fn compile_all(&self, names: &[&str], headers: &[&str]) {
        std::thread::scope(|s| {
            for name in names {
                s.spawn(move || self.compile(name));
            }
        });
        for header in headers {
            println!(
                "cargo:rerun-if-changed={}",
                self.kernels.join(header).display()
            );
        }
    }

    /// `kernels/<name>.cu` -> `$OUT_DIR/<name>.fatbin`: SASS for `sm_<cap>` and the PTX of
    /// `compute_<cap>`.
    fn compile(&self, name: &str) {
        let src = self.kernels.join(format!("{name}.cu"));
        println!("cargo:rerun-if-changed={}", src.display());
        // The warpgroup and warp-specialized kernels' wgmma, mbarrier, bulk copies and TMA exist
        // only on the arch-specific 9.0 target (`sm_90a`); on any other target they compile to
        // traps and are never launched (`df11-candle/src/cuda/forms/packed/{tc_wg,ws}.rs`).
        let cap = if matches!(name, "df11_tc_wg" | "df11_ws_gemm") && self.cap == "90" {
            "90a"
        } else {
            self.cap.as_str()
        };
        let status = Command::new(&self.nvcc)
            .args(["--fatbin", "-O3", "-std=c++17"])
            .arg(format!(
                "-gencode=arch=compute_{cap},code=[sm_{cap},compute_{cap}]"
            ))
            .arg("-o")
            .arg(self.out.join(format!("{name}.fatbin")))
            .args(
                std::env::var("DF11_NVCC_FLAGS")
                    .unwrap_or_default()
                    .split_whitespace(),
            )
            .arg(&src)
            .status()
            .unwrap_or_else(|e| {
                panic!(
                    "could not run nvcc ({}): {e}; set NVCC or CUDA_HOME",
                    self.nvcc
                )
            });
        assert!(status.success(), "nvcc failed on {}", display(&src));
    }
}

fn display(p: &Path) -> std::path::Display<'_> {
    p.display()
}
