//! The `llama-df11` binary end to end: local folder (greedy ids against the reference, --bf16,
//! chat template), the Hub cache, the default repo id, and errors.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

fn run(args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(df11_llm::testing::binary("llama-df11", BIN));
    cmd.args(args).env_remove("HF_HUB_OFFLINE");
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

fn stderr_of_failure(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const GREEDY: [&str; 9] = [
    "--temperature",
    "0",
    "-n",
    "12",
    "--no-chat-template",
    "--cpu",
    "--dtype",
    "f32",
    "--json",
];

/// Checks a `--json` greedy result against the fixture's reference.
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
        let dir = model_dir(name, "df11");
        let config = df11_llm::ModelConfig::open(&dir).unwrap();
        let eos = df11_llm::GenerationDefaults::read(&dir, &config)
            .unwrap()
            .eos_token_ids;
        assert!(
            eos.contains(got.last().unwrap()),
            "{name}: stopped at {got:?}"
        );
    }
    assert!(j["peak_gpu_bytes"].is_null(), "no GPU on the CPU");
}

fn greedy_args<'a>(dir: &'a str, prompt: &'a str) -> Vec<&'a str> {
    let mut args = vec!["--model-dir", dir, "--prompt", prompt];
    args.extend(GREEDY);
    args
}

#[test]
fn local_folder_greedy_json_matches_the_reference_and_bf16() {
    for name in MODELS {
        let r = reference(name);
        let prompt = r["prompt"].as_str().unwrap();
        let dir = model_dir(name, "df11");
        let df11 = json_of(&run(&greedy_args(dir.to_str().unwrap(), prompt), &[]));
        assert_reference_greedy(name, &df11);
        let dir = model_dir(name, "bf16");
        let mut args = greedy_args(dir.to_str().unwrap(), prompt);
        args.push("--bf16");
        let bf16 = json_of(&run(&args, &[]));
        assert_eq!(df11["generated_tokens"], bf16["generated_tokens"], "{name}");
    }
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
        let j = json_of(&run(&args, &[]));
        assert_eq!(ids(&j["prompt_tokens"]), ids(&check["ids"]), "{name}");
    }
}

/// A HF cache holding `repo` (`owner/name`) = the DF11 fixture `name`.
fn cache_with(repo: &str, name: &str) -> tempfile::TempDir {
    let cache = tempfile::tempdir().unwrap();
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let root = cache
        .path()
        .join(format!("models--{}", repo.replace('/', "--")));
    let snapshot = root.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(root.join("refs")).unwrap();
    std::fs::write(root.join("refs/main"), commit).unwrap();
    for e in std::fs::read_dir(model_dir(name, "df11")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), snapshot.join(e.file_name())).unwrap();
    }
    cache
}

#[test]
fn default_repo_id_through_the_hub_cache() {
    // No --model-id: the default repo, found in the (offline) cache.
    let name = MODELS[0];
    let cache = cache_with(default_repo(), name);
    let r = reference(name);
    let mut args = vec!["--prompt", r["prompt"].as_str().unwrap(), "--offline"];
    args.extend(GREEDY);
    let env = [("HF_HUB_CACHE", cache.path())];
    assert_reference_greedy(name, &json_of(&run(&args, &env)));
    // Not cached: the error names the default repo.
    let empty = tempfile::tempdir().unwrap();
    let stderr = stderr_of_failure(&run(&args, &[("HF_HUB_CACHE", empty.path())]));
    assert!(stderr.contains(default_repo()), "{stderr}");
    assert!(stderr.contains("not in the Hugging Face cache"), "{stderr}");
}

fn default_repo() -> &'static str {
    use df11_llm::Architecture;
    Arch::DEFAULT_REPO
}

#[test]
fn errors_exit_non_zero_with_a_message() {
    let legacy = legacy_repo();
    let mut cases = vec![
        (
            fixtures().join("models/missing"),
            "model folder not found".to_string(),
        ),
        (
            legacy.path().to_path_buf(),
            "legacy DFloat11 0.1.0".to_string(),
        ),
    ];
    for (other, _) in OTHERS {
        cases.push((model_dir(other, "df11"), "this program runs Llama".into()));
    }
    for (dir, needle) in cases {
        let args = [
            "--model-dir",
            dir.to_str().unwrap(),
            "--prompt",
            "x",
            "--cpu",
        ];
        let stderr = stderr_of_failure(&run(&args, &[]));
        assert!(
            stderr.contains(&needle),
            "{}: {needle}: {stderr}",
            dir.display()
        );
    }
}

#[test]
fn generation_stops_at_any_of_a_list_of_eos_ids() {
    // Llama 3.1 lists several EOS ids (`<|end_of_text|>`, `<|eom_id|>`, `<|eot_id|>`): make the
    // reference's first greedy token one of a list, and generation stops right there.
    let name = MODELS[0];
    let r = reference(name);
    let first = ids(&r["greedy"]["tokens"])[0];
    let dir = copy_with_config(&model_dir(name, "df11"), |_| {});
    let path = dir.path().join("generation_config.json");
    let mut generation: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    generation["eos_token_id"] = serde_json::json!([2, first, 3]);
    std::fs::write(&path, generation.to_string()).unwrap();
    let j = json_of(&run(
        &greedy_args(dir.path().to_str().unwrap(), r["prompt"].as_str().unwrap()),
        &[],
    ));
    assert_eq!(ids(&j["generated_tokens"]), vec![first]);
}
