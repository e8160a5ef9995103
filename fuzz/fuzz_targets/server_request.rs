//! The server's request parser (df11-server's `api.rs`, compiled by this crate's lib): a request body, as `/v1/chat/completions`
//! and `/v1/completions` read it, through `parse`, the sampling checks and the message / prompt
//! checks (and the chat template's `enable_thinking`). Anything may be refused, always as a 4xx `ApiError` whose body is OpenAI's error
//! object; nothing may panic, and what is accepted is within the documented ranges.
#![no_main]

use df11_fuzz::api::{parse, ApiError, ChatRequest, Checked, CompletionRequest};
use libfuzzer_sys::fuzz_target;

const SERVED: &str = "df11";
const CONTEXT: usize = 4096;

fn refused(e: ApiError) {
    assert!((400..500).contains(&e.status), "status {}", e.status);
    let body = e.body();
    assert!(body["error"]["message"].is_string());
    assert!(body["error"]["type"].is_string());
}

fn accepted(c: &Checked) {
    assert!(c.max_tokens.is_none_or(|n| (1..=CONTEXT).contains(&n)));
    assert!((0.0..=2.0).contains(&c.temperature));
    assert!(c.top_p.is_none_or(|p| p > 0.0 && p <= 1.0));
    assert!(c.stop.len() <= 4 && c.stop.iter().all(|s| !s.is_empty()));
}

fuzz_target!(|data: &[u8]| {
    match parse::<ChatRequest>(data) {
        Ok(r) => {
            match r.sampling.check(SERVED, CONTEXT) {
                Ok(c) => accepted(&c),
                Err(e) => refused(e),
            }
            match r.messages() {
                Ok(m) => {
                    assert_eq!(m.len(), r.messages.len());
                    for (role, _) in &m {
                        assert!(["system", "user", "assistant"].contains(&role.as_str()));
                    }
                }
                Err(e) => refused(e),
            }
            if let Err(e) = r.enable_thinking() {
                refused(e);
            }
        }
        Err(e) => refused(e),
    }
    match parse::<CompletionRequest>(data) {
        Ok(r) => {
            match r.sampling.check(SERVED, CONTEXT) {
                Ok(c) => accepted(&c),
                Err(e) => refused(e),
            }
            if let Err(e) = r.prompt() {
                refused(e);
            }
        }
        Err(e) => refused(e),
    }
});
