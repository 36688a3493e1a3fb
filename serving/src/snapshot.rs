//! An immutable snapshot of one pack: its identity, its files, and its templates compiled
//! once.

use std::collections::HashMap;

use pack_contract::{Contract, compile_checked, strict_registry};
use serde::Serialize;

/// Where a snapshot came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Remote,
    Builtin,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Source::Remote => "remote",
            Source::Builtin => "builtin",
        })
    }
}

/// Identity of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotMeta {
    pub name: String,
    pub version: semver::Version,
    /// The channel sequence that installed it (0 for the built-in pack).
    pub sequence: u64,
    pub source: Source,
    /// SHA-256 of the sealed pack (remote) or of the canonical tar (built-in).
    pub sha256: String,
    pub schema: u32,
}

/// Reading or rendering from a snapshot failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("pack {pack} has no file {key:?}")]
    Missing { pack: String, key: String },
    #[error("pack {pack}: template {key:?} failed to render: {reason}")]
    Render {
        pack: String,
        key: String,
        reason: String,
    },
    #[error("pack {pack} targets template schema {schema}, which this build does not know")]
    UnknownSchema { pack: String, schema: u32 },
    #[error("pack {pack} has invalid templates:\n{problems}")]
    Invalid { pack: String, problems: String },
    #[error("pack {pack} lacks templates the runtime needs: {missing}")]
    Incomplete { pack: String, missing: String },
}

impl SnapshotError {
    /// A stable, machine-readable name for the kind of failure (`snake_case`), as
    /// `pack_client::ClientError::kind` gives for refreshes.
    pub fn kind(&self) -> &'static str {
        match self {
            SnapshotError::Missing { .. } => "missing",
            SnapshotError::Render { .. } => "render_failed",
            SnapshotError::UnknownSchema { .. } => "unknown_schema",
            SnapshotError::Invalid { .. } => "invalid_templates",
            SnapshotError::Incomplete { .. } => "incomplete",
        }
    }
}

/// One pack, immutable. Cheap to share: callers hold it in an `Arc`.
pub struct Snapshot {
    meta: SnapshotMeta,
    files: HashMap<String, Box<[u8]>>,
    templates: handlebars::Handlebars<'static>,
    /// The contract the templates were checked against, which renders are held to.
    contract: Contract,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("meta", &self.meta)
            .field("files", &self.files.len())
            .finish_non_exhaustive()
    }
}

impl Snapshot {
    /// Builds a snapshot, compiling every `.hbs` file once after checking it against the
    /// contract the pack declares ([`Contract::of_pack`]: its agent schema, its own
    /// `contract.json`, or plain files).
    pub fn new(
        meta: SnapshotMeta,
        files: impl IntoIterator<Item = (String, Vec<u8>)>,
    ) -> Result<Self, SnapshotError> {
        Snapshot::build(meta, files.into_iter().collect(), None)
    }

    /// [`Snapshot::new`] held to `contract` instead of the one the pack declares: for a
    /// built-in pack directory, which has no header to declare one.
    pub fn with_contract(
        meta: SnapshotMeta,
        files: impl IntoIterator<Item = (String, Vec<u8>)>,
        contract: Contract,
    ) -> Result<Self, SnapshotError> {
        Snapshot::build(meta, files.into_iter().collect(), Some(contract))
    }

