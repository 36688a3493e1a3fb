//! Background commands: `bash` with `run_in_background`, followed with `task_query`,
//! `task_output` and `task_stop`. A finished task is announced once, as a
//! `<notification>` block the loop adds before the next model call.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{Notify, oneshot};

use super::bash::kill_group;
use super::{Call, Gate, Tool, ToolContext, ToolError, ToolResult, cut_middle};
use crate::capabilities::ToolId;
use crate::permissions::Access;

/// Output kept per task; older bytes are dropped from the front.
const KEEP_BYTES: usize = 1024 * 1024;
/// How long `task_stop` waits after SIGTERM before it kills.
const STOP_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Running,
    Exited(Option<i32>),
    Stopped,
}

impl TaskState {
    fn describe(self) -> String {
        match self {
            TaskState::Running => "running".to_string(),
            TaskState::Exited(Some(code)) => format!("exited with code {code}"),
            TaskState::Exited(None) => "exited (killed by a signal)".to_string(),
            TaskState::Stopped => "stopped".to_string(),
        }
    }
}

#[derive(Debug)]
struct Output {
    bytes: Vec<u8>,
    /// Bytes dropped from the front to respect [`KEEP_BYTES`].
    dropped: usize,
    /// Absolute offset `task_output` has returned up to.
    read_to: usize,
}

#[derive(Debug)]
struct Task {
    id: String,
    command: String,
    started: Instant,
    pid: Option<u32>,
    state: Mutex<TaskState>,
    output: Mutex<Output>,
    changed: Notify,
    notified: Mutex<bool>,
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

impl Task {
    fn state(&self) -> TaskState {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn append(&self, chunk: &[u8]) {
        let mut out = self.output.lock().unwrap_or_else(PoisonError::into_inner);
        out.bytes.extend_from_slice(chunk);
        if out.bytes.len() > KEEP_BYTES {
            let extra = out.bytes.len() - KEEP_BYTES;
            out.bytes.drain(..extra);
            out.dropped += extra;
        }
        drop(out);
        self.changed.notify_waiters();
    }

    /// Output since the last call, as text.
    fn take_new(&self) -> String {
        let mut out = self.output.lock().unwrap_or_else(PoisonError::into_inner);
        let start = out.read_to.max(out.dropped);
        let skipped = start - out.read_to;
        let end = out.dropped + out.bytes.len();
        let text = String::from_utf8_lossy(&out.bytes[start - out.dropped..]).into_owned();
        out.read_to = end;
        if skipped > 0 {
            format!("… [{skipped} older bytes were dropped]\n{text}")
        } else {
            text
        }
    }

    fn tail(&self, max: usize) -> String {
        let out = self.output.lock().unwrap_or_else(PoisonError::into_inner);
        cut_middle(&String::from_utf8_lossy(&out.bytes), max)
    }
}

/// The background tasks of one session.
#[derive(Debug, Default)]
pub struct TaskManager {
    tasks: Mutex<BTreeMap<String, Arc<Task>>>,
    next: AtomicU32,
}

#[derive(Deserialize, JsonSchema)]
pub(super) struct QueryArgs {
    /// One task; without it, every task of the session.
    #[serde(default)]
    task_id: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
pub(super) struct OutputArgs {
    task_id: String,
    /// Block until there is new output or the task ends.
    #[serde(default)]
    wait: bool,
    /// Longest wait (default 30000).
    #[serde(default)]
    #[schemars(range(min = 1))]
    timeout_ms: Option<u64>,
}

#[derive(Deserialize, JsonSchema)]
pub(super) struct StopArgs {
    task_id: String,
}

pub(super) struct TaskQuery;

impl Tool for TaskQuery {
    type Args = QueryArgs;

    fn name(&self) -> &'static str {
        "task_query"
    }

    fn gate(&self) -> Gate {
        Gate::Tool(ToolId::TaskQuery)
    }

    fn read_only(&self) -> bool {
        true
    }

