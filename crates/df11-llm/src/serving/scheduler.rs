//! Continuous batching: one thread owns the model ([`Engine`]) and runs a loop: admit waiting
//! requests into free sequence slots (prefilling each prompt; while others decode, up to a
//! budget of prompt tokens per step), then one decode step for every
//! running sequence at once, sample each row with its request's own sampler, stream the text,
//! and free the slots of requests that finished or whose client went away. Requests join and
//! leave between steps; a full queue is refused at once.
//!
//! The thread owns every CUDA object of the model (device buffers, streams, graphs, cuBLAS and
//! curand handles) and drops them itself: [`Scheduler::shutdown`] (or dropping the last handle)
//! stops the loop and joins the thread, so the process never leaves `main` while the model is
//! being torn down on another thread (the CUDA libraries' exit handlers would race that
//! teardown).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use candle_core::{DType, Tensor};
use tokenizers::Tokenizer;

use super::metrics::Metrics;
use super::stop::StopText;
use crate::app::Loaded;
use crate::chat::ChatTemplate;
use crate::engine::{Engine, SeqId};
use crate::error::{LlmError, Result as LlmResult};
use crate::sampling::{Sampler, SamplingParams};
use crate::tokenizer::TextStream;

/// Where a request's events go: a channel of the caller's choosing (the server's async one,
/// the CLI's blocking one).
pub trait EventSink: Send {
    /// Sends an event; false when the receiver is gone.
    fn send(&self, event: Event) -> bool;
    /// Whether the receiver is gone (the request is then cancelled).
    fn is_closed(&self) -> bool;
}

impl EventSink for std::sync::mpsc::Sender<Event> {
    fn send(&self, event: Event) -> bool {
        std::sync::mpsc::Sender::send(self, event).is_ok()
    }

    fn is_closed(&self) -> bool {
        // A std channel tells only on send; a gone receiver is found at the next event.
        false
    }
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An EOS token or a stop sequence.
    Stop,
    /// `max_tokens`, or the context is full.
    Length,
}

impl FinishReason {
    /// OpenAI's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
        }
    }
}

/// What a request hears from the scheduler.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// More text.
    Text(String),
    /// The end: why, and the token counts.
    Done {
        /// Why it ended.
        reason: FinishReason,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Generated tokens (an EOS token included).
        completion_tokens: usize,
        /// The generated ids (an EOS token included).
        tokens: Vec<u32>,
    },
    /// The model failed on this request.
    Failed(String),
}

/// A request for the scheduler.
pub struct Request {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Tokens to generate at most (`None`: until EOS or the context is full).
    pub max_tokens: Option<usize>,
    /// How tokens are chosen.
    pub sampling: SamplingParams,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Where the events go; dropping the receiver cancels the request.
    pub events: Box<dyn EventSink>,
    /// When the server received it (for the time to first token).
    pub received: Instant,
}

/// What the HTTP side needs to know of the model.
pub struct ModelInfo {
    /// Architecture name.
    pub arch: String,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// The chat template, if the model has one.
    pub chat_template: Option<ChatTemplate>,
    /// Positions a sequence may reach.
    pub max_context: usize,
    /// Sequences run at once.
    pub max_batch: usize,
    /// EOS ids and sampling defaults of the model's configs.
    pub defaults: crate::config::GenerationDefaults,
}

/// The HTTP side's handle on the scheduler. Clones share one thread; the last one dropped
/// stops and joins it ([`Scheduler::shutdown`]).
#[derive(Clone)]
pub struct Scheduler {
    queue: mpsc::SyncSender<Message>,
    queued: Arc<AtomicUsize>,
    thread: Arc<Worker>,
}

/// What the loop receives.
enum Message {
    Request(Request),
    /// Wakes a loop blocked on an empty queue so that it sees the stop flag.
    Stop,
}

/// The scheduler thread: stopped and joined when the last handle goes.
struct Worker {
    stop: Arc<AtomicBool>,
    wake: mpsc::SyncSender<Message>,
    handle: Mutex<Option<JoinHandle<()>>>,
}

