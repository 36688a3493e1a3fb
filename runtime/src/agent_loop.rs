//! The agent loop: capture a snapshot, assemble the prompt, call the model, run its tool
//! calls, repeat until the model stops calling tools or the step limit is reached.
//!
//! Each step captures once: the system prompt and the tool descriptions come from the
//! same pack (or, on any failure of a remote pack, both from the built-in one). Read-only
//! calls in a run of them execute together; a call that changes anything runs alone, in
//! the order the model gave. Every call gets exactly one result, even when the user
//! interrupts, so the conversation stays valid for the next request and for `--resume`.

use std::sync::Arc;

use futures_util::future::join_all;
use pack_client::PromptStore;
use pack_client::outcomes::{OutcomeCounts, PackKey};
use serde::Serialize;
use tokio::sync::watch;

use crate::assemble::{AssembledPrompt, TurnRequest, assemble};
use crate::compaction::{self, COMPACTION_PROMPT, Compaction};
use crate::error::{PromptError, RuntimeError};
use crate::live::LiveContext;
use crate::provider::{
    Delta, Message, ModelRequest, Provider, ProviderError, ToolCall, ToolSpec, Usage,
};
use crate::reminders::Reminders;
use crate::tools::{ToolContext, ToolOutput, Toolbox};
use crate::transcript::{Record, Transcript};

/// What the loop reports as it goes. `agent exec --json` prints these one per line.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    SessionStarted {
        session_id: String,
        agent: String,
        mode: String,
        model: String,
        resumed: bool,
        transcript: String,
    },
    TurnStarted {
        turn: u32,
        pack: String,
        fallback: Option<String>,
    },
    TextDelta {
        text: String,
    },
    ReasoningDelta {
        text: String,
    },
    AssistantMessage {
        turn: u32,
        text: String,
    },
    ToolCallStarted {
        id: String,
        name: String,
        arguments: String,
    },
    ToolCallCompleted {
        id: String,
        name: String,
        is_error: bool,
        output: String,
    },
    TurnCompleted {
        turn: u32,
        usage: Usage,
        stop_reason: Option<String>,
    },
    /// Old tool outputs were cut to their start and end to make room: `outputs` of them,
    /// about `saved_tokens` less to send.
    Trimmed {
        outputs: usize,
        saved_tokens: u64,
    },
    /// Older history was summarised: `summarized` original messages are now covered by
    /// the summary, `kept` follow it unchanged.
    Compacted {
        summarized: usize,
        kept: usize,
    },
    /// A background task finished; the model is told at the next step.
    Notification {
        text: String,
    },
    /// Something the reader should know that does not stop the run (an MCP server
    /// stopped, an answer was cut off).
    Warning {
        message: String,
    },
    Error {
        message: String,
    },
    SessionFinished {
        session_id: String,
        reason: Finish,
        turns: u32,
        usage: Usage,
    },
}

/// Why the loop ended without a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// The model answered without calling a tool.
    Done,
    /// The last answer stopped at the output limit (`finish_reason: "length"`,
    /// `stop_reason: "max_tokens"`): it is incomplete.
    CutOff,
    StepLimit,
    Interrupted,
}

/// Whether a stop reason means the output limit cut the answer off.
pub fn is_length_stop(reason: &str) -> bool {
    matches!(reason, "length" | "max_tokens" | "model_length")
}

/// Arguments a tool can be given: none, or a complete JSON object.
fn arguments_complete(arguments: &str) -> bool {
    arguments.trim().is_empty()
        || serde_json::from_str::<serde_json::Value>(arguments).is_ok_and(|v| v.is_object())
}

/// The result for a call whose arguments were cut off or garbled.
fn cut_off_call(name: &str, partial: &str, cut_off: bool) -> ToolOutput {
    let mut shown: String = partial.chars().take(200).collect();
    if shown.len() < partial.len() {
        shown.push('…');
    }
    let why = if cut_off {
        "was cut off by the output limit before its arguments were complete"
    } else {
        "arrived with arguments that are not a JSON object"
    };
    ToolOutput::error(format!(
        "your call to {name} {why}, so it was not run. Received: {shown}\nSend the call again with complete JSON arguments{}.",
        if cut_off {
            "; keep them short (write a large file in parts)"
        } else {
            ""
        }
    ))
}

