//! The scheduler thread's loop: admit waiting requests into free slots (prefilling each
//! prompt, up to a budget of prompt tokens between two steps while others decode), one decode
//! step for every running sequence, sampling and streaming, and on a stop the requests told so
//! and the engine dropped on this thread.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use candle_core::{DType, Tensor};
use tokenizers::Tokenizer;

use super::metrics::Metrics;
use super::request::{Event, FinishReason, Request};
use super::stop::StopText;
use crate::engine::{Engine, SeqId};
use crate::error::{LlmError, Result as LlmResult};
use crate::sampling::Sampler;
use crate::tokenizer::TextStream;

/// What the loop receives.
pub(super) enum Message {
    /// A request to admit.
    Request(Request),
    /// Wakes a loop blocked on an empty queue so that it sees the stop flag.
    Stop,
}

/// Prompt tokens prefilled between two decode steps of the running sequences (at least one
/// request is always admitted): a burst of long prompts delays running streams by about this
/// many tokens of prefill per step, not by all of them.
const PREFILL_BUDGET: usize = 2048;

/// A running request.
struct Active<'t> {
    seq: SeqId,
    request: Request,
    sampler: Sampler,
    /// The prompt and every token generated (but an EOS).
    tokens: Vec<u32>,
    /// Every token generated (an EOS included).
    generated: Vec<u32>,
    /// The token to feed at the next step.
    next: u32,
    text: TextStream<'t>,
    stop: StopText,
    /// An event could not be delivered: the caller went away.
    cancelled: bool,
}

/// What the loop shares with the handles.
pub(super) struct Shared<'a> {
    pub(super) requests: mpsc::Receiver<Message>,
    pub(super) queued: &'a AtomicUsize,
    pub(super) stop: &'a AtomicBool,
    pub(super) metrics: &'a Metrics,
}

/// Why the admitting stopped.
enum Admit {
    /// Go on to the decode step.
    Step,
    /// Stop the loop (a stop was asked for, or every handle is gone).
    Stop,
}

/// The loop. On a stop, requests still running or queued are told so, then the engine is
/// dropped here, on the thread that owns it.
pub(super) fn run(mut engine: Engine, tokenizer: &Tokenizer, eos: &[u32], shared: &Shared<'_>) {
    let mut active: Vec<Active<'_>> = Vec::new();
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        if let Admit::Stop = admit_waiting(&mut engine, tokenizer, eos, &mut active, shared) {
            break;
        }
        step(&mut engine, eos, &mut active, shared.metrics);
    }
    let stopping = || Event::Failed("the server is shutting down".into());
    for a in active.drain(..) {
        engine.remove(a.seq);
        a.request.events.send(stopping());
        shared.metrics.failed();
    }
    while let Ok(message) = shared.requests.try_recv() {
        if let Message::Request(r) = message {
            shared.queued.fetch_sub(1, Ordering::SeqCst);
            r.events.send(stopping());
            shared.metrics.failed();
        }
    }
    drop(engine);
}

/// Admits waiting requests into free slots (blocking for one when nothing runs).
fn admit_waiting<'t>(
    engine: &mut Engine,
    tokenizer: &'t Tokenizer,
    eos: &[u32],
    active: &mut Vec<Active<'t>>,
    shared: &Shared<'_>,
) -> Admit {
    let (queued, metrics) = (shared.queued, shared.metrics);
    // Block for work when idle, else take what is waiting, up to the free slots and, while
    // sequences are decoding, up to PREFILL_BUDGET prompt tokens between two of their steps (at
    // least one request), so a burst of prompts does not stall them for long.
    let mut prefilled = 0;
    while active.len() < engine.max_batch() && (prefilled < PREFILL_BUDGET || active.is_empty()) {
        let message = if active.is_empty() {
            match shared.requests.recv() {
                Ok(m) => m,
                Err(_) => return Admit::Stop,
            }
        } else {
            match shared.requests.try_recv() {
                Ok(m) => m,
                Err(_) => break,
            }
        };
        let request = match message {
            Message::Request(r) => r,
            Message::Stop => return Admit::Stop,
        };
        queued.fetch_sub(1, Ordering::SeqCst);
        if request.events.is_closed() {
            metrics.cancelled();
            continue;
        }
        prefilled += request.prompt.len();
        if let Some(a) = admit(engine, tokenizer, eos, request, metrics) {
            active.push(a);
        }
        if shared.stop.load(Ordering::SeqCst) {
            return Admit::Stop;
        }
    }
    metrics.set_queue(queued.load(Ordering::SeqCst));
    // Clients that went away free their slots.
    active.retain(|a| {
        let gone = a.cancelled || a.request.events.is_closed();
        if gone {
            engine.remove(a.seq);
            metrics.cancelled();
        }
        !gone
    });
    Admit::Step
}

