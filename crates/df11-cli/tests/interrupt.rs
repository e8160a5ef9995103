//! Ctrl-C (SIGINT) in the terminal front ends and the server, on the CPU with a fixture model:
//! during a chat answer it drops that answer and returns to the prompt; at the prompt it ends the
//! process with status 130; `df11 serve` shuts down cleanly (status 0) and says so.
#![cfg(unix)]

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use df11_llm::testing::{binary, model_dir};

fn df11() -> PathBuf {
    binary("df11", env!("CARGO_BIN_EXE_df11"))
}

/// Everything `stream` yields, chunk by chunk, on a channel (read on a thread of its own).
fn pipe(mut stream: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0
                || tx
                    .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                    .is_err()
            {
                break;
            }
        }
    });
    rx
}

/// Reads `rx` into `seen` until it contains `what`; panics after 60 s.
fn wait_for(rx: &mpsc::Receiver<String>, seen: &mut String, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen.contains(what) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(chunk) => seen.push_str(&chunk),
            Err(_) => panic!("no {what:?} within 60 s; got {seen:?}"),
        }
    }
}

fn sigint(child: &Child) {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for `child` to exit (at most 60 s) and returns its status code.
fn exit_code(child: &mut Child) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the process did not exit within 60 s of Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn chat() -> Child {
    let dir = model_dir("qwen3-tiny", "df11");
    Command::new(df11())
        .args(["chat", "--model-dir", dir.to_str().unwrap(), "--cpu"])
        // 1000-token answers (no end-of-sequence stop): Ctrl-C lands during one.
        .args(["--ignore-eos", "-n", "1000", "--max-context", "4096"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn ctrl_c_during_a_chat_answer_drops_it_and_returns_to_the_prompt() {
    let mut child = chat();
    let (out, err) = (
        pipe(child.stdout.take().unwrap()),
        pipe(child.stderr.take().unwrap()),
    );
    let mut stdin = child.stdin.take().unwrap();
    let (mut seen_out, mut seen_err) = (String::new(), String::new());
    wait_for(&err, &mut seen_err, "> ");
    stdin.write_all(b"Hello\n").unwrap();
    // The answer is streaming: interrupt it.
    while seen_out.trim().is_empty() {
        seen_out.push_str(
            &out.recv_timeout(Duration::from_secs(60))
                .expect("an answer"),
        );
    }
    sigint(&child);
    wait_for(&err, &mut seen_err, "[interrupted");
    // Back at the prompt, still answering: a second question gets a full (short) answer.
    stdin.write_all(b"And then?\n\n").unwrap();
    drop(stdin);
    assert_eq!(exit_code(&mut child), Some(0), "{seen_err}");
    while let Ok(chunk) = err.recv_timeout(Duration::from_secs(5)) {
        seen_err.push_str(&chunk);
    }
    assert_eq!(
        seen_err.matches("tok/s").count(),
        1,
        "one finished turn after the interrupted one: {seen_err}"
    );
}

#[test]
fn ctrl_c_at_the_chat_prompt_ends_the_process_with_status_130() {
    let mut child = chat();
    let err = pipe(child.stderr.take().unwrap());
    let mut seen = String::new();
    wait_for(&err, &mut seen, "> ");
    sigint(&child);
    assert_eq!(exit_code(&mut child), Some(130), "{seen}");
}

/// The server started with SIGINT ignored, as a background job of a script inherits it (CI
/// runs so): its own handler is in place by the time it prints its address, so a Ctrl-C sent
/// right then is caught (it was lost, and the server served on, when the handler came later).
#[test]
fn ctrl_c_shuts_the_server_down_cleanly() {
    let dir = model_dir("qwen3-tiny", "df11");
    let mut child = Command::new("sh")
        .args(["-c", "trap '' INT; exec \"$0\" \"$@\""])
        .arg(df11())
        .args(["serve", "--model-dir", dir.to_str().unwrap(), "--cpu"])
        .args(["--port", "0", "--max-context", "256"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = pipe(child.stderr.take().unwrap());
    let mut seen = String::new();
    wait_for(&err, &mut seen, "listening on ");
    sigint(&child);
    assert_eq!(exit_code(&mut child), Some(0), "{seen}");
    while let Ok(chunk) = err.recv_timeout(Duration::from_secs(5)) {
        seen.push_str(&chunk);
    }
    assert!(
        seen.contains("shutting down") && seen.contains("server stopped"),
        "{seen}"
    );
}