/// Faults that stop the run. Tool failures are not among them: they go to the model.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error("building the prompt: {0}")]
    Prompt(#[from] PromptError),
    #[error(transparent)]
    Session(#[from] RuntimeError),
}

/// One step's prompt and tools, from one snapshot.
#[derive(Debug, Clone)]
pub struct PreparedTurn {
    pub prompt: AssembledPrompt,
    pub specs: Vec<ToolSpec>,
    pub toolbox: Toolbox,
    /// The pack captured for the step: the one it was served by, or the one it fell back
    /// from. The step's outcome counts go under it.
    pub pack: PackKey,
}

/// Captures once and builds the prompt and the tool list from that snapshot, falling
/// back wholesale to the built-in pack if the captured one fails anywhere.
pub fn prepare_turn(
    store: &PromptStore,
    request: &TurnRequest<'_>,
    tools: &Arc<ToolContext>,
) -> Result<PreparedTurn, PromptError> {
    let captured = store.capture();
    let pack = PackKey::of(&captured);
    let served = store.serve_from(captured, |snapshot| {
        let prompt = assemble(snapshot, request)?;
        let toolbox =
            Toolbox::new(&prompt.capabilities, tools.clone()).with_skills(prompt.skills.clone());
        let specs = toolbox.specs(snapshot)?;
        Ok::<_, PromptError>(PreparedTurn {
            prompt,
            specs,
            toolbox,
            pack: pack.clone(),
        })
    })?;
    let mut turn = served.value;
    turn.prompt.metadata.fallback = served.fallback;
    Ok(turn)
}

/// Runs the calls of one assistant message and returns one output per call, in order.
/// After `cancel` turns true, calls not yet started get an "interrupted" error.
pub async fn dispatch(
    toolbox: &Toolbox,
    calls: &[ToolCall],
    cancel: &watch::Receiver<bool>,
    sink: &mut (dyn FnMut(Event) + Send),
) -> Vec<ToolOutput> {
    let mut outputs: Vec<Option<ToolOutput>> = vec![None; calls.len()];
    let mut i = 0;
    while i < calls.len() {
        // A run of read-only calls goes together; anything else goes alone.
        let mut end = i + 1;
        if toolbox.is_read_only(&calls[i]) {
            while end < calls.len() && toolbox.is_read_only(&calls[end]) {
                end += 1;
            }
        }
        if *cancel.borrow() {
            break;
        }
        for call in &calls[i..end] {
            sink(Event::ToolCallStarted {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
        let results = join_all(calls[i..end].iter().map(|c| toolbox.run(c, cancel.clone()))).await;
        for (offset, output) in results.into_iter().enumerate() {
            let call = &calls[i + offset];
            sink(Event::ToolCallCompleted {
                id: call.id.clone(),
                name: call.name.clone(),
                is_error: output.is_error,
                output: output.content.clone(),
            });
            outputs[i + offset] = Some(output);
        }
        i = end;
    }
    outputs
        .into_iter()
        .map(|o| o.unwrap_or_else(|| ToolOutput::error("not run: the user interrupted the run")))
        .collect()
}

/// What the loop carries from one step (and one user turn) to the next.
#[derive(Debug)]
pub struct LoopState {
    pub reminders: Reminders,
    /// The latest compaction, if the history has been summarised.
    pub compaction: Option<Compaction>,
    /// Tool outputs among the first `trimmed` original messages are sent trimmed
    /// ([`compaction::trimmed_output`]).
    pub trimmed: usize,
    /// Input plus output tokens the server reported for the last call.
    pub reported_tokens: u64,
    /// Messages compaction keeps as they are (moved earlier to keep tool pairs whole).
    pub keep_recent: usize,
    /// MCP notices already passed on to the model.
    pub mcp_seen: usize,
    /// The pack the last step's prompt came from.
    pub pack: Option<String>,
}

impl Default for LoopState {
    fn default() -> Self {
        LoopState {
            reminders: Reminders::default(),
            compaction: None,
            trimmed: 0,
            reported_tokens: 0,
            keep_recent: 6,
            mcp_seen: 0,
            pack: None,
        }
    }
}

/// The loop's inputs besides the conversation.
pub struct AgentLoop<'a> {
    pub store: &'a PromptStore,
    pub request: TurnRequest<'a>,
    pub provider: &'a Provider,
    pub tools: Arc<ToolContext>,
    pub max_steps: u32,
    pub session_id: String,
    /// The model's context in tokens as configured; the server's own word, once it gave
    /// it, beats this. Older history is trimmed, then summarised, once a request would
    /// leave less than the answer's reserve ([`crate::provider::context::compaction_trigger`]).
    /// `None` never compacts.
    pub context_limit: Option<u64>,
    pub state: LoopState,
    /// Re-reads instruction files and skills when they change; `None` keeps the ones in
    /// `request`.
    pub live: Option<&'a LiveContext>,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub finish: Finish,
    pub turns: u32,
    pub usage: Usage,
}

impl AgentLoop<'_> {
    /// Tells the model when the prompt pack changed under a running session: its
    /// instructions may now read differently from earlier turns.
    fn pack_notice(&mut self, prepared: &PreparedTurn) {
        let pack = &prepared.prompt.metadata.pack;
        let now = format!("{} {} ({})", pack.name, pack.version, pack.sha256);
        if let Some(before) = &self.state.pack
            && *before != now
        {
            self.state.reminders.notify(format!(
                "The prompt pack was updated during this session (now {} {}); your system prompt may differ from earlier turns. Follow the current one.",
                pack.name, pack.version
            ));
        }
        self.state.pack = Some(now);
    }

    /// Where the next request must stay below, or `None` when the loop never compacts:
    /// the context (the server's word, else [`AgentLoop::context_limit`]) less the reserve
    /// for the answer.
    pub fn compaction_trigger(&self) -> Option<u64> {
        let limit = self.context_limit?;
        let context = self.provider.learned_context().unwrap_or(limit);
        let max_output = self.provider.settings().max_tokens.map_or_else(
            || u64::from(crate::provider::anthropic::default_max_tokens(context)),
            u64::from,
        );
        Some(crate::provider::context::compaction_trigger(
            context, max_output,
        ))
    }

    /// Makes room when the next request would pass `trigger`: trims the old tool outputs
    /// first, and summarises older history only when that is not enough.
    async fn make_room(
        &mut self,
        messages: &[Message],
        prepared: &PreparedTurn,
        trigger: u64,
        transcript: &mut Transcript,
        sink: &mut (dyn FnMut(Event) + Send),
    ) -> Result<(), RunError> {
        let estimate = |state: &LoopState| {
            let view = compaction::view(messages, state.compaction.as_ref(), state.trimmed);
            compaction::estimate_tokens(&prepared.prompt.text, &view, &prepared.specs)
        };
        let before = estimate(&self.state);
        if before.max(self.state.reported_tokens) <= trigger {
            return Ok(());
        }
        let covered = self.state.compaction.as_ref().map_or(0, |c| c.covered);
        if let Some(cut) =
            compaction::cut_point(messages, self.state.keep_recent, self.state.trimmed)
        {
            let from = self.state.trimmed.max(covered).min(cut);
            let outputs = compaction::trimmable(&messages[from..cut]);
            if outputs > 0 {
                self.state.trimmed = cut;
                let after = estimate(&self.state);
                let saved_tokens = before.saturating_sub(after);
                sink(Event::Trimmed {
                    outputs,
                    saved_tokens,
                });
                // What the server counted for the last request, less what was cut.
                self.state.reported_tokens =
                    self.state.reported_tokens.saturating_sub(saved_tokens);
                if after.max(self.state.reported_tokens) <= trigger {
                    return Ok(());
                }
            }
        }
        self.compact(messages, transcript, sink).await?;
        Ok(())
    }

    /// Summarises the history before the most recent messages, from the original
    /// messages. Returns whether anything was compacted.
    pub async fn compact(
        &mut self,
        messages: &[Message],
        transcript: &mut Transcript,
        sink: &mut (dyn FnMut(Event) + Send),
    ) -> Result<bool, RunError> {
        let already = self.state.compaction.as_ref().map_or(0, |c| c.covered);
        let Some(cut) = compaction::cut_point(messages, self.state.keep_recent, already) else {
            return Ok(false);
        };
        let served = self.store.serve(|snapshot| {
            snapshot
                .read(COMPACTION_PROMPT)
                .map_err(PromptError::from)
                .and_then(|bytes| {
                    String::from_utf8(bytes.to_vec()).map_err(|_| PromptError::NotUtf8 {
                        key: COMPACTION_PROMPT.to_string(),
                    })
                })
        })?;
        let input = [Message::User {
            content: format!(
                "<conversation>\n{}</conversation>",
                compaction::transcript_text(&messages[..cut])
            ),
        }];
        let request = ModelRequest {
            system: served.value.trim(),
            messages: &input,
            tools: &[],
        };
        let response = self.provider.complete(&request, &mut |_| {}).await?;
        let summary = response.text.trim().to_string();
        if summary.is_empty() {
            tracing::warn!("the compaction call returned no summary; history left as it is");
            return Ok(false);
        }
        transcript.append(&Record::Compaction {
            covered: cut,
            summary: summary.clone(),
        })?;
        self.state.compaction = Some(Compaction {
            covered: cut,
            summary,
        });
        self.state.reported_tokens = 0;
        self.state.reminders.rearm();
        if let Some(outcomes) = &self.tools.outcomes {
            let current = PackKey::of(&self.store.capture());
            outcomes.count_latest(
                &current,
                OutcomeCounts {
                    compactions: 1,
                    ..OutcomeCounts::default()
                },
            );
        }
        sink(Event::Compacted {
            summarized: cut,
            kept: messages.len() - cut,
        });
        Ok(true)
    }

    /// Counts `counts` under `pack` when the session counts outcomes.
    fn count(&self, pack: &PackKey, counts: OutcomeCounts) {
        if let Some(outcomes) = &self.tools.outcomes {
            outcomes.count(pack, counts);
        }
    }

    /// Runs until the model stops calling tools, the step limit, or `cancel`. `turn` is
    /// the last turn number already in the transcript. What the run counted goes to the
    /// outcome file when it ends, however it ends.
    pub async fn run(
        &mut self,
        messages: &mut Vec<Message>,
        transcript: &mut Transcript,
        turn: u32,
        cancel: watch::Receiver<bool>,
        sink: &mut (dyn FnMut(Event) + Send),
    ) -> Result<Outcome, RunError> {
        let result = self
            .run_steps(messages, transcript, turn, cancel, sink)
            .await;
        if let Some(outcomes) = &self.tools.outcomes {
            pack_client::cache::off_async(|| outcomes.flush());
        }
        result
    }

    async fn run_steps(
        &mut self,
        messages: &mut Vec<Message>,
        transcript: &mut Transcript,
        mut turn: u32,
        cancel: watch::Receiver<bool>,
        sink: &mut (dyn FnMut(Event) + Send),
    ) -> Result<Outcome, RunError> {
        let mut usage = Usage::default();
        let mut steps = 0;
        let mut overflow_retried = false;
        let finish = loop {
            if *cancel.borrow() {
                break Finish::Interrupted;
            }
            if steps == self.max_steps {
                break Finish::StepLimit;
            }
            steps += 1;
            turn += 1;
            if let Some(mcp) = &self.tools.mcp {
                // The first call waits for servers still starting (each within its
                // start-up timeout), so their tools are there from the start.
                if steps == 1 {
                    mcp.wait_started().await;
                }
                for text in mcp.notices_since(&mut self.state.mcp_seen) {
                    sink(Event::Warning {
                        message: text.clone(),
                    });
                    self.state.reminders.notify(text);
                }
            }
            // Instruction files and skills as they are on disk now.
            let live = self.live.map(LiveContext::current);
            let mut request = self.request;
            if let Some(live) = &live {
                request.instructions = &live.instructions;
                request.disk_skills = &live.skills;
                request.memory = live.memory.as_deref();
            }
            let prepared = prepare_turn(self.store, &request, &self.tools)?;
            self.pack_notice(&prepared);
            let pack = prepared.pack.clone();
            self.count(
                &pack,
                OutcomeCounts {
                    turns: 1,
                    builtin_fallbacks: u64::from(prepared.prompt.metadata.fallback.is_some()),
                    ..OutcomeCounts::default()
                },
            );
            let running = self.tools.tasks.running();
            if steps == 1 && running > 0 {
                self.state.reminders.notify(format!(
                    "{running} background task{} from earlier still running. Check on {} with task_query or task_output, and stop what is no longer needed with task_stop.",
                    if running == 1 { " is" } else { "s are" },
                    if running == 1 { "it" } else { "them" }
                ));
            }
            if self.max_steps > 3 && steps + 1 == self.max_steps {
                self.state.reminders.notify(format!(
                    "You have 2 model calls left in this run (the step limit is {}). Finish what you are doing and give your final answer now; anything left undone, say so.",
                    self.max_steps
                ));
            }
            let meta = &prepared.prompt.metadata;
            transcript.append(&Record::Turn {
                turn,
                prompt: meta.clone(),
            })?;
            sink(Event::TurnStarted {
                turn,
                pack: format!(
                    "{} {} ({})",
                    meta.pack.name, meta.pack.version, meta.pack.source
                ),
                fallback: meta.fallback.clone(),
            });

            let inject =
                |text: String, messages: &mut Vec<Message>, transcript: &mut Transcript| {
                    let message = Message::User { content: text };
                    transcript.append(&Record::Message {
                        message: message.clone(),
                    })?;
                    messages.push(message);
                    Ok::<_, RuntimeError>(())
                };
            for text in self.tools.tasks.take_notifications() {
                sink(Event::Notification { text: text.clone() });
                inject(text, messages, transcript)?;
            }
            if self.context_limit.is_some() {
                // Once per provider: how large the server says its context is.
                if steps == 1 {
                    self.provider.discover_context().await;
                }
                if let Some(trigger) = self.compaction_trigger() {
                    self.make_room(messages, &prepared, trigger, transcript, sink)
                        .await?;
                }
            }
            let names = prepared.toolbox.names();
            let todos = self.tools.todos();
            for text in self.state.reminders.before_step(steps == 1, &todos, &names) {
                inject(text, messages, transcript)?;
            }
            let mut view =
                compaction::view(messages, self.state.compaction.as_ref(), self.state.trimmed);
            // Transient reminders (plan mode) go into this request only, at its end where
            // the model reads them last; the conversation and the transcript never keep them.
            view.extend(
                self.state
                    .reminders
                    .transient(&todos)
                    .into_iter()
                    .map(|content| Message::User { content }),
            );
            let request = ModelRequest {
                system: &prepared.prompt.text,
                messages: &view,
                tools: &prepared.specs,
            };
            let response = {
                let mut on_delta = |delta: Delta<'_>| {
                    sink(match delta {
                        Delta::Text(text) => Event::TextDelta {
                            text: text.to_string(),
                        },
                        Delta::Reasoning(text) => Event::ReasoningDelta {
                            text: text.to_string(),
                        },
                    })
                };
                let mut cancelled = cancel.clone();
                tokio::select! {
                    response = self.provider.complete(&request, &mut on_delta) => Some(response),
                    _ = cancelled.wait_for(|c| *c) => None,
                }
            };
            let aborted = OutcomeCounts {
                aborted_turns: 1,
                ..OutcomeCounts::default()
            };
            let Some(response) = response else {
                self.count(&pack, aborted);
                // Nothing of a half-streamed answer is kept: the next request must not
                // carry an assistant message that ends mid-sentence.
                transcript.append(&Record::Interrupted { turn })?;
                break Finish::Interrupted;
            };
            let model_error = OutcomeCounts {
                model_errors: 1,
                ..OutcomeCounts::default()
            };
            let mut response = match response {
                // Too big for the model: summarise older history once and try again,
                // now compacting against the context the server reported.
                Err(ProviderError::ContextOverflow {
                    context_tokens: Some(context),
                    ..
                }) if !overflow_retried => {
                    overflow_retried = true;
                    self.provider.learn_context(context);
                    self.context_limit = Some(context);
                    if self.compact(messages, transcript, sink).await? {
                        sink(Event::Warning {
                            message: format!(
                                "the conversation outgrew the model's context of {context} tokens; older history was summarised and the step is tried again"
                            ),
                        });
                        steps -= 1;
                        continue;
                    }
                    self.count(&pack, model_error);
                    return Err(RunError::Provider(ProviderError::ContextOverflow {
                        url: self.provider.settings().endpoint(),
                        status: 400,
                        body: "nothing older is left to summarise".to_string(),
                        prompt_tokens: None,
                        context_tokens: Some(context),
                    }));
                }
                Err(e) => {
                    self.count(&pack, model_error);
                    return Err(e.into());
                }
                Ok(response) => response,
            };
            let cut_off = response.stop_reason.as_deref().is_some_and(is_length_stop);
            // A call cut off mid-arguments (`{"path":`) must never be stored or sent back
            // as it is: servers refuse the whole history from then on. It is kept with
            // empty arguments and answered with an error, so the model can send it again.
            let mut broken = Vec::new();
            for call in &mut response.tool_calls {
                if !arguments_complete(&call.arguments) {
                    let partial = std::mem::replace(&mut call.arguments, "{}".to_string());
                    broken.push((call.id.clone(), partial));
                }
            }
            if cut_off {
                sink(Event::Warning {
                    message: match (broken.is_empty(), self.provider.settings().max_tokens) {
                        (true, Some(max)) => format!("the model's answer was cut off at its output limit (max_tokens = {max})"),
                        (true, None) => "the model's answer was cut off at the server's output limit".to_string(),
                        (false, _) => "the model's answer was cut off in the middle of a tool call; the call was not run and the model is asked to send it again".to_string(),
                    },
                });
            }
            usage += response.usage;
            self.state.reported_tokens = response.usage.total();
            self.count(
                &pack,
                OutcomeCounts {
                    input_tokens: response.usage.input_tokens,
                    output_tokens: response.usage.output_tokens,
                    ..OutcomeCounts::default()
                },
            );
            let message = response.to_message();
            transcript.append(&Record::Message {
                message: message.clone(),
            })?;
            messages.push(message);
            if !response.text.is_empty() {
                sink(Event::AssistantMessage {
                    turn,
                    text: response.text.clone(),
                });
            }

            let denied_before = self.tools.denials();
            let runnable: Vec<ToolCall> = response
                .tool_calls
                .iter()
                .filter(|c| !broken.iter().any(|(id, _)| *id == c.id))
                .cloned()
                .collect();
            let mut ran = dispatch(&prepared.toolbox, &runnable, &cancel, sink)
                .await
                .into_iter();
            let outputs: Vec<ToolOutput> = response
                .tool_calls
                .iter()
                .map(|call| match broken.iter().find(|(id, _)| *id == call.id) {
                    Some((_, partial)) => {
                        sink(Event::ToolCallStarted {
                            id: call.id.clone(),
                            name: call.name.clone(),
                            arguments: partial.clone(),
                        });
                        let output = cut_off_call(&call.name, partial, cut_off);
                        sink(Event::ToolCallCompleted {
                            id: call.id.clone(),
                            name: call.name.clone(),
                            is_error: true,
                            output: output.content.clone(),
                        });
                        output
                    }
                    None => ran.next().unwrap_or_else(|| {
                        ToolOutput::error("not run: the user interrupted the run")
                    }),
                })
                .collect();
            self.count(
                &pack,
                OutcomeCounts {
                    tool_calls: outputs.len() as u64,
                    tool_errors: outputs.iter().filter(|o| o.is_error).count() as u64,
                    permission_denials: self.tools.denials().saturating_sub(denied_before),
                    ..OutcomeCounts::default()
                },
            );
            for (call, output) in response.tool_calls.iter().zip(outputs) {
                let message = Message::Tool {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    content: output.content,
                    is_error: output.is_error,
                };
                transcript.append(&Record::Message {
                    message: message.clone(),
                })?;
                messages.push(message);
            }
            transcript.append(&Record::Usage {
                turn,
                usage: response.usage,
                stop_reason: response.stop_reason.clone(),
            })?;
            sink(Event::TurnCompleted {
                turn,
                usage: response.usage,
                stop_reason: response.stop_reason.clone(),
            });
            if *cancel.borrow() {
                self.count(&pack, aborted);
                transcript.append(&Record::Interrupted { turn })?;
                break Finish::Interrupted;
            }
            if response.tool_calls.is_empty() {
                break if cut_off {
                    Finish::CutOff
                } else {
                    Finish::Done
                };
            }
        };
        sink(Event::SessionFinished {
            session_id: self.session_id.clone(),
            reason: finish,
            turns: turn,
            usage,
        });
        Ok(Outcome {
            finish,
            turns: turn,
            usage,
        })
    }
}