    fn access(&self, _context: &ToolContext, _args: &QueryArgs) -> Access {
        Access::Own
    }

    async fn run(&self, call: Call<'_>, args: QueryArgs) -> ToolResult {
        call.context.tasks.query(args)
    }
}

pub(super) struct TaskOutput;

impl Tool for TaskOutput {
    type Args = OutputArgs;

    fn name(&self) -> &'static str {
        "task_output"
    }

    fn gate(&self) -> Gate {
        Gate::Tool(ToolId::TaskOutput)
    }

    fn read_only(&self) -> bool {
        false
    }

    fn access(&self, _context: &ToolContext, _args: &OutputArgs) -> Access {
        Access::Own
    }

    async fn run(&self, call: Call<'_>, args: OutputArgs) -> ToolResult {
        // Reading output advances the task's read offset, so it is not a pure read.
        let max = call.context.limits.bash_bytes / 2;
        call.context.tasks.output(args, max).await
    }
}

pub(super) struct TaskStop;

impl Tool for TaskStop {
    type Args = StopArgs;

    fn name(&self) -> &'static str {
        "task_stop"
    }

    fn gate(&self) -> Gate {
        Gate::Tool(ToolId::TaskStop)
    }

    fn read_only(&self) -> bool {
        false
    }

    fn access(&self, _context: &ToolContext, _args: &StopArgs) -> Access {
        Access::Own
    }

    async fn run(&self, call: Call<'_>, args: StopArgs) -> ToolResult {
        call.context.tasks.stop(args).await
    }
}

async fn pump(task: Arc<Task>, mut reader: impl AsyncRead + Unpin) {
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => task.append(&buf[..n]),
        }
    }
}

