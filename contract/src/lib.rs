//! `pack-contract`: the runtime's variable contract and strict template validation.
//!
//! Kept apart from `pack-format` (the bytes) so that crates which only move packs around
//! (packd) never link a template engine. The publisher's `packer`, the client (which checks
//! a pack before installing it) and the runtime (which renders with [`strict_registry`])
//! depend on it. The contract files live next to this crate: `contract/schema-<n>.json`.
//!
//! A pack names the contract schema its templates were written for. The contract lists
//! every variable the agent runtime passes to templates, as a nested shape: leaves are
//! `"string"` or `"bool"`, objects nest, and a one-element array describes a list whose
//! items have that element's shape. `packer build` and the client both run
//! [`validate_template`] so a template that reads anything outside the contract never
//! ships and never goes live.
//!
//! The template language accepted here is deliberately a small subset of Handlebars:
//!
//! - variable expressions `{{path}}` (and `{{{path}}}`, which is the same thing because the
//!   runtime never HTML-escapes); a path must end at a string or bool, not an object or list;
//! - block helpers `#if` / `#unless` (any variable), `#each` (a list, optionally
//!   `as |item index|`), `#with` (an object, optionally `as |name|`), with `{{else}}` and
//!   `{{else if ...}}` chains;
//! - value helpers `eq`, `ne` (two arguments), `not` (one), `and`, `or` (two or more),
//!   inline or as subexpressions such as `{{#if (eq persona "mavis")}}`;
//! - inside `#each`: `this`, `this.field`, `field`, `@index`, `@first`, `@last`, and
//!   `../path` / `@root.path` to reach outside the item;
//! - comments.
//!
//! Partials, decorators, raw blocks, hash arguments (`key=value`), any other helper and
//! indexing into a list (`skills.0`) are rejected: a prompt pack is a flat set of files
//! the runtime assembles itself, and every feature left out is one a broken pack cannot
//! misuse.
//!
//! Line numbers come from the parsed template's source mapping, which handlebars 6 always
//! records (there is no switch to turn it on); the head of an `{{else if}}` is the one
//! element it keeps no position for, so problems there are reported at the `{{#if}}`.

// `unwrap` and `expect` are for tests: shipped code says what failed (STYLE.md, "Weight").
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use handlebars::template::{BlockParam, HelperTemplate, Parameter, Template, TemplateElement};
use handlebars::{Path, PathSeg};
use serde_json::Value;

use pack_format::FileProblem;

mod kind;
pub mod layout;
mod pieces;
pub mod plain;
mod syntax;
mod validator;

pub use kind::{APP_CONTRACT_PATH, APP_SCHEMA, FILES_SCHEMA, Kind};
pub use validator::Validator;

/// Text of every contract schema this build knows, by schema number.
const SCHEMA_1: &str = include_str!("../schema-1.json");

/// Block helpers that change what is rendered.
const BLOCK_HELPERS: &[&str] = &["if", "unless", "each", "with"];
/// Helpers that compute a bool from their arguments.
const VALUE_HELPERS: &[&str] = &["eq", "ne", "not", "and", "or"];

/// A contract file that does not describe a contract: what was expected, what was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed variable contract: {reason}")]
pub struct ContractError {
    pub reason: String,
}

/// The shape of one variable in the contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    String,
    Bool,
    Object(BTreeMap<String, Shape>),
    /// A list; every item has this shape.
    List(Box<Shape>),
}

impl Shape {
    fn parse(at: &str, value: &Value) -> Result<Shape, ContractError> {
        let bad = |reason: String| ContractError {
            reason: format!("{at}: {reason}"),
        };
        match value {
            Value::String(kind) => match kind.as_str() {
                "string" => Ok(Shape::String),
                "bool" => Ok(Shape::Bool),
                other => Err(bad(format!(
                    "expected \"string\" or \"bool\", found {other:?}"
                ))),
            },
            Value::Object(fields) => {
                let mut shape = BTreeMap::new();
                for (name, field) in fields {
                    shape.insert(name.clone(), Shape::parse(&join(at, name), field)?);
                }
                Ok(Shape::Object(shape))
            }
            Value::Array(items) => match items.as_slice() {
                [item] => Ok(Shape::List(Box::new(Shape::parse(
                    &format!("{at}[]"),
                    item,
                )?))),
                _ => Err(bad(format!(
                    "a list is described by a one-element array, found {} elements",
                    items.len()
                ))),
            },
            other => Err(bad(format!(
                "expected a type name, object or array, found {other}"
            ))),
        }
    }

    /// What a reader calls this shape in an error message.
    fn describe(&self) -> &'static str {
        match self {
            Shape::String => "a string",
            Shape::Bool => "a bool",
            Shape::Object(_) => "an object",
            Shape::List(_) => "a list",
        }
    }

    /// A value of this shape for a sample render: every string names its own path, every
    /// bool is `flag`, and every list has two items (or none when `flag` is false, so the
    /// `{{else}}` of an `#each` renders too).
    fn sample(&self, at: &str, flag: bool) -> Value {
        match self {
            Shape::String => Value::String(format!("<{at}>")),
            Shape::Bool => Value::Bool(flag),
            Shape::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(name, field)| (name.clone(), field.sample(&join(at, name), flag)))
                    .collect(),
            ),
            Shape::List(item) => {
                let count = if flag { 2 } else { 0 };
                Value::Array(
                    (0..count)
                        .map(|i| item.sample(&format!("{at}.{i}"), flag))
                        .collect(),
                )
            }
        }
    }
}

fn join(at: &str, name: &str) -> String {
    if at.is_empty() {
        name.to_string()
    } else {
        format!("{at}.{name}")
    }
}

/// The variables the runtime passes to templates for one schema version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contract {
    schema: u32,
    /// Pack files every pack of this schema must contain: the templates the runtime renders.
    templates: Vec<String>,
    /// Always [`Shape::Object`]: the template's root context.
    root: Shape,
    /// The sample contexts for `true` and `false` (derived from `root`; shared by clones).
    samples: Arc<[Value; 2]>,
    /// The `files` contract: templates must parse, and nothing is known of their variables.
    open: bool,
}

