//! The native half of the `promptpack` Python package: the same [`pack_client`] the agent
//! and `pack-client` run — verification, release pins, rollouts, crash-safe installs, the
//! file view, failure reports, wholesale fallback — behind a small Python API.
//!
//! - `Client(cache_dir=…, builtin_dir=…, config=…, client_version=…, contract=…)` opens the
//!   cache like `pack-client` does, with the bundled prompts read from a directory (checked
//!   the way `packs/builtin` is checked at build time, against the app's contract), or the
//!   config's `builtin_dir`.
//! - `capture()` gives an immutable `Snapshot`; `Snapshot.render` renders under the strict
//!   contract and never falls back; `Client.render` serves a request whole from one pack, and
//!   from the bundled pack when the installed one fails (counted, reported, marked bad after
//!   repeated failures, as in the agent).
//! - `refresh()` runs one refresh; `start()` runs the six-hour schedule and the watch on a
//!   background thread, `stop()` ends them.
//!
//! Every call that waits (a refresh, starting and stopping) releases the GIL.

// `unwrap` and `expect` are for tests: shipped code says what failed (STYLE.md, "Weight").
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pack_client::accepts::Accepts;
use pack_client::schedule::Schedule;
use pack_client::{Client, ClientConfig, ClientError, Snapshot, SnapshotError, Source, builtin};
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

pyo3::create_exception!(
    _native,
    PromptpackError,
    PyException,
    "Something promptpack could not do; `kind` names what (the kinds `pack-client` reports)."
);
pyo3::create_exception!(
    _native,
    RenderError,
    PromptpackError,
    "A template did not render: missing, not a template, or a variable the contract needs is absent."
);

/// Variables nested deeper than this are refused: a prompt's variables are a few levels deep,
/// and converting them must not exhaust the stack on a self-referencing structure.
const MAX_VARS_DEPTH: usize = 64;

fn error(kind: &str, message: String, class: fn(String) -> PyErr) -> PyErr {
    let err = class(message);
    Python::attach(|py| {
        // Setting an attribute on a fresh exception object cannot fail in practice; if it
        // did, the exception still carries its message.
        let _ = err.value(py).setattr("kind", kind);
    });
    err
}

fn client_error(e: &ClientError) -> PyErr {
    error(
        e.kind(),
        pack_protocol::error_text::report(e),
        PromptpackError::new_err,
    )
}

fn render_error(e: &SnapshotError) -> PyErr {
    error(e.kind(), e.to_string(), RenderError::new_err)
}