impl TaskManager {
    /// Starts `cmd` (set up by `bash`, sandbox included) in the background and returns its
    /// task id; `command` is the script as the model wrote it.
    pub(super) fn spawn(&self, mut cmd: tokio::process::Command, command: &str) -> ToolResult {
        let mut child = cmd
            .spawn()
            .map_err(|e| ToolError::new(format!("cannot start the shell: {e}")))?;
        let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.start_kill();
            return Err(ToolError::new("the shell's output is not piped"));
        };
        let id = format!("bg-{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let (stop_tx, stop_rx) = oneshot::channel();
        let task = Arc::new(Task {
            id: id.clone(),
            command: command.to_string(),
            started: Instant::now(),
            pid: child.id(),
            state: Mutex::new(TaskState::Running),
            output: Mutex::new(Output {
                bytes: Vec::new(),
                dropped: 0,
                read_to: 0,
            }),
            changed: Notify::new(),
            notified: Mutex::new(false),
            stop: Mutex::new(Some(stop_tx)),
        });
        let stdout = tokio::spawn(pump(task.clone(), out));
        let stderr = tokio::spawn(pump(task.clone(), err));
        let watcher = task.clone();
        tokio::spawn(async move {
            let state = tokio::select! {
                status = child.wait() => TaskState::Exited(status.ok().and_then(|s| s.code())),
                _ = stop_rx => {
                    // Ask first, so the command can clean up; then make sure.
                    kill_group(watcher.pid, "-TERM");
                    match tokio::time::timeout(STOP_GRACE, child.wait()).await {
                        Ok(_) => {}
                        Err(_) => {
                            kill_group(watcher.pid, "-KILL");
                            let _ = child.start_kill();
                            let _ = child.wait().await;
                        }
                    }
                    TaskState::Stopped
                }
            };
            // A grandchild can keep the pipes open; the exit is what counts.
            let _ = tokio::time::timeout(Duration::from_secs(1), stdout).await;
            let _ = tokio::time::timeout(Duration::from_secs(1), stderr).await;
            *watcher.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
            watcher.changed.notify_waiters();
        });
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), task);
        Ok(format!(
            "started background task {id}: {command}\nFollow it with task_output (task_id \"{id}\"); you will also be notified when it finishes."
        ))
    }

    fn get(&self, id: &str) -> Result<Arc<Task>, ToolError> {
        let tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(task) = tasks.get(id) {
            return Ok(task.clone());
        }
        let live: Vec<&str> = tasks
            .values()
            .filter(|t| t.state() == TaskState::Running)
            .map(|t| t.id.as_str())
            .collect();
        Err(ToolError::new(if live.is_empty() {
            format!("unknown task id {id:?}; no background task is running")
        } else {
            format!("unknown task id {id:?}; running tasks: {}", live.join(", "))
        }))
    }

    fn query(&self, args: QueryArgs) -> ToolResult {
        let line = |t: &Task| {
            format!(
                "{}: {} after {}s — {}",
                t.id,
                t.state().describe(),
                t.started.elapsed().as_secs(),
                t.command
            )
        };
        if let Some(id) = args.task_id {
            return Ok(line(&*self.get(&id)?));
        }
        let tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        if tasks.is_empty() {
            return Ok("no background tasks in this session".to_string());
        }
        Ok(tasks
            .values()
            .map(|t| line(t))
            .collect::<Vec<_>>()
            .join("\n"))
    }

    async fn output(&self, args: OutputArgs, max: usize) -> ToolResult {
        let task = self.get(&args.task_id)?;
        if args.wait {
            let timeout = Duration::from_millis(args.timeout_ms.unwrap_or(30_000).min(600_000));
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                let changed = task.changed.notified();
                let pending = {
                    let out = task.output.lock().unwrap_or_else(PoisonError::into_inner);
                    out.dropped + out.bytes.len() > out.read_to
                };
                if pending || task.state() != TaskState::Running {
                    break;
                }
                if tokio::time::timeout_at(deadline, changed).await.is_err() {
                    break;
                }
            }
        }
        let text = task.take_new();
        let state = task.state().describe();
        if text.is_empty() {
            return Ok(format!("{}: {state}; no new output", task.id));
        }
        Ok(format!("{}: {state}\n{}", task.id, cut_middle(&text, max)))
    }

    async fn stop(&self, args: StopArgs) -> ToolResult {
        let task = self.get(&args.task_id)?;
        if task.state() != TaskState::Running {
            return Ok(format!("{} already {}", task.id, task.state().describe()));
        }
        let changed = task.changed.notified();
        if let Some(stop) = task
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(STOP_GRACE * 2, changed).await;
        // Stopping was asked for; announcing it as a surprise later would be noise.
        *task.notified.lock().unwrap_or_else(PoisonError::into_inner) = true;
        Ok(format!("{} {}", task.id, task.state().describe()))
    }

    /// One `<notification>` block per task that finished since the last call.
    pub fn take_notifications(&self) -> Vec<String> {
        let tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        for task in tasks.values() {
            let state = task.state();
            if state == TaskState::Running {
                continue;
            }
            let mut notified = task.notified.lock().unwrap_or_else(PoisonError::into_inner);
            if *notified {
                continue;
            }
            *notified = true;
            let status = match state {
                TaskState::Exited(Some(code)) => format!("exited\" exit_code=\"{code}"),
                TaskState::Exited(None) => "killed".to_string(),
                TaskState::Stopped | TaskState::Running => "stopped".to_string(),
            };
            out.push(format!(
                "<notification>\n<task id=\"{}\" status=\"{status}\">{}</task>\nBackground task {} {}. Output tail:\n{}\n</notification>",
                task.id,
                task.command,
                task.id,
                state.describe(),
                task.tail(2000).trim_end()
            ));
        }
        out
    }

    /// Kills every task still running (the session is ending).
    pub fn stop_all(&self) {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            if task.state() == TaskState::Running {
                kill_group(task.pid, "-KILL");
            }
        }
    }

    pub fn running(&self) -> usize {
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter(|t| t.state() == TaskState::Running)
            .count()
    }
}

impl Drop for TaskManager {
    fn drop(&mut self) {
        self.stop_all();
    }
}
