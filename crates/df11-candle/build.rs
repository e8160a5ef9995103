//! With the `cuda` feature, compiles `kernels/*.cu` with nvcc to fatbins (SASS and PTX, embedded by
//! `src/cuda/*.rs` and loaded by `src/cuda/runtime/module.rs`).
//! Target: `CUDA_COMPUTE_CAP` (e.g. `90`; default 80, whose PTX the driver JIT-compiles for any
//! newer GPU). nvcc is found as `$NVCC`, `$CUDA_HOME/bin/nvcc` or on PATH; `DF11_NVCC_FLAGS` adds
//! flags (e.g. `-DDF11_MIN_BLOCKS=4` to trade registers for occupancy).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo:rerun-if-env-changed=NVCC");
    println!("cargo:rerun-if-env-changed=DF11_NVCC_FLAGS");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let kernels = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../kernels");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let cap = std::env::var("CUDA_COMPUTE_CAP")
        .ok()
        .map(|c| c.replace('.', "").trim_end_matches('a').to_string())
        .unwrap_or_else(|| "80".into());
    // The PTX target, for the host (`cuda/runtime/pdl.rs`: `griddepcontrol` exists only from compute 9.0).
    println!("cargo:rustc-env=DF11_PTX_COMPUTE_CAP={cap}");
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| {
        std::env::var("CUDA_HOME")
            .map(|h| format!("{h}/bin/nvcc"))
            .unwrap_or_else(|_| "nvcc".into())
    });
    let mut names = vec![
        "df11_decode",
        "df11_fused",
        "df11_packed",
        "df11_pack",
        "df11_tc",
        "df11_tc_stream",
        "llm_ops",
        "decode_step",
        "prefill_attention",
    ];
    // The panel and warpgroup kernels: only with the `experimental-kernels` feature.
    if std::env::var_os("CARGO_FEATURE_EXPERIMENTAL_KERNELS").is_some() {
        names.extend(["df11_tc_panel", "df11_tc_wg"]);
    }
    // One nvcc per kernel file, side by side (ptxas takes most of the time).
    std::thread::scope(|s| {
        for name in names {
            let (nvcc, cap, kernels, out) = (&nvcc, &cap, &kernels, &out);
            s.spawn(move || compile(nvcc, cap, kernels, out, name));
        }
    });
    for header in [
        "df11_escape_table.cuh",
        "df11_packed.cuh",
        "df11_tc.cuh",
        "df11_tc_stream.cuh",
        "df11_tc_wg.cuh",
        "llm_common.cuh",
    ] {
        println!("cargo:rerun-if-changed={}", kernels.join(header).display());
    }
}

/// `kernels/<name>.cu` -> `$OUT_DIR/<name>.fatbin`: SASS for `sm_<cap>` and the PTX of
/// `compute_<cap>` (the driver compiles it for a newer GPU; cuda/runtime/module.rs loads the image).
fn compile(nvcc: &str, cap: &str, kernels: &Path, out: &Path, name: &str) {
    let src = kernels.join(format!("{name}.cu"));
    println!("cargo:rerun-if-changed={}", src.display());
    // The warpgroup kernels' wgmma, mbarrier and bulk copies exist only on the arch-specific 9.0
    // target (`sm_90a`); on any other target they compile to traps and are never launched
    // (`src/cuda/products/tc_wg.rs`).
    let cap = if name == "df11_tc_wg" && cap == "90" {
        "90a"
    } else {
        cap
    };
    let status = Command::new(nvcc)
        .args(["--fatbin", "-O3", "-std=c++17"])
        .arg(format!(
            "-gencode=arch=compute_{cap},code=[sm_{cap},compute_{cap}]"
        ))
        .arg("-o")
        .arg(out.join(format!("{name}.fatbin")))
        .args(
            std::env::var("DF11_NVCC_FLAGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("could not run nvcc ({nvcc}): {e}; set NVCC or CUDA_HOME"));
    assert!(status.success(), "nvcc failed on {}", src.display());
}