impl Contract {
    /// The contract compiled into this build for `schema`, or `None` for a schema this
    /// build does not know.
    #[allow(
        clippy::expect_used,
        reason = "compiled-in text that a unit test parses: a failure is a broken build"
    )]
    pub fn builtin(schema: u32) -> Option<Contract> {
        static SCHEMA_1_PARSED: OnceLock<Contract> = OnceLock::new();
        match schema {
            // The text is compiled in and a unit test parses it, so this cannot fail in a
            // build that passed its tests.
            1 => Some(
                SCHEMA_1_PARSED
                    .get_or_init(|| {
                        Contract::from_json(SCHEMA_1).expect("contract/schema-1.json is valid")
                    })
                    .clone(),
            ),
            _ => None,
        }
    }

    /// The schema numbers [`Contract::builtin`] knows.
    pub fn builtin_schemas() -> &'static [u32] {
        &[1]
    }

    /// Every header `schema` this build can check a pack of: the agent schemas it knows,
    /// [`FILES_SCHEMA`] and [`APP_SCHEMA`].
    pub fn known_schemas() -> Vec<u32> {
        let mut known = Contract::builtin_schemas().to_vec();
        known.extend([FILES_SCHEMA, APP_SCHEMA]);
        known
    }

    /// Whether this build can check a pack whose header says `schema`.
    pub fn knows(schema: u32) -> bool {
        match Kind::of_schema(schema) {
            Kind::Agent(n) => Contract::builtin_schemas().contains(&n),
            Kind::App | Kind::Files => true,
        }
    }

    /// The `files` contract: no template or variable required; a template, if the pack has
    /// any, must parse but is not checked against variables.
    pub fn files() -> Contract {
        let root = Shape::Object(BTreeMap::new());
        let samples = Arc::new([root.sample("", true), root.sample("", false)]);
        Contract {
            schema: FILES_SCHEMA,
            templates: Vec::new(),
            root,
            samples,
            open: true,
        }
    }

    /// The contract a pack whose header says `schema` is checked against, with `file` giving
    /// the pack's files by path: the built-in agent contract, the `files` contract, or the
    /// app contract the pack ships at [`APP_CONTRACT_PATH`]. `Ok(None)` for an agent schema
    /// this build does not know.
    pub fn of_pack<'f>(
        schema: u32,
        file: impl Fn(&str) -> Option<&'f [u8]>,
    ) -> Result<Option<Contract>, ContractError> {
        match Kind::of_schema(schema) {
            Kind::Agent(n) => Ok(Contract::builtin(n)),
            Kind::Files => Ok(Some(Contract::files())),
            Kind::App => {
                let bytes = file(APP_CONTRACT_PATH).ok_or_else(|| ContractError {
                    reason: format!(
                        "the pack declares an app contract but has no {APP_CONTRACT_PATH}"
                    ),
                })?;
                let text = std::str::from_utf8(bytes).map_err(|_| ContractError {
                    reason: format!("{APP_CONTRACT_PATH} is not UTF-8"),
                })?;
                Contract::app_from_json(text)
                    .map(Some)
                    .map_err(|e| ContractError {
                        reason: format!("{APP_CONTRACT_PATH}: {}", e.reason),
                    })
            }
        }
    }

    /// Parses an app's own contract: `{"templates": [...], "variables": {...}}`, the shape
    /// of `contract/schema-1.json` without the schema number (a `schema` key is ignored).
    pub fn app_from_json(text: &str) -> Result<Contract, ContractError> {
        Contract::parse(text, Some(APP_SCHEMA))
    }

    /// Parses a contract file: `{"schema": N, "variables": {...}}` (other top-level keys,
    /// such as `description`, are ignored).
    pub fn from_json(text: &str) -> Result<Contract, ContractError> {
        Contract::parse(text, None)
    }

    fn parse(text: &str, app: Option<u32>) -> Result<Contract, ContractError> {
        let bad = |reason: String| ContractError { reason };
        let doc: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if !doc.is_object() {
            return Err(bad(format!(
                "expected an object with \"templates\" and \"variables\", found {doc}"
            )));
        }
        let schema = match app {
            Some(schema) => schema,
            None => doc
                .get("schema")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| bad("expected a numeric \"schema\"".to_string()))?,
        };
        let variables = doc
            .get("variables")
            .ok_or_else(|| bad("expected a \"variables\" object".to_string()))?;
        let root = Shape::parse("", variables)?;
        if !matches!(root, Shape::Object(_)) {
            return Err(bad(format!(
                "\"variables\" must be an object, found {}",
                root.describe()
            )));
        }
        let templates = match doc.get("templates") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str().map(str::to_string).ok_or_else(|| {
                        bad(format!("\"templates\" must hold strings, found {item}"))
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(other) => return Err(bad(format!("\"templates\" must be a list, found {other}"))),
        };
        let samples = Arc::new([root.sample("", true), root.sample("", false)]);
        Ok(Contract {
            schema,
            templates,
            root,
            samples,
            open: false,
        })
    }

    /// The header `schema` of a pack of this contract.
    pub fn schema(&self) -> u32 {
        self.schema
    }

    pub fn kind(&self) -> Kind {
        Kind::of_schema(self.schema)
    }

    /// Whether templates are only parsed (the `files` contract), not checked against
    /// variables.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Checks a pack's app contract (`self`) against the one the app gives: the app must
    /// pass every variable the pack's templates may read, with the same shape, and every
    /// template the app renders must be one the pack's contract requires. The app may pass
    /// more variables and the pack may ship more templates. Returns what disagrees.
    pub fn fits_within(&self, given: &Contract) -> Result<(), String> {
        fn within(at: &str, pack: &Shape, app: &Shape) -> Result<(), String> {
            let shown = |at: &str| {
                if at.is_empty() {
                    "the top level".to_string()
                } else {
                    format!("'{at}'")
                }
            };
            match (pack, app) {
                (Shape::String, Shape::String) | (Shape::Bool, Shape::Bool) => Ok(()),
                (Shape::List(pack), Shape::List(app)) => within(&format!("{at}[]"), pack, app),
                (Shape::Object(pack), Shape::Object(app)) => {
                    for (name, field) in pack {
                        let path = join(at, name);
                        let Some(app_field) = app.get(name) else {
                            return Err(format!(
                                "the pack's contract has variable '{path}', which the app does \
                                 not pass (under {} it passes {})",
                                shown(at),
                                if app.is_empty() {
                                    "nothing".to_string()
                                } else {
                                    app.keys().cloned().collect::<Vec<_>>().join(", ")
                                }
                            ));
                        };
                        within(&path, field, app_field)?;
                    }
                    Ok(())
                }
                (pack, app) => Err(format!(
                    "variable {} is {} in the pack's contract and {} in the app's",
                    shown(at),
                    pack.describe(),
                    app.describe()
                )),
            }
        }
        within("", &self.root, &given.root)?;
        let missing: Vec<&str> = given
            .templates
            .iter()
            .filter(|path| !self.templates.contains(path))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "the app renders {}, which the pack's contract does not require",
                missing.join(", ")
            ));
        }
        Ok(())
    }

    /// Pack files the runtime needs (the contract's optional `templates` list).
    pub fn required_templates(&self) -> &[String] {
        &self.templates
    }

    /// The top-level variables.
    pub fn variables(&self) -> &BTreeMap<String, Shape> {
        match &self.root {
            Shape::Object(fields) => fields,
            // `from_json` only builds contracts whose root is an object.
            Shape::String | Shape::Bool | Shape::List(_) => {
                static EMPTY: BTreeMap<String, Shape> = BTreeMap::new();
                &EMPTY
            }
        }
    }

    /// A context that satisfies the contract: strings name their own path, every bool is
    /// `flag`, lists have two items when `flag` is true and none when it is false.
    pub fn sample_context(&self, flag: bool) -> Value {
        self.sample(flag).clone()
    }

    /// [`Contract::sample_context`], built once per contract: every template's check renders
    /// against both.
    fn sample(&self, flag: bool) -> &Value {
        &self.samples[usize::from(!flag)]
    }
}