/// Python values to the JSON a template renders from: dicts (string keys), lists and tuples,
/// strings, ints, floats, bools and None.
fn to_json(value: &Bound<'_, PyAny>, depth: usize) -> PyResult<serde_json::Value> {
    use serde_json::Value;
    if depth > MAX_VARS_DEPTH {
        return Err(PyValueError::new_err(format!(
            "template variables are nested deeper than {MAX_VARS_DEPTH} levels"
        )));
    }
    if value.is_none() {
        return Ok(Value::Null);
    }
    // bool before int: Python's bool is an int.
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(i) = value.cast::<PyInt>() {
        if let Ok(n) = i.extract::<i64>() {
            return Ok(Value::from(n));
        }
        if let Ok(n) = i.extract::<u64>() {
            return Ok(Value::from(n));
        }
        return Err(PyValueError::new_err(format!(
            "the integer {i} does not fit in 64 bits"
        )));
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        let f = f.value();
        return serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| PyValueError::new_err(format!("{f} has no JSON form")));
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Value::String(s.extract::<String>()?));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        let mut map = serde_json::Map::with_capacity(dict.len());
        for (key, item) in dict.iter() {
            let Ok(key) = key.cast::<PyString>() else {
                return Err(PyTypeError::new_err(format!(
                    "template variable names must be strings, not {}",
                    key.get_type().name()?
                )));
            };
            map.insert(key.extract::<String>()?, to_json(&item, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let items: PyResult<Vec<Value>> = value
            .try_iter()?
            .map(|item| to_json(&item?, depth + 1))
            .collect();
        return Ok(Value::Array(items?));
    }
    Err(PyTypeError::new_err(format!(
        "template variables are dicts, lists, strings, numbers, bools and None, not {}",
        value.get_type().name()?
    )))
}

fn vars_json(vars: Option<&Bound<'_, PyAny>>) -> PyResult<serde_json::Value> {
    match vars {
        None => Ok(serde_json::Value::Object(serde_json::Map::new())),
        Some(vars) => to_json(vars, 0),
    }
}

/// One pack, captured: every read and render on it sees the same pack, whatever installs
/// meanwhile.
#[pyclass(frozen, name = "Snapshot", module = "promptpack")]
struct PySnapshot {
    inner: Arc<Snapshot>,
}

#[pymethods]
impl PySnapshot {
    /// The pack's name (`builtin` for the bundled prompts).
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// The pack's version (`0.0.0` for the bundled prompts).
    #[getter]
    fn version(&self) -> String {
        self.inner.version().to_string()
    }

    /// The channel document's sequence the pack was installed under (0 for the bundled
    /// prompts).
    #[getter]
    fn sequence(&self) -> u64 {
        self.inner.meta().sequence
    }

    /// `"remote"` (installed from the server) or `"builtin"` (the bundled prompts).
    #[getter]
    fn source(&self) -> &'static str {
        match self.inner.source() {
            Source::Remote => "remote",
            Source::Builtin => "builtin",
        }
    }

    /// SHA-256 of the sealed pack (of the canonical tar for the bundled prompts).
    #[getter]
    fn sha256(&self) -> &str {
        self.inner.sha256()
    }

    /// The template schema the pack targets.
    #[getter]
    fn schema(&self) -> u32 {
        self.inner.meta().schema
    }

    /// The pack's file paths, sorted.
    fn keys(&self) -> Vec<String> {
        self.inner.keys().into_iter().map(str::to_owned).collect()
    }

    /// A file's bytes.
    fn read<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyBytes>> {
        self.inner
            .read(path)
            .map(|bytes| PyBytes::new(py, bytes))
            .map_err(|e| render_error(&e))
    }

    /// Renders a template of this pack under the strict contract: a missing variable is an
    /// error, nothing is escaped, and nothing falls back.
    #[pyo3(signature = (name, vars = None))]
    fn render(&self, name: &str, vars: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
        let vars = vars_json(vars)?;
        // Held to the pack's declared contract, as `pack-client render --vars` is.
        self.inner
            .check_vars(&vars)
            .map_err(|e| error("contract", e.to_string(), RenderError::new_err))?;
        self.inner.render(name, &vars).map_err(|e| render_error(&e))
    }

    fn __repr__(&self) -> String {
        format!(
            "<promptpack.Snapshot {} {} ({}, sequence {})>",
            self.inner.name(),
            self.inner.version(),
            self.source(),
            self.sequence()
        )
    }
}

/// A prompt-pack client: the cache, the refresh, the schedule and watch, and the store that
/// hands out snapshots.
#[pyclass(frozen, name = "Client", module = "promptpack")]
struct PyClient {
    client: Arc<Client>,
    runtime: tokio::runtime::Runtime,
    schedule: Mutex<Option<Schedule>>,
}

#[pymethods]
impl PyClient {
    #[new]
    #[pyo3(signature = (*, cache_dir, builtin_dir = None, config = None, client_version = "0.0.0", contract = None))]
    fn new(
        py: Python<'_>,
        cache_dir: PathBuf,
        builtin_dir: Option<PathBuf>,
        config: Option<PathBuf>,
        client_version: &str,
        contract: Option<PathBuf>,
    ) -> PyResult<Self> {
        let version = semver::Version::parse(client_version).map_err(|e| {
            PyValueError::new_err(format!(
                "client_version {client_version:?} is not a semantic version (like 1.4.0): {e}"
            ))
        })?;
        py.detach(|| {
            let config = match &config {
                Some(path) => ClientConfig::load(path, cache_dir, version),
                None => Ok(ClientConfig::new(cache_dir, version)),
            }
            .map_err(|e| client_error(&e))?;
            // The contract the app's packs keep: this argument ("agent", "files" or an app
            // contract file), else the config's, else the one `builtin_dir` ships as
            // contract.json.
            let mut config = config;
            let accepts = match (&contract, &builtin_dir) {
                (Some(value), _) => {
                    Accepts::parse(std::path::Path::new("."), &value.to_string_lossy()).map(Some)
                }
                (None, Some(dir)) if config.contract == Accepts::Agent => {
                    Accepts::default_for(Some(dir)).map(Some)
                }
                (None, _) => Ok(None),
            }
            .map_err(|reason| {
                client_error(&ClientError::Config {
                    path: "contract".to_string(),
                    reason,
                })
            })?;
            if let Some(accepts) = accepts {
                config.contract = accepts;
            }
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("promptpack")
                .enable_all()
                .build()
                .map_err(|e| {
                    PromptpackError::new_err(format!("starting the client's runtime: {e}"))
                })?;
            // The bundled prompts: this argument, else the config's `builtin_dir`, else the
            // pack compiled into the wheel (the repository's packs/builtin).
            let client = {
                let _entered = runtime.enter();
                match &builtin_dir {
                    Some(dir) => builtin::from_dir_for(dir, &config.contract)
                        .and_then(|builtin| Client::with_builtin(config, builtin)),
                    None => Client::new(config),
                }
                .map_err(|e| client_error(&e))?
            };
            Ok(PyClient {
                client: Arc::new(client),
                runtime,
                schedule: Mutex::new(None),
            })
        })
    }

