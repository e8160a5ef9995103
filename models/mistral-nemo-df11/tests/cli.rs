//! The `mistral-nemo-df11` binary end to end: local folder, the default Hub repo through a hand-made HF
//! cache (offline, and online with the Hub unreachable), chat template, and errors.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use mistral_nemo_df11::MistralArch;
use serde_json::Value;

use df11_llm::Architecture;

fn mistral(args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(df11_llm::testing::binary(
        "mistral-nemo-df11",
        env!("CARGO_BIN_EXE_mistral-nemo-df11"),
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
    let r = reference(MODEL);
    assert_eq!(ids(&j["prompt_tokens"]), ids(&r["prompt_ids"]));
    let got = ids(&j["generated_tokens"]);
    let want = comparable_greedy(&r, 1e-3);
    assert!(!want.is_empty());
    // The binary stops at EOS (the reference does not): compare up to an EOS it emitted.
    let n = want.len().min(got.len());
    assert_eq!(&got[..n], &want[..n]);
    if got.len() < 12 {
        let dir = model_dir(MODEL, "df11");
        let config = df11_llm::ModelConfig::open(&dir).unwrap();
        let eos = df11_llm::GenerationDefaults::read(&dir, &config)
            .unwrap()
            .eos_token_ids;
        assert!(
            eos.contains(got.last().unwrap()),
            "stopped early at {got:?}"
        );
    }
    assert!(j["text"].is_string());
    assert!(j["prefill_tok_s"].as_f64().unwrap() > 0.0);
    assert!(j["peak_gpu_bytes"].is_null(), "no GPU on the CPU");
}

fn greedy_args<'a>(source: &[&'a str], prompt: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = source.to_vec();
    args.extend(["--prompt", prompt]);
    args.extend(GREEDY);
    args.extend(extra);
    args.push("--json");
    args
}

#[test]
fn local_folder_greedy_json_matches_the_reference_and_bf16() {
    let r = reference(MODEL);
    let prompt = r["prompt"].as_str().unwrap();
    let df11 = model_dir(MODEL, "df11");
    let df11 = json_of(&mistral(
        &greedy_args(&["--model-dir", df11.to_str().unwrap()], prompt, &[]),
        &[],
    ));
    assert_reference_greedy(&df11);
    let bf16 = model_dir(MODEL, "bf16");
    let bf16 = json_of(&mistral(
        &greedy_args(
            &["--model-dir", bf16.to_str().unwrap()],
            prompt,
            &["--bf16"],
        ),
        &[],
    ));
    assert_eq!(df11["generated_tokens"], bf16["generated_tokens"]);
    assert_eq!(df11["text"], bf16["text"]);
}

#[test]
fn chat_template_prompt_ids_match_transformers() {
    let check = &reference(MODEL)["chat_template_check"];
    let dir = model_dir(MODEL, "df11");
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
    let j = json_of(&mistral(&args, &[]));
    assert_eq!(ids(&j["prompt_tokens"]), ids(&check["ids"]));
    assert_eq!(ids(&j["generated_tokens"]).len(), 1);
}

/// A HF cache holding the DF11 fixture as the default repo
/// (`DFloat11/Mistral-Nemo-Instruct-2407-DF11`).
fn cache_with_default_repo() -> tempfile::TempDir {
    let cache = tempfile::tempdir().unwrap();
    let commit = "89abcdef0123456789abcdef0123456789abcdef";
    let repo = cache.path().join(format!(
        "models--{}",
        MistralArch::DEFAULT_REPO.replace('/', "--")
    ));
    let snapshot = repo.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), commit).unwrap();
    for e in std::fs::read_dir(model_dir(MODEL, "df11")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), snapshot.join(e.file_name())).unwrap();
    }
    cache
}

#[test]
fn default_repo_from_the_hub_cache() {
    assert_eq!(
        MistralArch::DEFAULT_REPO,
        "DFloat11/Mistral-Nemo-Instruct-2407-DF11"
    );
    let cache = cache_with_default_repo();
    let r = reference(MODEL);
    let cache_env = ("HF_HUB_CACHE", cache.path());
    // No --model-id: the default repo.
    let offline = greedy_args(&["--offline"], r["prompt"].as_str().unwrap(), &[]);
    assert_reference_greedy(&json_of(&mistral(&offline, &[cache_env])));
    // Online, with the endpoint a closed local port: falls back to the cache.
    let online = greedy_args(&[], r["prompt"].as_str().unwrap(), &[]);
    let endpoint = Path::new("http://127.0.0.1:9");
    let out = mistral(&online, &[cache_env, ("HF_ENDPOINT", endpoint)]);
    assert_reference_greedy(&json_of(&out));
    // Not cached: a clear error naming the default repo, non-zero exit.
    let empty = tempfile::tempdir().unwrap();
    let out = mistral(&offline, &[("HF_HUB_CACHE", empty.path())]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not in the Hugging Face cache"), "{stderr}");
    assert!(stderr.contains(MistralArch::DEFAULT_REPO), "{stderr}");
}

#[test]
fn errors_exit_non_zero_with_a_message() {
    for (dir, needle) in [
        (fixtures().join("models/missing"), "model folder not found"),
        (model_dir("phi4-tiny", "df11"), "this program runs Mistral"),
        (model_dir(MODEL, "bf16"), "pass --bf16"),
    ] {
        let args = [
            "--model-dir",
            dir.to_str().unwrap(),
            "--prompt",
            "x",
            "--cpu",
        ];
        let out = mistral(&args, &[]);
        assert!(!out.status.success(), "{}", dir.display());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
}