/// A template that does not fit the contract or does not parse. Displays as
/// `FILE:LINE: MESSAGE`, e.g. `agents/mavis/system.hbs:3: unknown variable 'x'`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct TemplateError {
    pub file: String,
    /// 1-based line of the expression or block that is wrong.
    pub line: usize,
    pub message: String,
    /// What the author probably meant or can use instead, when there is something to say.
    pub hint: Option<String>,
}

/// Checks one template against `contract`: it parses, references only contract variables
/// (in every branch, not just the one a sample render takes), uses only the supported
/// helpers, and renders in strict mode against sample contexts. Returns the first problem;
/// [`validate_template_all`] returns every one.
pub fn validate_template(
    file_name: &str,
    source: &str,
    contract: &Contract,
) -> Result<(), TemplateError> {
    match validate_template_all(file_name, source, contract)
        .into_iter()
        .next()
    {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// Bytes of one template. Prompt templates are a few KB; handlebars takes time that grows
/// with the square of a template's length to compile it (it finds each element's line by
/// scanning from the start), so a template of megabytes from an untrusted pack would tie a
/// client up for minutes. At the limit, validation takes about 0.6 s on this project's 2-core
/// machine (the cost per size is in BENCHMARKS.md).
pub const MAX_TEMPLATE_LEN: usize = 128 * 1024;

/// Like [`validate_template`], but returns every problem in source order. To check many
/// templates against one contract, [`Validator::problems`] does the same and compiles a
/// piece that several of them share once.
pub fn validate_template_all(
    file_name: &str,
    source: &str,
    contract: &Contract,
) -> Vec<TemplateError> {
    Validator::new(contract).problems(file_name, source)
}

/// [`validate_template_all`] that hands back the compiled template when there is no
/// problem, for a registry to take as it is ([`handlebars::Handlebars::register_template`]):
/// parsing is most of what checking costs, and a client installing a pack would otherwise
/// parse every template twice.
pub fn compile_checked(
    file_name: &str,
    source: &str,
    contract: &Contract,
) -> Result<Template, Vec<TemplateError>> {
    if source.len() > MAX_TEMPLATE_LEN {
        return Err(vec![TemplateError {
            file: file_name.to_string(),
            line: 1,
            message: format!(
                "template is {} bytes, over the limit of {MAX_TEMPLATE_LEN} bytes per template; \
                 split it into smaller templates",
                source.len()
            ),
            hint: None,
        }]);
    }
    let template = match Template::compile_with_name(source, file_name.to_string()) {
        Ok(template) => template,
        Err(e) => {
            // The parser names its grammar's rules where it gave up; a scan for the unclosed
            // block or missing brace a person would look for says more, when it finds one.
            let (line, message) = match syntax::explain(source) {
                Some(problem) => (problem.line, problem.message),
                None => {
                    let reason = e.reason();
                    match e.pos() {
                        Some((line, column)) => (line, format!("column {column}: {reason}")),
                        None => (1, reason.to_string()),
                    }
                }
            };
            return Err(vec![TemplateError {
                file: file_name.to_string(),
                line,
                message: format!("template does not parse: {message}"),
                hint: None,
            }]);
        }
    };
    if contract.open {
        return Ok(template);
    }
    let mut errors = static_check(file_name, &template, contract);
    if errors.is_empty() {
        // The static walk above is the real check. The render is a second opinion from the
        // engine the runtime uses, with both bool settings so both sides of most branches
        // run.
        match render_check(file_name, template.clone(), contract) {
            Some(error) => errors.push(error),
            None => return Ok(template),
        }
    }
    errors.sort_by_key(|e| e.line);
    Err(errors)
}

/// Every problem of the walk over `template`'s elements against `contract`, in walk order.
fn static_check(file_name: &str, template: &Template, contract: &Contract) -> Vec<TemplateError> {
    let mut checker = Checker {
        file: file_name,
        frames: vec![Frame {
            this: &contract.root,
            is_each: false,
            block_params: Vec::new(),
        }],
        errors: Vec::new(),
    };
    checker.template(template, 1);
    checker.errors
}

/// Reads a directory that must be a complete pack for `contract`, as a built-in pack must
/// (the compiled-in one when the client is built, an app's own when a client opens with
/// one): every problem the pack-directory reader finds, every template checked against
/// `contract`, and every template the contract requires that is missing, all reported
/// together in one [`pack_format::FormatError::PackDirectory`].
pub fn read_complete_pack(
    root: &std::path::Path,
    contract: &Contract,
    limits: &pack_format::Limits,
) -> Result<pack_format::Payload, pack_format::FormatError> {
    let mut dir = pack_format::PackDir::scan(root, limits);
    let missing: Vec<&String> = (contract.required_templates().iter())
        .filter(|path| !dir.contains(path))
        .collect();
    for path in missing {
        dir.add_problem(pack_format::DirProblem::new(
            root.join(path),
            "missing; the runtime renders it",
        ));
    }
    dir.read(limits, Some(&template_check(contract)))
}

/// The check a pack directory's reader runs on every file ([`pack_format::FileCheck`]):
/// every `*.hbs` file must be UTF-8 and pass [`validate_template_all`] against `contract`;
/// under the `files` contract, other files pass [`plain::check_plain_file`]; otherwise they
/// are data. One [`Validator`] serves every file, so a piece of template that
/// many files share is compiled once.
pub fn template_check(contract: &Contract) -> impl Fn(&str, &[u8]) -> Vec<FileProblem> + Sync + '_ {
    let validator = Validator::new(contract);
    move |path, bytes| {
        if !path.ends_with(".hbs") {
            // The `files` contract also checks what the agents read (front matter, settings
            // syntax); the other contracts leave non-template files alone, as they always
            // have.
            return if contract.open {
                plain::check_plain_file(path, bytes)
            } else {
                Vec::new()
            };
        }
        match std::str::from_utf8(bytes) {
            Ok(source) => validator
                .problems(path, source)
                .into_iter()
                .map(|error| FileProblem {
                    line: Some(error.line),
                    message: error.message,
                    hint: error.hint,
                })
                .collect(),
            Err(e) => vec![FileProblem::new(format!(
                "not UTF-8 (invalid byte at offset {}); templates must be UTF-8 text",
                e.valid_up_to()
            ))],
        }
    }
}

/// A handlebars registry configured the way the runtime renders prompts: strict mode (a
/// missing variable is an error) and no HTML escaping (prompts are not HTML).
pub fn strict_registry() -> handlebars::Handlebars<'static> {
    let mut registry = handlebars::Handlebars::new();
    registry.set_strict_mode(true);
    registry.register_escape_fn(handlebars::no_escape);
    // Handlebars' own `if` / `unless` take the else branch for a missing variable even in
    // strict mode; these make a missing condition an error like everywhere else.
    registry.register_helper("if", Box::new(StrictIf { positive: true }));
    registry.register_helper("unless", Box::new(StrictIf { positive: false }));
    registry
}

