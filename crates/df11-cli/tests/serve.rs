//! `df11 serve` end to end on the CPU with a fixture model, driven by the real `openai` Python
//! client (`tests/server/openai_client.py`; `python3 -m pip install openai==3.57.0` first, as
//! `.ci/run` does): streaming and non-streaming chat equal to `df11 run`'s greedy output, 8
//! concurrent clients, every bad request a 4xx with the server still answering, the API key,
//! the queue limit, a client that disconnects, a bounded load test. Also `df11 run` with several
//! prompts and the chat.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use df11_llm::testing::{binary, model_dir};
use serde_json::Value;

fn df11() -> PathBuf {
    binary("df11", env!("CARGO_BIN_EXE_df11"))
}

/// A running `df11 serve`, killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `df11 serve` on the qwen3-tiny fixture on a free port with `extra` flags, and waits
/// for its `listening on` line.
fn serve(extra: &[&str]) -> Server {
    serve_in(&model_dir("qwen3-tiny", "df11"), extra)
}

/// [`serve`] on the model folder `dir`.
fn serve_in(dir: &Path, extra: &[&str]) -> Server {
    let mut child = Command::new(df11())
        .args([
            "serve",
            "--model-dir",
            dir.to_str().unwrap(),
            "--cpu",
            "--port",
            "0",
        ])
        .args(["--served-model-name", "tiny", "--max-context", "256"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .expect("df11 serve starts");
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("df11 serve printed `listening on` before exiting")
            .unwrap();
        if let Some(at) = line.find("listening on ") {
            break line[at + "listening on ".len()..].trim().to_string();
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Server { child, url }
}

/// `df11 run` on the fixture with `args`, greedy, 12 tokens, its stdout.
fn run(args: &[&str]) -> String {
    run_in(&model_dir("qwen3-tiny", "df11"), args)
}

/// [`run`] on the model folder `dir`.
fn run_in(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(df11())
        .args(["run", "--model-dir", dir.to_str().unwrap(), "--cpu"])
        .args([
            "--temperature",
            "0",
            "-n",
            "12",
            "--max-context",
            "256",
            "--json",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "df11 run {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const PROMPTS: [&str; 3] = ["What is a binary tree?", "Hello there", "Count to ten"];

#[test]
fn the_openai_client_gets_the_cli_s_answers_and_every_bad_request_a_4xx() {
    let (mut texts, mut tokens) = (Vec::new(), Vec::new());
    for p in PROMPTS {
        let j: Value = serde_json::from_str(run(&["--prompt", p]).trim()).unwrap();
        texts.push(j["text"].clone());
        tokens.push(j["generated_tokens"].clone());
    }
    let expected = tempfile::NamedTempFile::new().unwrap();
    let json = serde_json::json!({"prompts": PROMPTS, "texts": texts, "tokens": tokens});
    std::fs::write(expected.path(), json.to_string()).unwrap();
    let main = serve(&["--max-batch", "8", "--max-body-bytes", "65536"]);
    let limited = serve(&[
        "--max-batch",
        "1",
        "--max-queue",
        "1",
        "--api-key",
        "secret",
    ]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/server/openai_client.py");
    let out = Command::new("python3")
        .arg(&script)
        .args([&main.url, &limited.url])
        .arg(expected.path())
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named 'openai'"),
        "the test needs the openai client: python3 -m pip install openai==3.57.0"
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("OK"), "{stdout}");
    for line in stdout.lines().filter(|l| l.starts_with("LOAD ")) {
        eprintln!("{line}");
    }
}

#[test]
fn several_prompts_run_as_one_batch_with_the_single_runs_answers() {
    let file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file.as_file(), "{}", PROMPTS[2]).unwrap();
    let path = file.path().to_str().unwrap();
    let out = run(&[
        "--prompt",
        PROMPTS[0],
        "--prompt",
        PROMPTS[1],
        "--prompts-file",
        path,
    ]);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    for (line, p) in lines.iter().zip(PROMPTS) {
        let alone: Value = serde_json::from_str(run(&["--prompt", p]).trim()).unwrap();
        assert_eq!(line["prompt"], p);
        assert_eq!(line["generated_tokens"], alone["generated_tokens"], "{p}");
        assert_eq!(line["text"], alone["text"], "{p}");
    }
}

/// `df11 chat` on the fixture with a context of `context` positions, fed `input`.
fn chat(context: &str, input: &[u8]) -> std::process::Output {
    let dir = model_dir("qwen3-tiny", "df11");
    let mut child = Command::new(df11())
        .args([
            "chat",
            "--model-dir",
            dir.to_str().unwrap(),
            "--cpu",
            "--temperature",
            "0",
        ])
        .args(["-n", "12", "--max-context", context])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// A conversation longer than the context loses its oldest exchanges and goes on; a message
/// longer than the context alone is dropped with a note, and the chat goes on.
#[test]
fn chat_outgrowing_the_context_drops_the_oldest_exchanges() {
    let long = "word ".repeat(80);
    let input = format!("Hello\nAnd then?\nWhat next?\n{long}\nBye\n\n");
    let out = chat("40", input.as_bytes());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("oldest exchange is dropped"), "{stderr}");
    assert!(stderr.contains("this message alone takes"), "{stderr}");
    let turns = stderr.lines().filter(|l| l.contains("tok/s")).count();
    assert_eq!(turns, 4, "{stderr}");
}

#[test]
fn chat_keeps_the_conversation_and_reports_each_turn() {
    let out = chat("256", b"Hello\nAnd then?\n\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let turns: Vec<&str> = stderr.lines().filter(|l| l.contains("tok/s")).collect();
    assert_eq!(turns.len(), 2, "{stderr}");
    // The second turn's prompt holds the first exchange: it is longer than a fresh one.
    let prompt_tokens = |l: &str| -> usize {
        l.trim_start_matches("> ")
            .trim_start_matches('[')
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        prompt_tokens(turns[1]) > prompt_tokens(turns[0]) + 6,
        "{stderr}"
    );
    // The first answer is the single run's.
    let alone: Value = serde_json::from_str(run(&["--prompt", "Hello"]).trim()).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with(alone["text"].as_str().unwrap()),
        "{stdout:?} vs {:?}",
        alone["text"]
    );
}

/// `POST url/path` with a JSON body (HTTP/1.1 over a plain socket); the response's JSON body.
fn post(url: &str, path: &str, body: &Value) -> Value {
    use std::io::Read;
    let host = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(host).expect("the server accepts");
    let body = body.to_string();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, json) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{response}");
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

/// A template that tests `enable_thinking` (as Qwen3's does) gives the same prompt in `df11
/// serve` as in `df11 run`: thinking off by default (the template adds an empty think block),
/// on with `chat_template_kwargs.enable_thinking` / `--thinking`.
#[test]
fn the_server_renders_the_cli_s_prompt_with_a_thinking_template() {
    let dir = df11_llm::testing::copy_fixture(&model_dir("qwen3-tiny", "df11"), "", |_| {});
    let path = dir.path().join("tokenizer_config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["chat_template"] = Value::from(
        "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + \
         message.content + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}\
         {{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking \
         is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}",
    );
    std::fs::write(&path, config.to_string()).unwrap();
    let server = serve_in(dir.path(), &[]);
    let mut lengths = Vec::new();
    for thinking in [false, true] {
        let mut args = vec!["--prompt", "Hello"];
        if thinking {
            args.push("--thinking");
        }
        let cli: Value = serde_json::from_str(run_in(dir.path(), &args).trim()).unwrap();
        let cli_len = cli["prompt_tokens"].as_array().unwrap().len();
        let mut request = serde_json::json!({"model": "tiny", "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": "Hello"}]});
        if thinking {
            request["chat_template_kwargs"] = serde_json::json!({"enable_thinking": true});
        }
        let answer = post(&server.url, "/v1/chat/completions", &request);
        assert_eq!(
            answer["usage"]["prompt_tokens"].as_u64(),
            Some(cli_len as u64),
            "thinking {thinking}: {answer}"
        );
        lengths.push(cli_len);
    }
    // The template tells the two apart, so the comparison above can fail.
    assert!(lengths[0] > lengths[1], "{lengths:?}");
}