/// One decode step for every running sequence: sample, stream, finish the ones that ended.
fn step(engine: &mut Engine, eos: &[u32], active: &mut Vec<Active<'_>>, metrics: &Metrics) {
    if active.is_empty() {
        return;
    }
    let batch: Vec<(SeqId, u32)> = active.iter().map(|a| (a.seq, a.next)).collect();
    metrics.set_batch(batch.len());
    let started = Instant::now();
    let logits = engine
        .step(&batch)
        .and_then(|l| Ok(l.to_dtype(DType::F32)?));
    let logits = match logits {
        Ok(l) => l,
        Err(e) => {
            for a in active.drain(..) {
                engine.remove(a.seq);
                a.request.events.send(Event::Failed(e.to_string()));
                metrics.failed();
            }
            return;
        }
    };
    let mut finished = Vec::new();
    for (i, a) in active.iter_mut().enumerate() {
        let outcome = logits
            .get(i)
            .map_err(LlmError::from)
            .and_then(|row| advance(a, &row, eos, engine.max_context(), engine.len(a.seq)));
        match outcome {
            Ok(None) => {}
            Ok(Some(reason)) => finished.push((i, Ok(reason))),
            Err(e) => finished.push((i, Err(e.to_string()))),
        }
    }
    metrics.step(batch.len(), started.elapsed());
    for (i, outcome) in finished.into_iter().rev() {
        let a = active.swap_remove(i);
        engine.remove(a.seq);
        finish(a, outcome, metrics);
    }
}

/// Prefills a request and samples its first token; `None` when it ended (or failed) already.
fn admit<'t>(
    engine: &mut Engine,
    tokenizer: &'t Tokenizer,
    eos: &[u32],
    request: Request,
    metrics: &Metrics,
) -> Option<Active<'t>> {
    let added = engine.add(&request.prompt);
    let (seq, logits) = match added {
        Ok(x) => x,
        Err(e) => {
            request.events.send(Event::Failed(e.to_string()));
            metrics.failed();
            return None;
        }
    };
    metrics.prompt(request.prompt.len(), request.received.elapsed());
    let mut a = Active {
        seq,
        sampler: Sampler::new(&request.sampling),
        tokens: request.prompt.clone(),
        generated: Vec::new(),
        next: 0,
        text: TextStream::new(tokenizer),
        stop: StopText::new(request.stop.clone()),
        cancelled: false,
        request,
    };
    let outcome = logits
        .to_dtype(DType::F32)
        .map_err(LlmError::from)
        .and_then(|l| advance(&mut a, &l, eos, engine.max_context(), engine.len(seq)));
    match outcome {
        Ok(None) => Some(a),
        Ok(Some(reason)) => {
            engine.remove(seq);
            finish(a, Ok(reason), metrics);
            None
        }
        Err(e) => {
            engine.remove(seq);
            finish(a, Err(e.to_string()), metrics);
            None
        }
    }
}

/// Samples a request's next token from `logits` (`[vocab]` f32) and streams its text. Returns
/// why it ended, if it did. `len` is the positions its sequence holds.
fn advance(
    a: &mut Active<'_>,
    logits: &Tensor,
    eos: &[u32],
    max_context: usize,
    len: Option<usize>,
) -> LlmResult<Option<FinishReason>> {
    let token = a.sampler.next(logits, &a.tokens)?;
    a.generated.push(token);
    if eos.contains(&token) {
        return Ok(Some(FinishReason::Stop));
    }
    a.tokens.push(token);
    a.next = token;
    if let Some(piece) = a.text.push(token)? {
        let (out, stopped) = a.stop.push(&piece);
        if !out.is_empty() {
            a.cancelled |= !a.request.events.send(Event::Text(out));
        }
        if stopped {
            return Ok(Some(FinishReason::Stop));
        }
    }
    // The next step feeds `token` at position `len`: it must fit the context.
    let full = len.is_some_and(|l| l >= max_context);
    if a.request.max_tokens.is_some_and(|m| a.generated.len() >= m) || full {
        return Ok(Some(FinishReason::Length));
    }
    Ok(None)
}

/// Flushes the text held back and sends the end.
fn finish(mut a: Active<'_>, outcome: Result<FinishReason, String>, metrics: &Metrics) {
    let events = &a.request.events;
    match outcome {
        Ok(reason) => {
            // The tokenizer's pending bytes, then what the stop check held back.
            let mut rest = String::new();
            let mut stopped = a.stop.stopped();
            if let Ok(Some(piece)) = a.text.finish() {
                let (out, s) = a.stop.push(&piece);
                rest.push_str(&out);
                stopped |= s;
            }
            rest.push_str(&a.stop.flush());
            if !rest.is_empty() {
                events.send(Event::Text(rest));
            }
            let reason = if stopped { FinishReason::Stop } else { reason };
            metrics.done(a.generated.len());
            events.send(Event::Done {
                reason,
                prompt_tokens: a.request.prompt.len(),
                completion_tokens: a.generated.len(),
                tokens: std::mem::take(&mut a.generated),
            });
        }
        Err(e) => {
            metrics.failed();
            events.send(Event::Failed(e));
        }
    }
}