    /// The snapshot serving now. Cheap; capture once per request and read everything of
    /// that request from it.
    fn capture(&self) -> PySnapshot {
        PySnapshot {
            inner: self.client.store().capture(),
        }
    }

    /// The bundled prompts, as a snapshot.
    fn builtin(&self) -> PySnapshot {
        PySnapshot {
            inner: self.client.store().builtin().clone(),
        }
    }

    /// Renders `name` from the pack serving now; if the installed pack fails, the request
    /// is rendered whole from the bundled prompts instead (and the failure counted and
    /// reported, as in the agent). Returns `(text, snapshot it came from, fallback reason)`.
    #[pyo3(signature = (name, vars = None))]
    fn serve(
        &self,
        name: &str,
        vars: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(String, PySnapshot, Option<String>)> {
        let vars = vars_json(vars)?;
        // The variables are held to the contract first, as `pack-client render` holds them.
        let snapshot = self.client.store().capture();
        if let Err(e) = snapshot.check_vars(&vars) {
            return Err(error(
                "contract",
                format!("vars: {e}"),
                RenderError::new_err,
            ));
        }
        // When neither pack renders it, the error is the serving pack's (the one the caller
        // asked of), not the bundled prompts' that only confirmed it.
        let first = std::cell::RefCell::new(None);
        let served = self
            .client
            .store()
            .serve_from(snapshot, |s| {
                let result = s.render(name, &vars);
                if let Err(e) = &result {
                    first
                        .borrow_mut()
                        .get_or_insert_with(|| (e.kind(), e.to_string()));
                }
                result
            })
            .map_err(|e| {
                let (kind, message) = first.take().unwrap_or_else(|| (e.kind(), e.to_string()));
                error(kind, message, RenderError::new_err)
            })?;
        Ok((
            served.value,
            PySnapshot {
                inner: served.snapshot,
            },
            served.fallback,
        ))
    }

    /// One refresh now, under the config's deadline. Returns what happened as a dict:
    /// `outcome` (`installed`, `not_modified`, `unchanged`, `builtin`, `skipped`), its
    /// details, and `message`, one sentence for a person. Raises `PromptpackError` when it
    /// failed (the previous pack keeps serving).
    fn refresh<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client.clone();
        let outcome = py
            .detach(|| self.runtime.block_on(client.refresh_now()))
            .map_err(|e| client_error(&e))?;
        let mut value = serde_json::to_value(&outcome)
            .map_err(|e| PromptpackError::new_err(format!("refresh outcome: {e}")))?;
        if let Some(map) = value.as_object_mut() {
            map.insert("message".into(), outcome.to_string().into());
        }
        json_to_python(py, &value)
    }

    /// Starts the refresh schedule (every six hours, spread per install) and, when the
    /// config allows, the watch, on a background thread. Returns whether it watches. A
    /// second call while running does nothing.
    fn start(&self, py: Python<'_>) -> PyResult<bool> {
        let mut schedule = self.schedule.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(running) = schedule.as_ref() {
            return Ok(running.watching());
        }
        let client = self.client.clone();
        let started = py
            .detach(|| self.runtime.block_on(pack_client::schedule::start(client)))
            .map_err(|e| PromptpackError::new_err(format!("starting the schedule: {e}")))?;
        let watching = started.watching();
        *schedule = Some(started);
        Ok(watching)
    }

    /// Stops the schedule and the watch. Snapshots already captured keep working.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let running = self
            .schedule
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(running) = running {
            py.detach(|| self.runtime.block_on(running.shutdown()))
                .map_err(|e| PromptpackError::new_err(format!("stopping the schedule: {e}")))?;
        }
        Ok(())
    }

    /// What `pack-client status --json` prints, as a dict: what serves and why, the
    /// last success and failure, packs marked bad, the file view.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = serde_json::to_value(self.client.status())
            .map_err(|e| PromptpackError::new_err(format!("status: {e}")))?;
        json_to_python(py, &value)
    }
}

/// JSON the client produced, as Python values (through the standard `json` module).
fn json_to_python<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?
        .call_method1("loads", (value.to_string(),))
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<PyClient>()?;
    module.add_class::<PySnapshot>()?;
    module.add("PromptpackError", module.py().get_type::<PromptpackError>())?;
    module.add("RenderError", module.py().get_type::<RenderError>())?;
    Ok(())
}