    fn build(
        meta: SnapshotMeta,
        files: Vec<(String, Vec<u8>)>,
        contract: Option<Contract>,
    ) -> Result<Self, SnapshotError> {
        let pack = format!("{} {}", meta.name, meta.version);
        let files: HashMap<String, Box<[u8]>> = files
            .into_iter()
            .map(|(k, v)| (k, v.into_boxed_slice()))
            .collect();
        let contract = match contract {
            Some(contract) => contract,
            None => Contract::of_pack(meta.schema, |path| files.get(path).map(|b| &b[..]))
                .map_err(|e| SnapshotError::Invalid {
                    pack: pack.clone(),
                    problems: e.to_string(),
                })?
                .ok_or_else(|| SnapshotError::UnknownSchema {
                    pack: pack.clone(),
                    schema: meta.schema,
                })?,
        };
        let mut templates = strict_registry();
        let mut problems = Vec::new();
        let mut names: Vec<&String> = files.keys().filter(|k| k.ends_with(".hbs")).collect();
        names.sort();
        for name in names {
            let Ok(source) = std::str::from_utf8(&files[name]) else {
                problems.push(format!("{name}: not UTF-8"));
                continue;
            };
            // Checked and compiled in one parse; the registry takes that template.
            match compile_checked(name, source, &contract) {
                Ok(template) => templates.register_template(name, template),
                Err(errors) => problems.extend(errors.iter().map(ToString::to_string)),
            }
        }
        if !problems.is_empty() {
            return Err(SnapshotError::Invalid {
                pack,
                problems: problems.join("\n"),
            });
        }
        Ok(Snapshot {
            meta,
            files,
            templates,
            contract,
        })
    }

    /// The contract the templates were checked against.
    pub fn contract(&self) -> &Contract {
        &self.contract
    }

    /// Checks `vars` against this pack's contract, as [`check_vars`] does for an agent
    /// schema; under the `files` contract, which knows no variables, anything goes.
    pub fn check_vars(&self, vars: &serde_json::Value) -> Result<(), VarsError> {
        if self.contract.is_open() {
            return Ok(());
        }
        vars_fit(&self.contract, vars)
    }

    pub fn meta(&self) -> &SnapshotMeta {
        &self.meta
    }

    pub fn name(&self) -> &str {
        &self.meta.name
    }

    pub fn version(&self) -> &semver::Version {
        &self.meta.version
    }

    pub fn source(&self) -> Source {
        self.meta.source
    }

    pub fn sha256(&self) -> &str {
        &self.meta.sha256
    }

    /// The bytes of one file.
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.files.get(key).map(|b| &b[..])
    }

    /// The bytes of one file, or an error naming the pack and the key.
    pub fn read(&self, key: &str) -> Result<&[u8], SnapshotError> {
        self.get(key).ok_or_else(|| SnapshotError::Missing {
            pack: format!("{} {}", self.meta.name, self.meta.version),
            key: key.to_string(),
        })
    }

    /// Every file key, sorted.
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.files.keys().map(String::as_str).collect();
        keys.sort_unstable();
        keys
    }

    pub fn has_template(&self, key: &str) -> bool {
        self.templates.has_template(key)
    }

    /// Renders a compiled template in strict mode with no escaping.
    pub fn render(&self, key: &str, context: &impl Serialize) -> Result<String, SnapshotError> {
        if !self.templates.has_template(key) {
            return Err(SnapshotError::Missing {
                pack: format!("{} {}", self.meta.name, self.meta.version),
                key: key.to_string(),
            });
        }
        self.templates
            .render(key, context)
            .map_err(|e| SnapshotError::Render {
                pack: format!("{} {}", self.meta.name, self.meta.version),
                key: key.to_string(),
                reason: e.to_string(),
            })
    }

    /// Checks that every key in `required` exists.
    pub fn require(&self, required: &[&str]) -> Result<(), SnapshotError> {
        let missing: Vec<&str> = required
            .iter()
            .copied()
            .filter(|k| !self.files.contains_key(*k))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(SnapshotError::Incomplete {
                pack: format!("{} {}", self.meta.name, self.meta.version),
                missing: missing.join(", "),
            })
        }
    }
}

/// Variables given for a render that do not fit the contract of the pack's schema: a name
/// the contract does not have, or a value of another shape than it says. Names the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("variables do not fit the contract of {}: {problem}", contract_named(*schema))]
pub struct VarsError {
    pub schema: u32,
    pub problem: String,
}

