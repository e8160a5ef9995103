//! The `qwen3-df11` binary end to end: local folder, Hub cache (offline, and online with the Hub
//! unreachable), chat template, and errors.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

fn qwen3(args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(df11_llm::testing::binary(
        "qwen3-df11",
        env!("CARGO_BIN_EXE_qwen3-df11"),
    ));
    cmd.args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("the binary runs")
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}; stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

const GREEDY: [&str; 8] = [
    "--temperature",
    "0",
    "-n",
    "12",
    "--no-chat-template",
    "--cpu",
    "--dtype",
    "f32",
];

/// Checks a `--json` result against the fixture's reference.
fn assert_reference_greedy(name: &str, j: &Value) {
    let r = reference(name);
    assert_eq!(ids(&j["prompt_tokens"]), ids(&r["prompt_ids"]), "{name}");
    let got = ids(&j["generated_tokens"]);
    let want = comparable_greedy(&r, 1e-3);
    assert!(!want.is_empty());
    // The binary stops at EOS (the reference does not): compare up to an EOS it emitted.
    let n = want.len().min(got.len());
    assert_eq!(&got[..n], &want[..n], "{name}");
    if got.len() < 12 {
        // Stopped early: only at an EOS token of generation_config.json / config.json.
        let dir = model_dir(name, "df11");
        let config = df11_llm::ModelConfig::open(&dir).unwrap();
        let eos = df11_llm::GenerationDefaults::read(&dir, &config)
            .unwrap()
            .eos_token_ids;
        assert!(
            eos.contains(got.last().unwrap()),
            "{name}: stopped early at {got:?}"
        );
    }
    assert!(j["text"].is_string());
    assert!(j["prefill_tok_s"].as_f64().unwrap() > 0.0);
    assert!(j["ttft_ms"].as_f64().unwrap() >= 0.0);
    assert!(j.get("decode_tok_s").is_some());
    assert!(j["peak_gpu_bytes"].is_null(), "no GPU on the CPU");
}

#[test]
fn local_folder_greedy_json_matches_the_reference() {
    for name in MODELS {
        let dir = model_dir(name, "df11");
        let mut args = vec!["--model-dir", dir.to_str().unwrap(), "--prompt"];
        let r = reference(name);
        args.push(r["prompt"].as_str().unwrap());
        args.extend(GREEDY);
        args.push("--json");
        assert_reference_greedy(name, &json_of(&qwen3(&args, &[])));
    }
}

#[test]
fn bf16_flag_runs_the_plain_model_identically() {
    let r = reference("qwen3-tiny");
    let prompt = r["prompt"].as_str().unwrap();
    let run = |kind: &str, extra: &[&str]| {
        let dir = model_dir("qwen3-tiny", kind);
        let mut args = vec!["--model-dir", dir.to_str().unwrap(), "--prompt", prompt];
        args.extend(GREEDY);
        args.extend(extra);
        args.push("--json");
        json_of(&qwen3(&args, &[]))
    };
    let df11 = run("df11", &[]);
    let bf16 = run("bf16", &["--bf16"]);
    assert_eq!(df11["generated_tokens"], bf16["generated_tokens"]);
    assert_eq!(df11["text"], bf16["text"]);
}

#[test]
fn chat_template_prompt_ids_match_transformers() {
    for name in MODELS {
        let check = &reference(name)["chat_template_check"];
        let dir = model_dir(name, "df11");
        let content = check["messages"][0]["content"].as_str().unwrap();
        let args = [
            "--model-dir",
            dir.to_str().unwrap(),
            "--prompt",
            content,
            "-n",
            "1",
            "--cpu",
            "--json",
        ];
        let j = json_of(&qwen3(&args, &[]));
        assert_eq!(ids(&j["prompt_tokens"]), ids(&check["ids"]), "{name}");
        assert_eq!(ids(&j["generated_tokens"]).len(), 1);
    }
}