/// `#if` / `#unless` that refuse a condition naming a variable the context does not have.
#[derive(Clone, Copy)]
struct StrictIf {
    positive: bool,
}

impl handlebars::HelperDef for StrictIf {
    fn call<'reg: 'rc, 'rc>(
        &self,
        h: &handlebars::Helper<'rc>,
        r: &'reg handlebars::Handlebars<'reg>,
        ctx: &'rc handlebars::Context,
        rc: &mut handlebars::RenderContext<'reg, 'rc>,
        out: &mut dyn handlebars::Output,
    ) -> handlebars::HelperResult {
        use handlebars::{JsonTruthy, Renderable};
        let name = if self.positive { "if" } else { "unless" };
        let param = h
            .param(0)
            .ok_or(handlebars::RenderErrorReason::ParamNotFoundForIndex(
                name, 0,
            ))?;
        if param.is_value_missing() {
            return Err(handlebars::RenderErrorReason::MissingVariable(
                param.relative_path().cloned(),
            )
            .into());
        }
        let include_zero = h
            .hash_get("includeZero")
            .and_then(|v| v.value().as_bool())
            .unwrap_or(false);
        let truthy = param.value().is_truthy(include_zero) == self.positive;
        match if truthy { h.template() } else { h.inverse() } {
            Some(t) => t.render(r, ctx, rc, out),
            None => Ok(()),
        }
    }
}

fn render_check(file_name: &str, template: Template, contract: &Contract) -> Option<TemplateError> {
    let mut registry = strict_registry();
    registry.register_template(file_name, template);
    for flag in [true, false] {
        if let Err(e) = registry.render(file_name, contract.sample(flag)) {
            let reason = e.reason().to_string();
            return Some(TemplateError {
                file: file_name.to_string(),
                line: e.line_no.unwrap_or(1),
                message: format!("does not render in strict mode: {reason}"),
                hint: None,
            });
        }
    }
    None
}

/// One level of context: the root, or the inside of an `#each` / `#with`.
struct Frame<'c> {
    /// What `this` is here.
    this: &'c Shape,
    /// Whether `@index`, `@first` and `@last` exist here.
    is_each: bool,
    /// `as |a b|` names bound by this block.
    block_params: Vec<(String, Binding<'c>)>,
}

#[derive(Clone, Copy)]
enum Binding<'c> {
    Value(&'c Shape),
    /// The index of an `#each` (a number).
    Index,
}

/// What a path resolved to.
#[derive(Clone, Copy)]
enum Resolved<'c> {
    Shape(&'c Shape),
    /// A number or bool the engine makes up (`@index`, `@first`, an `#each` index name).
    Scalar,
}

struct Checker<'a, 'c> {
    file: &'a str,
    frames: Vec<Frame<'c>>,
    errors: Vec<TemplateError>,
}

impl<'a, 'c> Checker<'a, 'c> {
    fn error(&mut self, line: usize, message: String, hint: Option<String>) {
        self.errors.push(TemplateError {
            file: self.file.to_string(),
            line,
            message,
            hint,
        });
    }

    /// Walks every element. `line` is used for elements the parser kept no position for
    /// (the head of an `{{else if}}` chain).
    fn template(&mut self, template: &Template, line: usize) {
        for (i, element) in template.elements.iter().enumerate() {
            let line = template.mapping.get(i).map_or(line, |m| m.0);
            match element {
                TemplateElement::RawString(_) | TemplateElement::Comment(_) => {}
                TemplateElement::Expression(helper) | TemplateElement::HtmlExpression(helper) => {
                    self.expression(helper, line);
                }
                TemplateElement::HelperBlock(helper) => self.block(helper, line),
                TemplateElement::DecoratorExpression(_) | TemplateElement::DecoratorBlock(_) => self.error(
                    line,
                    "decorators ({{* ...}}) are not supported".to_string(),
                    Some("write the text out in the template".to_string()),
                ),
                TemplateElement::PartialExpression(_) | TemplateElement::PartialBlock(_) => self.error(
                    line,
                    "partials ({{> ...}}) are not supported".to_string(),
                    Some("the runtime assembles templates itself; write the text out in this template".to_string()),
                ),
                // `TemplateElement` is non-exhaustive: anything added later is refused until
                // someone decides what it means for a pack.
                _ => self.error(line, "unsupported template construct".to_string(), None),
            }
        }
    }

    /// `{{path}}` or an inline helper call `{{eq a b}}`.
    fn expression(&mut self, helper: &HelperTemplate, line: usize) {
        match &helper.name {
            Parameter::Path(path) if helper.params.is_empty() && helper.hash.is_empty() => {
                if let Some(Resolved::Shape(shape)) = self.resolve(path, line) {
                    self.require_printable(path, shape, line);
                }
            }
            Parameter::Name(name) | Parameter::Path(Path::Relative((_, name))) => {
                let name = name.clone();
                if self.value_helper(&name, helper, line) {
                    return;
                }
                if BLOCK_HELPERS.contains(&name.as_str()) {
                    self.error(
                        line,
                        format!("'{name}' is a block helper"),
                        Some(format!("write {{{{#{name} ...}}}} ... {{{{/{name}}}}}")),
                    );
                } else {
                    self.unknown_helper(&name, line);
                }
            }
            Parameter::Path(path) => self.unknown_helper(raw(path), line),
            Parameter::Literal(_) => {}
            Parameter::Subexpression(sub) => self.subexpression(sub.as_element(), line),
            // `Parameter` is non-exhaustive: refuse what this code does not understand.
            _ => self.error(line, "unsupported expression".to_string(), None),
        }
    }