impl Worker {
    /// Stops the loop and waits for the thread (idempotent). Requests still running or queued
    /// get [`Event::Failed`]; the engine, and every CUDA object in it, is dropped on the thread.
    fn stop_and_join(&self) {
        let handle = self
            .handle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let Some(handle) = handle else { return };
        self.stop.store(true, Ordering::SeqCst);
        // A full queue means the loop is not blocked waiting for one: it sees the flag anyway.
        let _ = self.wake.try_send(Message::Stop);
        if handle.join().is_err() {
            eprintln!("warning: the scheduler thread panicked");
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// Why a request was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitError {
    /// The queue is full.
    Full,
    /// The scheduler has stopped.
    Stopped,
}

impl Scheduler {
    /// Starts the scheduler thread: it runs `load`, makes an engine of `max_batch` slots and
    /// serves requests from a queue of `max_queue`. Returns when the model is loaded.
    pub fn start(
        load: Box<dyn FnOnce() -> LlmResult<Loaded> + Send>,
        max_batch: usize,
        max_queue: usize,
        metrics: Arc<Metrics>,
    ) -> LlmResult<(Self, ModelInfo)> {
        let (queue, requests) = mpsc::sync_channel::<Message>(max_queue.max(1));
        let (ready, loaded) = mpsc::channel::<LlmResult<ModelInfo>>();
        let queued = Arc::new(AtomicUsize::new(0));
        let queued_loop = queued.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_loop = stop.clone();
        let handle = std::thread::Builder::new()
            .name("df11-scheduler".into())
            .spawn(move || {
                let setup = (|| -> LlmResult<(Engine, Tokenizer, Vec<u32>)> {
                    let mut loaded = load()?;
                    let mut engine = Engine::new(loaded.model, max_batch)?;
                    engine.warm_up()?;
                    let info = ModelInfo {
                        arch: loaded.config.describe(),
                        tokenizer: loaded.tokenizer.clone(),
                        chat_template: loaded.chat_template.take(),
                        max_context: engine.max_context(),
                        max_batch,
                        defaults: loaded.defaults.clone(),
                    };
                    let eos = loaded.defaults.eos_token_ids.clone();
                    let _ = ready.send(Ok(info));
                    Ok((engine, loaded.tokenizer, eos))
                })();
                match setup {
                    Ok((engine, tokenizer, eos)) => {
                        let shared = Shared {
                            requests,
                            queued: &queued_loop,
                            stop: &stop_loop,
                            metrics: &metrics,
                        };
                        run(engine, &tokenizer, &eos, &shared)
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                    }
                }
            })
            .map_err(|e| LlmError::Usage(format!("scheduler thread: {e}")))?;
        let thread = Arc::new(Worker {
            stop,
            wake: queue.clone(),
            handle: Mutex::new(Some(handle)),
        });
        // A load that failed ends the thread: joining it (through `thread`'s drop) first
        // means its CUDA state is gone before the error reaches the caller.
        let info = loaded.recv().map_err(|_| {
            LlmError::Usage("the scheduler stopped while loading the model".into())
        })??;
        Ok((
            Self {
                queue,
                queued,
                thread,
            },
            info,
        ))
    }

    /// Queues a request, or refuses it at once when the queue is full.
    pub fn submit(&self, request: Request) -> Result<(), SubmitError> {
        if self.thread.stop.load(Ordering::SeqCst) {
            return Err(SubmitError::Stopped);
        }
        self.queued.fetch_add(1, Ordering::SeqCst);
        match self.queue.try_send(Message::Request(request)) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.queued.fetch_sub(1, Ordering::SeqCst);
                Err(match e {
                    mpsc::TrySendError::Full(_) => SubmitError::Full,
                    mpsc::TrySendError::Disconnected(_) => SubmitError::Stopped,
                })
            }
        }
    }

    /// Stops the scheduler and waits for its thread: requests running or queued get
    /// [`Event::Failed`], later submissions [`SubmitError::Stopped`], and the model (every CUDA
    /// object in it) is dropped on the thread before this returns. Idempotent; the last
    /// handle dropped does the same.
    pub fn shutdown(&self) {
        self.thread.stop_and_join();
    }

    /// Requests waiting for a slot.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }
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
struct Shared<'a> {
    requests: mpsc::Receiver<Message>,
    queued: &'a AtomicUsize,
    stop: &'a AtomicBool,
    metrics: &'a Metrics,
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
fn run(mut engine: Engine, tokenizer: &Tokenizer, eos: &[u32], shared: &Shared<'_>) {
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
