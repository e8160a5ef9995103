//! The `gemma3-df11` binary end to end: local folder, the default Hub repo through the HF cache,
//! chat template, and errors.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

fn gemma3(args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(df11_llm::testing::binary(
        "gemma3-df11",
        env!("CARGO_BIN_EXE_gemma3-df11"),
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
fn assert_reference_greedy(j: &Value) {
    let r = reference(NAME);
    assert_eq!(ids(&j["prompt_tokens"]), ids(&r["prompt_ids"]));
    let got = ids(&j["generated_tokens"]);
    let want = comparable_greedy(&r, 1e-3);
    assert!(!want.is_empty());
    // The binary stops at EOS / <end_of_turn> (the reference does not): compare up to a stop
    // token it emitted.
    let n = want.len().min(got.len());
    assert_eq!(&got[..n], &want[..n]);
    if got.len() < 12 {
        let stops = [1, 5]; // <eos>, <end_of_turn> in the fixture's vocabulary
        assert!(
            stops.contains(got.last().unwrap()),
            "stopped early at {got:?}"
        );
    }
    assert!(j["text"].is_string());
    assert!(j["prefill_tok_s"].as_f64().unwrap() > 0.0);
    assert!(j["peak_gpu_bytes"].is_null(), "no GPU on the CPU");
}

fn greedy_args(dir: &Path, prompt: &str) -> Vec<String> {
    let mut args = vec!["--model-dir".into(), dir.to_str().unwrap().into()];
    args.extend(["--prompt".into(), prompt.into()]);
    args.extend(GREEDY.iter().map(|s| s.to_string()));
    args.push("--json".into());
    args
}

#[test]
fn local_folder_greedy_json_matches_the_reference_and_bf16() {
    let r = reference(NAME);
    let prompt = r["prompt"].as_str().unwrap();
    let run = |kind: &str, extra: &[&str]| {
        let mut args = greedy_args(&model_dir(NAME, kind), prompt);
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        json_of(&gemma3(&args, &[]))
    };
    let df11 = run("df11", &[]);
    assert_reference_greedy(&df11);
    let bf16 = run("bf16", &["--bf16"]);
    assert_eq!(df11["generated_tokens"], bf16["generated_tokens"]);
    assert_eq!(df11["text"], bf16["text"]);
}

#[test]
fn chat_template_prompt_ids_match_transformers() {
    let check = &reference(NAME)["chat_template_check"];
    let dir = model_dir(NAME, "df11");
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
    let j = json_of(&gemma3(&args, &[]));
    assert_eq!(ids(&j["prompt_tokens"]), ids(&check["ids"]));
    assert_eq!(ids(&j["generated_tokens"]).len(), 1);
}

#[test]
fn default_repo_from_the_hf_cache() {
    // No --model-id: DFloat11/gemma-3-12b-it-DF11, here a cache holding the fixture under that
    // name (the Hub is not reachable from the tests).
    let cache = tempfile::tempdir().unwrap();
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let repo = cache.path().join("models--DFloat11--gemma-3-12b-it-DF11");
    let snapshot = repo.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), commit).unwrap();
    for e in std::fs::read_dir(model_dir(NAME, "df11")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), snapshot.join(e.file_name())).unwrap();
    }
    let r = reference(NAME);
    let mut args = vec!["--prompt", r["prompt"].as_str().unwrap(), "--offline"];
    args.extend(GREEDY);
    args.push("--json");
    let out = gemma3(&args, &[("HF_HUB_CACHE", cache.path())]);
    assert_reference_greedy(&json_of(&out));
    // An empty cache names the default repo in its error.
    let empty = tempfile::tempdir().unwrap();
    let out = gemma3(&args, &[("HF_HUB_CACHE", empty.path())]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("DFloat11/gemma-3-12b-it-DF11"), "{stderr}");
}

#[test]
fn errors_exit_non_zero_with_a_message() {
    for (dir, needle) in [
        (fixtures().join("models/missing"), "model folder not found"),
        (model_dir("qwen3-tiny", "df11"), "this program runs Gemma 3"),
        (model_dir(NAME, "bf16"), "pass --bf16"),
    ] {
        let args = [
            "--model-dir",
            dir.to_str().unwrap(),
            "--prompt",
            "x",
            "--cpu",
        ];
        let out = gemma3(&args, &[]);
        assert!(!out.status.success(), "{}", dir.display());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
}