    /// `{{#name ...}} ... {{else}} ... {{/name}}`.
    fn block(&mut self, helper: &HelperTemplate, line: usize) {
        let Some(name) = helper.name.as_name().map(str::to_string) else {
            self.error(line, "a block must name a helper".to_string(), None);
            return;
        };
        match name.as_str() {
            "if" | "unless" => {
                if self.check_arguments(&name, helper, 1, Some(1), line) {
                    self.argument(&helper.params[0], line);
                }
                self.no_block_params(&name, helper, line);
                self.branches(helper, line);
            }
            "each" => {
                self.check_arguments(&name, helper, 1, Some(1), line);
                let item = match helper.params.first() {
                    Some(Parameter::Path(path)) => match self.resolve(path, line) {
                        Some(Resolved::Shape(Shape::List(item))) => Some(&**item),
                        Some(Resolved::Shape(other)) => {
                            let what = other.describe();
                            self.error(
                                line,
                                format!("#each needs a list; '{}' is {what}", raw(path)),
                                self.lists_hint(),
                            );
                            None
                        }
                        Some(Resolved::Scalar) => {
                            self.error(
                                line,
                                format!("#each needs a list; '{}' is not one", raw(path)),
                                None,
                            );
                            None
                        }
                        None => None,
                    },
                    Some(_) => {
                        self.error(
                            line,
                            "#each needs a list variable".to_string(),
                            self.lists_hint(),
                        );
                        None
                    }
                    None => None,
                };
                let Some(item) = item else {
                    // Still walk the else branch: it renders in the outer context.
                    if let Some(inverse) = &helper.inverse {
                        self.template(inverse, line);
                    }
                    return;
                };
                let block_params = match &helper.block_param {
                    None => Vec::new(),
                    Some(BlockParam::Single(p)) => param_name(p)
                        .map(|n| (n, Binding::Value(item)))
                        .into_iter()
                        .collect(),
                    Some(BlockParam::Pair((p, i))) => [
                        param_name(p).map(|n| (n, Binding::Value(item))),
                        param_name(i).map(|n| (n, Binding::Index)),
                    ]
                    .into_iter()
                    .flatten()
                    .collect(),
                    // `BlockParam` is non-exhaustive.
                    Some(_) => {
                        self.error(line, "unsupported block parameters".to_string(), None);
                        Vec::new()
                    }
                };
                self.inside(item, true, block_params, helper, line);
            }
            "with" => {
                self.check_arguments(&name, helper, 1, Some(1), line);
                let inner = match helper.params.first() {
                    Some(Parameter::Path(path)) => match self.resolve(path, line) {
                        Some(Resolved::Shape(shape @ Shape::Object(_))) => Some(shape),
                        Some(Resolved::Shape(other)) => {
                            let what = other.describe();
                            self.error(
                                line,
                                format!("#with needs an object; '{}' is {what}", raw(path)),
                                None,
                            );
                            None
                        }
                        Some(Resolved::Scalar) => {
                            self.error(
                                line,
                                format!("#with needs an object; '{}' is not one", raw(path)),
                                None,
                            );
                            None
                        }
                        None => None,
                    },
                    Some(_) => {
                        self.error(line, "#with needs an object variable".to_string(), None);
                        None
                    }
                    None => None,
                };
                let Some(inner) = inner else {
                    if let Some(inverse) = &helper.inverse {
                        self.template(inverse, line);
                    }
                    return;
                };
                let block_params = match &helper.block_param {
                    None => Vec::new(),
                    Some(BlockParam::Single(p)) => param_name(p)
                        .map(|n| (n, Binding::Value(inner)))
                        .into_iter()
                        .collect(),
                    Some(_) => {
                        self.error(
                            line,
                            "#with takes one block parameter: as |name|".to_string(),
                            None,
                        );
                        Vec::new()
                    }
                };
                self.inside(inner, false, block_params, helper, line);
            }
            _ if VALUE_HELPERS.contains(&name.as_str()) => {
                self.value_helper(&name, helper, line);
                self.no_block_params(&name, helper, line);
                self.branches(helper, line);
            }
            _ => {
                self.unknown_helper(&name, line);
                self.branches(helper, line);
            }
        }
    }

    /// Walks both branches of a block that does not change the context.
    fn branches(&mut self, helper: &HelperTemplate, line: usize) {
        if let Some(template) = &helper.template {
            self.template(template, line);
        }
        if let Some(inverse) = &helper.inverse {
            self.template(inverse, line);
        }
    }

    /// Walks a block's body with `this` = `shape`, then its else branch in the outer context.
    fn inside(
        &mut self,
        shape: &'c Shape,
        is_each: bool,
        block_params: Vec<(String, Binding<'c>)>,
        helper: &HelperTemplate,
        line: usize,
    ) {
        if let Some(template) = &helper.template {
            self.frames.push(Frame {
                this: shape,
                is_each,
                block_params,
            });
            self.template(template, line);
            self.frames.pop();
        }
        if let Some(inverse) = &helper.inverse {
            self.template(inverse, line);
        }
    }

    /// Checks an `eq` / `ne` / `not` / `and` / `or` call; false if `name` is not one.
    fn value_helper(&mut self, name: &str, helper: &HelperTemplate, line: usize) -> bool {
        let (min, max) = match name {
            "eq" | "ne" => (2, Some(2)),
            "not" => (1, Some(1)),
            "and" | "or" => (2, None),
            _ => return false,
        };
        self.check_arguments(name, helper, min, max, line);
        for param in &helper.params {
            self.argument(param, line);
        }
        true
    }

    fn check_arguments(
        &mut self,
        name: &str,
        helper: &HelperTemplate,
        min: usize,
        max: Option<usize>,
        line: usize,
    ) -> bool {
        let mut ok = true;
        if !helper.hash.is_empty() {
            let mut keys: Vec<&str> = helper.hash.keys().map(String::as_str).collect();
            keys.sort_unstable();
            self.error(
                line,
                format!(
                    "'{name}' does not take key=value arguments (found {})",
                    keys.join(", ")
                ),
                None,
            );
            ok = false;
        }
        let found = helper.params.len();
        if found < min || max.is_some_and(|max| found > max) {
            let expected = match max {
                Some(max) if max == min => format!("{min}"),
                Some(max) => format!("{min}-{max}"),
                None => format!("at least {min}"),
            };
            self.error(
                line,
                format!("'{name}' takes {expected} argument(s), found {found}"),
                None,
            );
            ok = false;
        }
        ok
    }

    fn no_block_params(&mut self, name: &str, helper: &HelperTemplate, line: usize) {
        if helper.block_param.is_some() {
            self.error(
                line,
                format!("'{name}' does not take block parameters (as |...|)"),
                None,
            );
        }
    }

    /// A helper argument: a variable (any shape: `#if skills` tests for a non-empty list),
    /// a literal, or a value-helper subexpression.
    fn argument(&mut self, param: &Parameter, line: usize) {
        match param {
            Parameter::Path(path) => {
                self.resolve(path, line);
            }
            Parameter::Literal(_) => {}
            Parameter::Subexpression(sub) => self.subexpression(sub.as_element(), line),
            Parameter::Name(name) => {
                let name = name.clone();
                self.unknown_helper(&name, line);
            }
            _ => self.error(line, "unsupported helper argument".to_string(), None),
        }
    }

    fn subexpression(&mut self, element: &TemplateElement, line: usize) {
        let TemplateElement::Expression(helper) = element else {
            self.error(line, "unsupported subexpression".to_string(), None);
            return;
        };
        match &helper.name {
            Parameter::Path(path) if helper.params.is_empty() && helper.hash.is_empty() => {
                self.resolve(path, line);
            }
            Parameter::Name(name) | Parameter::Path(Path::Relative((_, name))) => {
                let name = name.clone();
                if !self.value_helper(&name, helper, line) {
                    self.unknown_helper(&name, line);
                }
            }
            Parameter::Path(path) => self.unknown_helper(raw(path), line),
            Parameter::Literal(_) => {}
            Parameter::Subexpression(sub) => self.subexpression(sub.as_element(), line),
            // `Parameter` is non-exhaustive: refuse what this code does not understand.
            _ => self.error(line, "unsupported expression".to_string(), None),
        }
    }

    fn unknown_helper(&mut self, name: &str, line: usize) {
        self.error(
            line,
            format!("unknown helper '{name}'"),
            Some(format!(
                "supported helpers: {}, {}",
                BLOCK_HELPERS.join(", "),
                VALUE_HELPERS.join(", ")
            )),
        );
    }

    fn require_printable(&mut self, path: &Path, shape: &Shape, line: usize) {
        match shape {
            Shape::String | Shape::Bool => {}
            Shape::Object(fields) => {
                let names: Vec<&str> = fields.keys().map(String::as_str).collect();
                self.error(
                    line,
                    format!("'{}' is an object, not a value to print", raw(path)),
                    Some(format!("use one of its fields: {}", names.join(", "))),
                );
            }
            Shape::List(_) => self.error(
                line,
                format!("'{}' is a list, not a value to print", raw(path)),
                Some(format!(
                    "iterate it: {{{{#each {}}}}} ... {{{{/each}}}}",
                    raw(path)
                )),
            ),
        }
    }

    fn lists_hint(&self) -> Option<String> {
        let mut lists = Vec::new();
        collect_lists("", self.frames[0].this, &mut lists);
        (!lists.is_empty()).then(|| format!("lists in the contract: {}", lists.join(", ")))
    }

    /// Resolves a path against the current frames, reporting an error (and returning
    /// `None`) when it names nothing in the contract.
    fn resolve(&mut self, path: &Path, line: usize) -> Option<Resolved<'c>> {
        match path {
            Path::Local((level, name, raw)) => {
                let frame = self
                    .frames
                    .len()
                    .checked_sub(1 + level)
                    .map(|i| &self.frames[i]);
                let ok = frame.is_some_and(|f| f.is_each)
                    && matches!(name.as_str(), "index" | "first" | "last");
                if ok {
                    Some(Resolved::Scalar)
                } else {
                    let hint = if frame.is_some_and(|f| f.is_each) {
                        "inside #each over a list: @index, @first, @last"
                    } else {
                        "@index, @first and @last exist only inside #each"
                    };
                    self.error(
                        line,
                        format!("unknown variable '{raw}'"),
                        Some(hint.to_string()),
                    );
                    None
                }
            }
            Path::Relative((segs, raw)) => self.resolve_relative(segs, raw, line),
        }
    }