/// The contract of a pack of header `schema`, as messages name it.
fn contract_named(schema: u32) -> String {
    match pack_contract::Kind::of_schema(schema) {
        pack_contract::Kind::Agent(n) => format!("schema {n}"),
        pack_contract::Kind::App => format!("the pack's {}", pack_contract::APP_CONTRACT_PATH),
        pack_contract::Kind::Files => "plain files".to_string(),
    }
}

/// Checks `vars` against the contract of `schema`: every name is one the contract lists, and
/// every value has the shape it gives (a string, a bool, an object, a list of those). Names
/// the contract lists but `vars` lacks are left to the strict render, which refuses the ones
/// a template reads.
pub fn check_vars(schema: u32, vars: &serde_json::Value) -> Result<(), VarsError> {
    let Some(contract) = Contract::builtin(schema) else {
        return Err(VarsError {
            schema,
            problem: "this build does not know that schema".to_string(),
        });
    };
    vars_fit(&contract, vars)
}

fn vars_fit(contract: &Contract, vars: &serde_json::Value) -> Result<(), VarsError> {
    use pack_contract::Shape;
    use serde_json::Value;

    fn found(value: &Value) -> &'static str {
        match value {
            Value::Null => "null",
            Value::Bool(_) => "a bool",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "a list",
            Value::Object(_) => "an object",
        }
    }
    fn fields(
        at: &str,
        shape: &std::collections::BTreeMap<String, Shape>,
        value: &Value,
    ) -> Result<(), String> {
        let Value::Object(given) = value else {
            return Err(format!("{at} must be an object, found {}", found(value)));
        };
        for (name, value) in given {
            let path = if at.is_empty() {
                name.clone()
            } else {
                format!("{at}.{name}")
            };
            let Some(field) = shape.get(name) else {
                let known: Vec<&str> = shape.keys().map(String::as_str).collect();
                return Err(format!(
                    "{path} is not in the contract; {} has {}",
                    if at.is_empty() { "the top level" } else { at },
                    known.join(", ")
                ));
            };
            check(&path, field, value)?;
        }
        Ok(())
    }
    fn check(at: &str, shape: &Shape, value: &Value) -> Result<(), String> {
        match (shape, value) {
            (Shape::String, Value::String(_)) | (Shape::Bool, Value::Bool(_)) => Ok(()),
            (Shape::Object(shape), value) => fields(at, shape, value),
            (Shape::List(item), Value::Array(items)) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, value)| check(&format!("{at}.{i}"), item, value)),
            (Shape::String, other) => Err(format!("{at} must be a string, found {}", found(other))),
            (Shape::Bool, other) => Err(format!("{at} must be a bool, found {}", found(other))),
            (Shape::List(_), other) => Err(format!("{at} must be a list, found {}", found(other))),
        }
    }

    let schema = contract.schema();
    fields("", contract.variables(), vars).map_err(|problem| VarsError { schema, problem })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_held_to_the_contract_names_and_shapes() {
        let ok = serde_json::json!({
            "data_dir": "/home/me",
            "tools": {"read": true},
        });
        assert_eq!(check_vars(1, &ok), Ok(()));
        let problem = |vars: serde_json::Value| check_vars(1, &vars).unwrap_err().problem;
        assert_eq!(
            problem(serde_json::json!({"data_dir": 5})),
            "data_dir must be a string, found a number"
        );
        assert_eq!(
            problem(serde_json::json!({"tools": {"read": "yes"}})),
            "tools.read must be a bool, found a string"
        );
        assert!(
            problem(serde_json::json!({"data-dir": "/x"}))
                .starts_with("data-dir is not in the contract; the top level has ")
        );
        assert!(
            problem(serde_json::json!({"tools": {"rea": true}}))
                .starts_with("tools.rea is not in the contract; tools has bash, ")
        );
        assert!(
            check_vars(99, &ok)
                .unwrap_err()
                .to_string()
                .contains("schema 99")
        );
    }
}