#[test]
fn streamed_text_and_report() {
    let dir = model_dir("qwen3-tiny", "df11");
    let r = reference("qwen3-tiny");
    let mut args = vec!["--model-dir", dir.to_str().unwrap(), "--prompt"];
    args.push(r["prompt"].as_str().unwrap());
    args.extend(GREEDY);
    let out = qwen3(&args, &[]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    // stdout carries the generated text only; it equals the JSON run's text.
    args.push("--json");
    let j = json_of(&qwen3(&args, &[]));
    assert_eq!(stdout.trim_end_matches('\n'), j["text"].as_str().unwrap());
    for needle in [
        "prompt:",
        "prefill",
        "generated:",
        "decode",
        "time to first token",
        "peak GPU memory",
    ] {
        assert!(stderr.contains(needle), "{needle} missing from:\n{stderr}");
    }
}

/// A HF cache with `org/tiny` = the qwen3-tiny DF11 fixture.
fn cache_with_fixture() -> tempfile::TempDir {
    let cache = tempfile::tempdir().unwrap();
    let commit = "89abcdef0123456789abcdef0123456789abcdef";
    let repo = cache.path().join("models--org--tiny");
    let snapshot = repo.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), commit).unwrap();
    for e in std::fs::read_dir(model_dir("qwen3-tiny", "df11")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), snapshot.join(e.file_name())).unwrap();
    }
    cache
}

#[test]
fn hub_cache_offline_and_with_the_hub_unreachable() {
    let cache = cache_with_fixture();
    let r = reference("qwen3-tiny");
    let mut args = vec![
        "--model-id",
        "org/tiny",
        "--prompt",
        r["prompt"].as_str().unwrap(),
    ];
    args.extend(GREEDY);
    args.push("--json");
    let cache_env = ("HF_HUB_CACHE", cache.path());
    let mut offline = args.clone();
    offline.push("--offline");
    assert_reference_greedy("qwen3-tiny", &json_of(&qwen3(&offline, &[cache_env])));
    // Online, with the endpoint a closed local port: falls back to the cache.
    let endpoint = Path::new("http://127.0.0.1:9");
    let out = qwen3(&args, &[cache_env, ("HF_ENDPOINT", endpoint)]);
    assert_reference_greedy("qwen3-tiny", &json_of(&out));
    // Not cached: a clear error, non-zero exit.
    let empty = tempfile::tempdir().unwrap();
    let out = qwen3(&offline, &[("HF_HUB_CACHE", empty.path())]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not in the Hugging Face cache"), "{stderr}");
}

#[test]
fn errors_exit_non_zero_with_a_message() {
    let llama = model_dir("llama-tiny", "df11");
    let bf16 = model_dir("qwen3-tiny", "bf16");
    for (dir, needle) in [
        (fixtures().join("models/missing"), "model folder not found"),
        (llama, "this program runs Qwen3"),
        (bf16, "pass --bf16"),
    ] {
        let out = qwen3(
            &[
                "--model-dir",
                dir.to_str().unwrap(),
                "--prompt",
                "x",
                "--cpu",
            ],
            &[],
        );
        assert!(!out.status.success(), "{}", dir.display());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    let dir = model_dir("qwen3-tiny", "df11");
    let out = qwen3(
        &[
            "--model-dir",
            dir.to_str().unwrap(),
            "--prompt",
            "x",
            "-n",
            "0",
            "--cpu",
        ],
        &[],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("at least 1"), "{stderr}");
    // Unknown values of the CUDA path flags are refused before anything loads.
    for (flag, needle) in [
        ("--exponents", "unknown exponent form"),
        ("--matmul", "unknown matmul path"),
    ] {
        let out = qwen3(
            &["--model-dir", dir.to_str().unwrap(), flag, "bogus", "--cpu"],
            &[],
        );
        assert!(!out.status.success(), "{flag}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{flag}: {stderr}");
    }
}