    fn resolve_relative(
        &mut self,
        segs: &[PathSeg],
        raw: &str,
        line: usize,
    ) -> Option<Resolved<'c>> {
        let unknown = |checker: &mut Self, hint: Option<String>| {
            checker.error(line, format!("unknown variable '{raw}'"), hint);
            None
        };
        let mut up = 0;
        let mut from_root = false;
        let mut names: Vec<&str> = Vec::with_capacity(segs.len());
        for seg in segs {
            match seg {
                PathSeg::Named(name) => names.push(name),
                // The grammar's rule type is not exported, so its variants are matched by
                // their debug names. Anything unrecognised is refused rather than guessed.
                PathSeg::Ruled(rule) => match format!("{rule:?}").as_str() {
                    "path_up" if names.is_empty() && !from_root => up += 1,
                    "path_root" if names.is_empty() && up == 0 => from_root = true,
                    _ => return unknown(self, Some("unsupported path syntax".to_string())),
                },
                _ => return unknown(self, Some("unsupported path syntax".to_string())),
            }
        }
        let start: Resolved<'c> = if from_root {
            Resolved::Shape(self.frames[0].this)
        } else if up > 0 {
            let Some(index) = self.frames.len().checked_sub(1 + up) else {
                return unknown(
                    self,
                    Some(format!(
                        "'../' goes {up} level(s) up, but only {} block(s) are open",
                        self.frames.len() - 1
                    )),
                );
            };
            Resolved::Shape(self.frames[index].this)
        } else if let Some(binding) = names.first().and_then(|first| self.block_param(first)) {
            names.remove(0);
            match binding {
                Binding::Value(shape) => Resolved::Shape(shape),
                Binding::Index => Resolved::Scalar,
            }
        } else {
            Resolved::Shape(self.frames[self.frames.len() - 1].this)
        };
        let mut current = start;
        for name in names {
            let Resolved::Shape(shape) = current else {
                return unknown(self, None);
            };
            current = match shape {
                Shape::Object(fields) => match fields.get(name) {
                    Some(field) => Resolved::Shape(field),
                    None => {
                        let known: Vec<&str> = fields.keys().map(String::as_str).collect();
                        let hint = if self.frames.len() > 1 && !from_root && up == 0 {
                            format!(
                                "here you can use: {} (or ../VARIABLE for the enclosing context)",
                                known.join(", ")
                            )
                        } else {
                            format!("known here: {}", known.join(", "))
                        };
                        return unknown(self, Some(hint));
                    }
                },
                Shape::List(_) => {
                    return unknown(self, Some("lists cannot be indexed; use #each".to_string()));
                }
                Shape::String | Shape::Bool => {
                    let what = shape.describe();
                    return unknown(self, Some(format!("the path goes into {what}")));
                }
            };
        }
        Some(current)
    }

    fn block_param(&self, name: &str) -> Option<Binding<'c>> {
        self.frames.iter().rev().find_map(|frame| {
            frame
                .block_params
                .iter()
                .find(|(bound, _)| bound == name)
                .map(|(_, binding)| *binding)
        })
    }
}

fn param_name(param: &Parameter) -> Option<String> {
    param.as_name().map(str::to_string)
}

fn raw(path: &Path) -> &str {
    match path {
        Path::Relative((_, raw)) | Path::Local((_, _, raw)) => raw,
    }
}

