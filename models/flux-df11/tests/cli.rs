//! The `flux-df11` command: the Hub path with an empty cache and an unreachable Hub fails
//! cleanly (the README's Hub commands rely on it), repos from a Hugging Face cache make the
//! same image as the local folders, and the report is printed.

mod common;

use std::path::Path;
use std::process::{Command, Output};

/// Runs the command with `args` and the Hub variables `env` (every other HF_* variable
/// removed).
fn flux(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flux-df11"));
    cmd.args(args);
    for var in [
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_HUB_OFFLINE",
        "HF_TOKEN",
        "HF_ENDPOINT",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn an_uncached_repo_with_the_hub_unreachable_is_a_clean_error() {
    let home = tempfile::tempdir().unwrap();
    let hub = home.path().join("hub");
    std::fs::create_dir_all(&hub).unwrap();
    let out = home.path().join("x.png");
    let out = out.to_str().unwrap();
    let closed_port = Path::new("http://127.0.0.1:9");
    let env = [
        ("HF_HOME", home.path()),
        ("HF_HUB_CACHE", hub.as_path()),
        ("HF_ENDPOINT", closed_port),
    ];
    for offline in [false, true] {
        let mut args = vec!["--prompt", "a fox", "--out", out, "--cpu"];
        if offline {
            args.push("--offline");
        }
        let o = flux(&args, &env);
        let text = stderr(&o);
        assert!(!o.status.success(), "{text}");
        assert!(
            text.contains(
                "`DFloat11/FLUX.1-schnell-DF11` (revision main) is not in the Hugging Face cache"
            ),
            "{text}"
        );
        assert!(text.contains(hub.to_str().unwrap()), "{text}");
        assert_eq!(text.contains("the Hub is unreachable"), !offline, "{text}");
        assert!(!text.contains("panicked"), "{text}");
    }
    assert!(!Path::new(out).exists());
}

#[test]
fn cached_repos_make_the_local_folders_image() {
    let (cache, _, _) = common::fake_cache();
    let tmp = tempfile::tempdir().unwrap();
    let png = |name: &str| tmp.path().join(name).to_str().unwrap().to_string();
    let (local, by_env, by_flag) = (png("local.png"), png("env.png"), png("flag.png"));
    let common_args = [
        "--prompt",
        "a tiny red fox",
        "--width",
        "64",
        "--height",
        "48",
        "--steps",
        "2",
        "--cpu",
        "--max-sequence-length",
        "16",
    ];
    let run = |extra: &[&str], env: &[(&str, &Path)]| {
        let args: Vec<&str> = common_args.iter().chain(extra).copied().collect();
        let o = flux(&args, env);
        assert!(o.status.success(), "{:?}: {}", extra, stderr(&o));
        stderr(&o)
    };
    let f = common::fixture();
    let (df11, base) = (f.join("df11"), f.join("base"));
    let report = run(
        &[
            "--model-dir",
            df11.to_str().unwrap(),
            "--base-dir",
            base.to_str().unwrap(),
            "--out",
            &local,
        ],
        &[],
    );
    for want in [
        "64x48, 2 steps",
        "s/step",
        "total:",
        "peak GPU memory: n/a (CPU)",
    ] {
        assert!(report.contains(want), "{want:?} not in {report}");
    }
    // The cache from HF_HUB_CACHE with HF_HUB_OFFLINE=1, then from --cache-dir and --offline;
    // the base repo follows from the DF11 repo's name.
    let offline = Path::new("1");
    run(
        &["--model-id", common::MODEL_ID, "--out", &by_env],
        &[("HF_HUB_CACHE", cache.path()), ("HF_HUB_OFFLINE", offline)],
    );
    let cache_dir = cache.path().to_str().unwrap();
    run(
        &[
            "--model-id",
            common::MODEL_ID,
            "--revision",
            common::COMMIT,
            "--base-id",
            common::BASE_ID,
            "--cache-dir",
            cache_dir,
            "--offline",
            "--out",
            &by_flag,
        ],
        &[],
    );
    let image = std::fs::read(&local).unwrap();
    assert!(image.starts_with(b"\x89PNG"));
    assert_eq!(std::fs::read(&by_env).unwrap(), image);
    assert_eq!(std::fs::read(&by_flag).unwrap(), image);
}

#[test]
fn a_local_transformer_without_a_base_is_a_usage_error() {
    let df11 = common::fixture().join("df11");
    let o = flux(
        &[
            "--prompt",
            "p",
            "--model-dir",
            df11.to_str().unwrap(),
            "--cpu",
        ],
        &[],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--base-dir"), "{}", stderr(&o));
}
