//! The model binary end to end: a local folder with `--json`, `--bf16`, the chat template, the
//! streamed text and report, the Hugging Face cache (offline, the default repo, the Hub
//! unreachable), and errors with their messages and exit codes.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use super::{comparable_greedy, fixtures, ids, model_dir, reference, ModelUnderTest};
use crate::{GenerationDefaults, ModelConfig};

/// Greedy, 12 tokens, the prompt as is, on the CPU in f32.
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

/// Runs the binary with `args` and extra environment variables.
fn run(m: &ModelUnderTest, args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(&m.binary);
    cmd.args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("{}: {e}", m.binary.display()))
}

/// The `--json` object of a successful run.
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

/// The stderr of a run that must fail.
fn stderr_of_failure(out: &Output) -> String {
    assert!(!out.status.success(), "the run succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `--model-dir dir --prompt <fixture prompt>` and [`GREEDY`].
fn greedy_args<'a>(dir: &'a Path, prompt: &'a str) -> Vec<&'a str> {
    let mut args = vec!["--model-dir", dir.to_str().unwrap(), "--prompt", prompt];
    args.extend(GREEDY);
    args
}

/// Checks a `--json` result against fixture `name`'s reference: the prompt ids, the greedy
/// tokens (the binary stops at an EOS id of the configs, the reference does not), the fields.
fn assert_reference_greedy(name: &str, j: &Value) {
    let r = reference(name);
    assert_eq!(ids(&j["prompt_tokens"]), ids(&r["prompt_ids"]), "{name}");
    let got = ids(&j["generated_tokens"]);
    let want = comparable_greedy(&r, 1e-3);
    assert!(!want.is_empty());
    let n = want.len().min(got.len());
    assert_eq!(&got[..n], &want[..n], "{name}");
    if got.len() < 12 {
        let dir = model_dir(name, "df11");
        let config = ModelConfig::open(&dir).unwrap();
        let eos = GenerationDefaults::read(&dir, &config)
            .unwrap()
            .eos_token_ids;
        let tokenizer = crate::load_tokenizer(&dir).unwrap();
        let last = *got.last().unwrap();
        let stop_token = tokenizer
            .id_to_token(last)
            .is_some_and(|t| t == "<end_of_turn>");
        assert!(
            eos.contains(&last) || stop_token,
            "{name}: stopped early at {got:?}"
        );
    }
    assert!(j["text"].is_string());
    assert!(j["prefill_tok_s"].as_f64().unwrap() > 0.0);
    assert!(j["ttft_ms"].as_f64().unwrap() >= 0.0);
    assert!(j.get("decode_tok_s").is_some());
    assert!(j["peak_gpu_bytes"].is_null(), "no GPU on the CPU");
}

/// Every fixture through `--model-dir ... --json`: the reference's greedy tokens; the BF16
/// folder with `--bf16`, and the DF11 folder with its last layer offloaded
/// (`--cpu-offload-layers 1`), give the same tokens and text.
pub fn local_folder_greedy_json_matches_the_reference_and_bf16(m: &ModelUnderTest) {
    for name in m.fixtures {
        let r = reference(name);
        let prompt = r["prompt"].as_str().unwrap();
        let df11_dir = model_dir(name, "df11");
        let mut args = greedy_args(&df11_dir, prompt);
        args.push("--json");
        let df11 = json_of(&run(m, &args, &[]));
        assert_reference_greedy(name, &df11);
        let bf16_dir = model_dir(name, "bf16");
        let mut args = greedy_args(&bf16_dir, prompt);
        args.extend(["--json", "--bf16"]);
        let bf16 = json_of(&run(m, &args, &[]));
        assert_eq!(df11["generated_tokens"], bf16["generated_tokens"], "{name}");
        assert_eq!(df11["text"], bf16["text"], "{name}");
        let mut args = greedy_args(&df11_dir, prompt);
        args.extend(["--json", "--cpu-offload-layers", "1"]);
        let offloaded = json_of(&run(m, &args, &[]));
        assert_eq!(
            df11["generated_tokens"], offloaded["generated_tokens"],
            "{name}"
        );
        assert_eq!(df11["text"], offloaded["text"], "{name}");
    }
}

/// The prompt through the chat template gives transformers' ids.
pub fn chat_template_prompt_ids_match_transformers(m: &ModelUnderTest) {
    for name in m.fixtures {
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
        let j = json_of(&run(m, &args, &[]));
        assert_eq!(ids(&j["prompt_tokens"]), ids(&check["ids"]), "{name}");
        assert_eq!(ids(&j["generated_tokens"]).len(), 1);
    }
}

/// Without `--json`, stdout carries the generated text only (the JSON run's text) and stderr
/// the report.
pub fn streamed_text_and_report(m: &ModelUnderTest) {
    let name = m.fixtures[0];
    let dir = model_dir(name, "df11");
    let r = reference(name);
    let mut args = greedy_args(&dir, r["prompt"].as_str().unwrap());
    let out = run(m, &args, &[]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    args.push("--json");
    let j = json_of(&run(m, &args, &[]));
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

/// The Hub path without a network: `--model-id` and the default repo found in an offline
/// cache; online with the endpoint a closed local port, the cache is used; a repo not in the
/// cache is a clear error naming it.
pub fn hub_cache_offline_default_repo_and_unreachable_hub(m: &ModelUnderTest) {
    let name = m.fixtures[0];
    let r = reference(name);
    let prompt = r["prompt"].as_str().unwrap();
    let cache = cache_with(m.default_repo, name);
    let env = ("HF_HUB_CACHE", cache.path());
    let mut by_default = vec!["--prompt", prompt, "--json"];
    by_default.extend(GREEDY);
    let mut offline = by_default.clone();
    offline.push("--offline");
    assert_reference_greedy(name, &json_of(&run(m, &offline, &[env])));
    let mut by_id = offline.clone();
    by_id.extend(["--model-id", m.default_repo]);
    assert_reference_greedy(name, &json_of(&run(m, &by_id, &[env])));
    let endpoint = Path::new("http://127.0.0.1:9");
    let out = run(m, &by_default, &[env, ("HF_ENDPOINT", endpoint)]);
    assert_reference_greedy(name, &json_of(&out));
    let empty = tempfile::tempdir().unwrap();
    let stderr = stderr_of_failure(&run(m, &offline, &[("HF_HUB_CACHE", empty.path())]));
    assert!(stderr.contains(m.default_repo), "{stderr}");
    assert!(stderr.contains("not in the Hugging Face cache"), "{stderr}");
}

/// Mistakes exit non-zero with a message saying what is wrong.
pub fn errors_exit_non_zero_with_a_message(m: &ModelUnderTest) {
    let fixture = model_dir(m.fixtures[0], "df11");
    let runs_this = format!("this program runs {}", m.name);
    let mut cases = vec![
        (fixtures().join("models/missing"), "model folder not found"),
        (model_dir(m.fixtures[0], "bf16"), "pass --bf16"),
    ];
    let others = m.other_architectures();
    for (other, _) in &others {
        cases.push((model_dir(other, "df11"), runs_this.as_str()));
    }
    for (dir, needle) in cases {
        let args = [
            "--model-dir",
            dir.to_str().unwrap(),
            "--prompt",
            "x",
            "--cpu",
        ];
        let stderr = stderr_of_failure(&run(m, &args, &[]));
        assert!(
            stderr.contains(needle),
            "{}: {needle}: {stderr}",
            dir.display()
        );
    }
    let dir = fixture.to_str().unwrap();
    for (args, needle) in [
        (vec!["--prompt", "x", "-n", "0"], "at least 1"),
        (vec!["--exponents", "bogus"], "unknown exponent form"),
        (vec!["--matmul", "bogus"], "unknown matmul path"),
    ] {
        let mut all = vec!["--model-dir", dir, "--cpu"];
        all.extend(args);
        let stderr = stderr_of_failure(&run(m, &all, &[]));
        assert!(stderr.contains(needle), "{all:?}: {stderr}");
    }
    // Device lists (not with --cpu, which they conflict with).
    for (args, needle) in [
        (vec!["--devices", "0,0"], "device 0 is named twice"),
        (vec!["--devices", "97"], "CUDA device 97 does not exist"),
        (
            vec!["--devices", "0", "--device-map", "2;1"],
            "expected `auto` or layer counts",
        ),
        (vec!["--devices", "0", "--cpu"], "cannot be used with"),
        (vec!["--cpu", "--cpu-offload-layers", "99"], "layers"),
        (
            vec!["--cpu", "--max-gpu-memory", "1KB"],
            "every weight offloaded",
        ),
        (vec!["--cpu", "--max-gpu-memory", "lots"], "expected a size"),
        (
            vec![
                "--cpu",
                "--cpu-offload-layers",
                "1",
                "--max-gpu-memory",
                "6GB",
            ],
            "cannot be used with",
        ),
    ] {
        let mut all = vec!["--model-dir", dir, "--prompt", "x"];
        all.extend(args);
        let stderr = stderr_of_failure(&run(m, &all, &[]));
        assert!(stderr.contains(needle), "{all:?}: {stderr}");
    }
}