fn collect_lists(at: &str, shape: &Shape, out: &mut Vec<String>) {
    match shape {
        Shape::Object(fields) => {
            for (name, field) in fields {
                collect_lists(&join(at, name), field, out);
            }
        }
        Shape::List(_) => out.push(at.to_string()),
        Shape::String | Shape::Bool => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contract() -> Contract {
        Contract::builtin(1).expect("schema 1 is built in")
    }

    fn check(source: &str) -> Result<(), TemplateError> {
        validate_template("t.hbs", source, &contract())
    }

    fn error(source: &str) -> String {
        check(source)
            .expect_err("template should be rejected")
            .to_string()
    }

    #[test]
    fn a_template_over_the_size_limit_is_refused_before_it_is_parsed() {
        let at_limit = format!("{{{{persona}}}}{}", "x".repeat(MAX_TEMPLATE_LEN - 11));
        assert_eq!(at_limit.len(), MAX_TEMPLATE_LEN);
        assert_eq!(check(&at_limit), Ok(()));
        // One byte more, and a template that would not even parse: the size is the problem.
        let over = format!("{{{{#if}}}}{}", "x".repeat(MAX_TEMPLATE_LEN - 6));
        assert_eq!(over.len(), MAX_TEMPLATE_LEN + 1);
        assert_eq!(
            error(&over),
            format!(
                "t.hbs:1: template is {} bytes, over the limit of {MAX_TEMPLATE_LEN} bytes per \
                 template; split it into smaller templates",
                MAX_TEMPLATE_LEN + 1
            )
        );
    }

    #[test]
    fn builtin_contract_parses_and_unknown_schemas_are_none() {
        let c = contract();
        assert_eq!(c.schema(), 1);
        assert!(c.variables().contains_key("tools"));
        assert!(matches!(c.variables()["skills"], Shape::List(_)));
        assert!(Contract::builtin(2).is_none());
    }

    #[test]
    fn good_template_passes() {
        let source = "\
You are {{persona}}.
{{#if tools.read}}You can read files.{{else}}You cannot read files.{{/if}}
{{#unless surface.interactive}}Work without asking questions.{{/unless}}
{{#if (and features.memory memory.enabled)}}Memory lives in {{data_dir}}.{{/if}}
{{#if (not layer.root)}}Delegated.{{else if layer.branch}}Branch.{{else}}Root.{{/if}}
{{#each skills}}{{#if @first}}Skills:{{/if}}
{{@index}}. {{name}} ({{this.description}}) {{#if ../tools.skill}}usable{{/if}} {{@root.persona}}
{{else}}No skills.
{{/each}}
{{#each skills as |skill i|}}{{i}} {{skill.name}}{{/each}}
{{#with tools}}{{#if bash}}bash{{/if}}{{/with}}
{{!-- a comment with {{nope}} inside is not an expression --}}
";
        check(source).unwrap();
    }

    #[test]
    fn unknown_variable_fails_with_its_line() {
        let err = check("Hello\n\n{{x}}\n").unwrap_err();
        assert_eq!(err.line, 3);
        assert_eq!(err.to_string(), "t.hbs:3: unknown variable 'x'");
    }

    #[test]
    fn unknown_field_in_if_condition_fails() {
        assert_eq!(
            error("line one\n{{#if tools.nope}}yes{{/if}}\n"),
            "t.hbs:2: unknown variable 'tools.nope'"
        );
    }

    #[test]
    fn unknown_variable_only_in_else_branch_fails() {
        // A sample render with every bool true never reaches the else branch; the walk does.
        assert_eq!(
            error("{{#if tools.read}}\nread\n{{else}}\n{{nope}}\n{{/if}}\n"),
            "t.hbs:4: unknown variable 'nope'"
        );
        assert_eq!(
            error("{{#if tools.read}}a{{else if tools.write}}b{{else}}\n{{missing}}{{/if}}"),
            "t.hbs:2: unknown variable 'missing'"
        );
        // The condition of an `else if` is checked too (reported at its `#if`).
        assert_eq!(
            error("\n{{#if tools.read}}a\n{{else if tools.nope}}b{{/if}}"),
            "t.hbs:2: unknown variable 'tools.nope'"
        );
    }

    #[test]
    fn each_resolves_against_the_item_shape() {
        check("{{#each skills}}{{name}}{{/each}}").unwrap();
        check("{{#each skills}}{{this.name}}: {{description}}{{/each}}").unwrap();
        assert_eq!(
            error("{{#each skills}}{{nope}}{{/each}}"),
            "t.hbs:1: unknown variable 'nope'"
        );
        // Inside the loop the root is not the context any more.
        assert_eq!(
            error("{{#each skills}}{{persona}}{{/each}}"),
            "t.hbs:1: unknown variable 'persona'"
        );
        check("{{#each skills}}{{../persona}}{{/each}}").unwrap();
        assert_eq!(
            error("{{#each skills}}{{../name}}{{/each}}"),
            "t.hbs:1: unknown variable '../name'"
        );
    }

    #[test]
    fn each_else_renders_in_the_outer_context() {
        check("{{#each skills}}{{name}}{{else}}{{persona}}{{/each}}").unwrap();
        assert_eq!(
            error("{{#each skills}}{{name}}{{else}}\n{{name}}{{/each}}"),
            "t.hbs:2: unknown variable 'name'"
        );
    }

    #[test]
    fn each_needs_a_list() {
        assert_eq!(
            error("{{#each tools}}{{this}}{{/each}}"),
            "t.hbs:1: #each needs a list; 'tools' is an object"
        );
    }

    #[test]
    fn locals_exist_only_inside_each() {
        assert_eq!(error("{{@index}}"), "t.hbs:1: unknown variable '@index'");
        assert_eq!(
            error("{{#each skills}}{{@key}}{{/each}}"),
            "t.hbs:1: unknown variable '@key'"
        );
    }

    #[test]
    fn objects_and_lists_are_not_printable() {
        assert_eq!(
            error("{{tools}}"),
            "t.hbs:1: 'tools' is an object, not a value to print"
        );
        assert_eq!(
            error("{{skills}}"),
            "t.hbs:1: 'skills' is a list, not a value to print"
        );
        assert_eq!(
            error("{{#each skills}}{{this}}{{/each}}"),
            "t.hbs:1: 'this' is an object, not a value to print"
        );
    }

    #[test]
    fn paths_past_a_leaf_or_into_a_list_fail() {
        assert_eq!(
            error("{{persona.x}}"),
            "t.hbs:1: unknown variable 'persona.x'"
        );
        assert_eq!(
            error("{{skills.0.name}}"),
            "t.hbs:1: unknown variable 'skills.0.name'"
        );
        assert_eq!(
            error("{{../persona}}"),
            "t.hbs:1: unknown variable '../persona'"
        );
    }

    #[test]
    fn unknown_helpers_partials_and_hash_arguments_fail() {
        assert_eq!(
            error("{{lookup tools \"read\"}}"),
            "t.hbs:1: unknown helper 'lookup'"
        );
        assert_eq!(
            error("{{#custom persona}}x{{/custom}}"),
            "t.hbs:1: unknown helper 'custom'"
        );
        assert_eq!(
            error("a\n{{> header}}"),
            "t.hbs:2: partials ({{> ...}}) are not supported"
        );
        assert_eq!(
            error("{{#if persona includeZero=true}}x{{/if}}"),
            "t.hbs:1: 'if' does not take key=value arguments (found includeZero)"
        );
        assert_eq!(
            error("{{#if (eq persona)}}x{{/if}}"),
            "t.hbs:1: 'eq' takes 2 argument(s), found 1"
        );
        assert_eq!(
            error("{{#if (eq persona nope)}}x{{/if}}"),
            "t.hbs:1: unknown variable 'nope'"
        );
    }

    #[test]
    fn parse_errors_carry_file_and_line() {
        let err = check("ok\n{{#if persona}}\nunclosed\n{{/each}}\n").unwrap_err();
        assert_eq!(err.file, "t.hbs");
        assert_eq!(err.line, 4, "{err}");
        assert!(
            err.to_string()
                .starts_with("t.hbs:4: template does not parse"),
            "{err}"
        );
        let err = check("a\nb {{#if}}").unwrap_err();
        assert_eq!(err.line, 2, "{err}");
    }

    #[test]
    fn all_errors_are_reported_in_line_order() {
        let errors = validate_template_all(
            "t.hbs",
            "{{a}}\n{{persona}}\n{{#if b}}{{/if}}\n",
            &contract(),
        );
        let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "t.hbs:1: unknown variable 'a'",
                "t.hbs:3: unknown variable 'b'"
            ]
        );
    }

    #[test]
    fn contract_shapes_are_checked_when_parsed() {
        let bad = Contract::from_json(r#"{"schema": 9, "variables": {"x": ["string", "bool"]}}"#);
        assert!(bad.unwrap_err().to_string().contains("one-element array"));
        let bad = Contract::from_json(r#"{"schema": 9, "variables": {"x": "int"}}"#);
        assert!(bad.unwrap_err().to_string().contains("\"int\""));
        let ok = Contract::from_json(r#"{"schema": 9, "variables": {"items": [{"n": "string"}]}}"#)
            .unwrap();
        validate_template("t.hbs", "{{#each items}}{{n}}{{/each}}", &ok).unwrap();
    }

    #[test]
    fn a_pack_names_its_contract_by_its_schema_number() {
        let app = br#"{"templates": ["main.hbs"], "variables": {"user": "string"}}"#;
        let files = |path: &str| (path == APP_CONTRACT_PATH).then_some(&app[..]);
        let none = |_: &str| None;
        assert_eq!(Contract::of_pack(1, none).unwrap().unwrap().schema(), 1);
        assert_eq!(Contract::of_pack(2, none).unwrap(), None);
        let plain = Contract::of_pack(FILES_SCHEMA, none).unwrap().unwrap();
        assert!(plain.is_open() && plain.required_templates().is_empty());
        let contract = Contract::of_pack(APP_SCHEMA, files).unwrap().unwrap();
        assert_eq!(contract.kind(), Kind::App);
        assert_eq!(contract.required_templates(), ["main.hbs"]);
        assert_eq!(
            Contract::of_pack(APP_SCHEMA, none).unwrap_err().to_string(),
            "malformed variable contract: the pack declares an app contract but has no contract.json"
        );
        assert!(Contract::knows(FILES_SCHEMA) && Contract::knows(APP_SCHEMA) && Contract::knows(1));
        assert!(!Contract::knows(2));
        assert_eq!(Contract::known_schemas(), [1, FILES_SCHEMA, APP_SCHEMA]);
    }

    #[test]
    fn the_files_contract_only_parses_templates() {
        let files = Contract::files();
        validate_template("t.hbs", "{{anything.at.all}} {{#if x}}y{{/if}}", &files).unwrap();
        assert!(
            error_with(&files, "{{#if x}}never closed")
                .starts_with("t.hbs:1: template does not parse")
        );
    }

    fn error_with(contract: &Contract, source: &str) -> String {
        validate_template("t.hbs", source, contract)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn an_app_contract_is_checked_like_an_agent_schema() {
        let app = Contract::app_from_json(
            r#"{"templates": ["prompts/agents/main/system.hbs"], "variables": {"user": "string"}}"#,
        )
        .unwrap();
        validate_template("t.hbs", "You help {{user}}.", &app).unwrap();
        assert_eq!(
            error_with(&app, "{{users}}"),
            "t.hbs:1: unknown variable 'users'"
        );
        assert_eq!(
            Contract::app_from_json("[]").unwrap_err().to_string(),
            "malformed variable contract: expected an object with \"templates\" and \"variables\", found []"
        );
    }

    #[test]
    fn a_pack_contract_fits_an_app_that_passes_at_least_its_variables() {
        let app = |text: &str| Contract::app_from_json(text).unwrap();
        let pack =
            app(r#"{"templates": ["a.hbs"], "variables": {"user": "string", "o": {"b": "bool"}}}"#);
        let given = app(
            r#"{"templates": ["a.hbs"], "variables": {"user": "string", "extra": "bool", "o": {"b": "bool", "c": "string"}}}"#,
        );
        assert_eq!(pack.fits_within(&given), Ok(()));
        assert_eq!(
            given.fits_within(&pack).unwrap_err(),
            "the pack's contract has variable 'extra', which the app does not pass (under the top level it passes o, user)"
        );
        let other = app(
            r#"{"templates": ["a.hbs", "b.hbs"], "variables": {"user": "bool", "o": {"b": "bool"}}}"#,
        );
        assert_eq!(
            pack.fits_within(&other).unwrap_err(),
            "variable 'user' is a string in the pack's contract and a bool in the app's"
        );
        let more = app(
            r#"{"templates": ["a.hbs", "b.hbs"], "variables": {"user": "string", "o": {"b": "bool"}}}"#,
        );
        assert_eq!(
            pack.fits_within(&more).unwrap_err(),
            "the app renders b.hbs, which the pack's contract does not require"
        );
    }

    #[test]
    fn render_check_catches_what_strict_mode_catches() {
        let template = Template::compile("line\n{{nope}}").unwrap();
        let err = render_check("t.hbs", template, &contract()).expect("strict mode fails");
        assert_eq!(err.line, 2, "{err}");
        assert!(
            err.message.starts_with("does not render in strict mode"),
            "{err}"
        );
    }

    #[test]
    fn sample_context_follows_the_contract() {
        let sample = contract().sample_context(true);
        assert_eq!(sample["persona"], "<persona>");
        assert_eq!(sample["tools"]["read"], true);
        assert_eq!(sample["skills"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            contract().sample_context(false)["skills"]
                .as_array()
                .map(Vec::len),
            Some(0)
        );
    }

    #[test]
    fn strict_if_refuses_a_missing_condition_and_keeps_both_branches_working() {
        let mut registry = strict_registry();
        registry
            .register_template_string(
                "t",
                "{{#if a}}yes{{else}}no{{/if}}{{#unless a}}!{{/unless}}",
            )
            .unwrap();
        assert_eq!(
            registry
                .render("t", &serde_json::json!({"a": true}))
                .unwrap(),
            "yes"
        );
        assert_eq!(
            registry
                .render("t", &serde_json::json!({"a": false}))
                .unwrap(),
            "no!"
        );
        let err = registry.render("t", &serde_json::json!({})).unwrap_err();
        assert!(err.to_string().contains("a"), "{err}");
        registry
            .register_template_string("chain", "{{#if a}}A{{else if b}}B{{else}}C{{/if}}")
            .unwrap();
        assert_eq!(
            registry
                .render("chain", &serde_json::json!({"a": false, "b": true}))
                .unwrap(),
            "B"
        );
        assert!(
            registry
                .render("chain", &serde_json::json!({"a": false}))
                .is_err()
        );
    }
}
