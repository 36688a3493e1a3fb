//! Per-turn system-prompt assembly.
//!
//! Order: persona → core template (runtime rules inserted under their headings) →
//! model-family notes (built-in prompts only) → shared layers → instructions preamble (only when an instruction
//! file is present) → global AGENTS.md → project CLAUDE.md / AGENTS.md (worktree root
//! first, down to the working directory) → configured instruction files → a note naming
//! the files the total budget left out → environment →
//! session context (delegated children only) → memory → MCP server instructions → skills
//! catalog.
//!
//! Everything comes from one snapshot, except the core template a task session froze
//! when it started ([`CorePrompt::Frozen`]), which is rendered from its saved text under
//! that snapshot's contract. [`assemble_turn`] runs [`assemble`] through
//! [`PromptStore::serve`], so any failure in a remote pack rebuilds the whole prompt from
//! the built-in pack and the metadata says so. Inputs read from disk (instruction files,
//! memory, the environment) are read once, before, so the retry sees the same data.

use std::collections::BTreeMap;

use pack_contract::Contract;
use pack_serving::{PromptStore, Snapshot};
use serde::Deserialize;
use serde_json::Value;

use crate::agents::{AgentDefinition, CorePrompt, PackIdentity, Role};
use crate::capabilities::{Occasion, Profile, resolve};
use crate::config::Config;
use crate::context::{self, AgentEntry, ContextInputs, Layer, McpInstructions, SkillEntry};
use crate::environment::Environment;
use crate::error::PromptError;
use crate::instructions::Instructions;
use pack_format::sha256_hex;

use crate::metadata::{FrozenCore, PackRef, PromptMetadata};
use crate::mode::PromptMode;
use crate::session::SessionContext;

/// The persona name templates receive.
pub const PERSONA: &str = "Mavis";
/// The heading that marks a delegated-task contract in a surface prompt.
pub const DELEGATED_CONTRACT_HEADING: &str = "Delegated Task Contract";

const PERSONA_TEMPLATE: &str = "shared/persona.hbs";
const CONTEXT_TEMPLATE: &str = "shared/context.hbs";
const CONTRACT_TEMPLATE: &str = "shared/delegated_task.hbs";
const RULES_TEMPLATE: &str = "shared/runtime_rules.hbs";
const WINDOWS_RULES_TEMPLATE: &str = "shared/runtime_rules_windows.hbs";
const INSTRUCTIONS_TEMPLATE: &str = "shared/instructions.hbs";
const ENVIRONMENT_TEXT: &str = "shared/environment.md";
const SESSION_TEXT: &str = "shared/session_context.md";
const MEMORY_TEMPLATE: &str = "shared/memory.hbs";
const SKILLS_TEMPLATE: &str = "shared/skills.hbs";
const MCP_TEMPLATE: &str = "shared/mcp.hbs";
const MODEL_FAMILIES: &str = "models/families.json";

/// Everything one turn's prompt depends on besides the snapshot.
#[derive(Debug, Clone, Copy)]
pub struct TurnRequest<'a> {
    pub agent: &'a str,
    pub mode: PromptMode,
    pub model: &'a str,
    pub occasion: Occasion,
    pub profile: Profile,
    /// A person reads the session as it runs.
    pub interactive: bool,
    pub config: &'a Config,
    pub custom_agents: &'a [AgentDefinition],
    /// A task session's frozen definition; used instead of looking `agent` up.
    pub frozen: Option<&'a AgentDefinition>,
    pub environment: &'a Environment,
    pub instructions: &'a Instructions,
    /// The memory file's text, when the host keeps one.
    pub memory: Option<&'a str>,
    /// Where a delegated task came from (children only).
    pub session: Option<&'a SessionContext>,
    /// Skills from the data directory and the project; they join the pack's skills.
    pub disk_skills: &'a [crate::skills::Skill],
    /// The session's MCP servers: the instructions of those the agent may use go into
    /// the prompt.
    pub mcp: Option<&'a dyn McpInstructions>,
}

/// The system prompt of one turn and what produced it.
#[derive(Debug, Clone)]
pub struct AssembledPrompt {
    pub text: String,
    pub metadata: PromptMetadata,
    /// What the agent may use this turn, after every narrowing step: the tools offered to
    /// the model come from here.
    pub capabilities: crate::Capabilities,
    /// The skills in the catalog, with their bodies, for the `skill` tool.
    pub skills: Vec<crate::skills::Skill>,
}

/// Builds the prompt through the store: one capture, and the whole prompt from the
/// built-in pack if the captured remote pack fails anywhere.
pub fn assemble_turn(
    store: &PromptStore,
    request: &TurnRequest<'_>,
) -> Result<AssembledPrompt, PromptError> {
    let served = store.serve(|snapshot| assemble(snapshot, request))?;
    let mut prompt = served.value;
    prompt.metadata.fallback = served.fallback;
    Ok(prompt)
}

/// Reads pack files and records the SHA-256 of each one used.
struct Pack<'s> {
    snapshot: &'s Snapshot,
    used: BTreeMap<String, String>,
}

impl<'s> Pack<'s> {
    fn note(&mut self, key: &str) {
        if !self.used.contains_key(key)
            && let Some(bytes) = self.snapshot.get(key)
        {
            self.used.insert(key.to_string(), sha256_hex(bytes));
        }
    }

    /// Renders a template and tidies its whitespace.
    fn render(&mut self, key: &str, context: &Value) -> Result<String, PromptError> {
        let text = self.snapshot.render(key, context)?;
        self.note(key);
        Ok(tidy(&text))
    }

    /// A plain-text pack file.
    fn text(&mut self, key: &str) -> Result<&'s str, PromptError> {
        let bytes = self.snapshot.read(key)?;
        let text = std::str::from_utf8(bytes).map_err(|_| PromptError::NotUtf8 {
            key: key.to_string(),
        })?;
        self.note(key);
        Ok(text)
    }
}

/// Builds the prompt from one snapshot.
pub fn assemble(
    snapshot: &Snapshot,
    request: &TurnRequest<'_>,
) -> Result<AssembledPrompt, PromptError> {
    let schema = snapshot.meta().schema;
    let contract = Contract::builtin(schema).ok_or(PromptError::UnknownSchema { schema })?;
    let mut pack = Pack {
        snapshot,
        used: BTreeMap::new(),
    };
    let definition = find_agent(snapshot, request)?;
    let task_child = request.occasion == Occasion::TaskChild;
    let resolved = resolve(
        &request.config.defaults,
        definition.ceiling.as_ref(),
        request.occasion,
        request.profile,
    );
    let skill_set = if resolved.capabilities.has(crate::ToolId::Skill) {
        let from_pack = crate::skills::from_pack(snapshot)?;
        for key in snapshot.keys() {
            if key.starts_with("skills/") && key.ends_with("/SKILL.md") {
                pack.note(key);
            }
        }
        crate::skills::merge(from_pack, request.disk_skills, definition.skills.as_ref())
    } else {
        Vec::new()
    };
    let skills: Vec<SkillEntry> = skill_set
        .iter()
        .map(|s| SkillEntry {
            name: s.name.clone(),
            description: s.description.clone(),
        })
        .collect();
    let mcp_servers = request.mcp.map_or_else(Vec::new, |mcp| {
        mcp.prompt_entries(&|tool| resolved.capabilities.mcp.allows(tool))
    });
    // The orchestrator's prompt names the custom agents it can hand tasks to.
    let custom_agents: Vec<AgentEntry> = if resolved.capabilities.features.delegation && !task_child
    {
        request
            .custom_agents
            .iter()
            .map(|a| AgentEntry {
                name: a.name.clone(),
                description: a.description.clone(),
            })
            .collect()
    } else {
        Vec::new()
    };
    let env = request.environment;
    let data_dir = env.data_dir.display().to_string();
    let role_directory = env
        .data_dir
        .join("agents")
        .join(&definition.name)
        .display()
        .to_string();
    let mut context = context::build(&ContextInputs {
        resolved: &resolved,
        persona: PERSONA,
        data_dir: &data_dir,
        role_directory: &role_directory,
        skills: &skills,
        custom_agents: &custom_agents,
        mcp_servers: &mcp_servers,
        interactive: request.interactive && !task_child,
        task_child,
        cli: request.profile == Profile::Cli,
    });
    context::conforms(&context, &contract)?;

    let mut parts: Vec<String> = Vec::with_capacity(12);
    let mut push = |part: String| {
        if !part.trim().is_empty() {
            parts.push(part);
        }
    };

    push(pack.render(PERSONA_TEMPLATE, &context)?);

    let core = match (&definition.core, definition.template_key(request.mode)) {
        (CorePrompt::Custom { body, .. }, _) => body.trim().to_string(),
        (
            CorePrompt::Frozen {
                key,
                template,
                pack,
            },
            _,
        ) => render_frozen(key, template, pack, &contract, &context)?,
        (CorePrompt::Builtin, Some(key)) => pack.render(&key, &context)?,
        // `template_key` is `Some` for every built-in agent.
        (CorePrompt::Builtin, None) => String::new(),
    };
    let mut rules = pack.render(RULES_TEMPLATE, &context)?;
    if env.is_windows() && snapshot.has_template(WINDOWS_RULES_TEMPLATE) {
        rules.push('\n');
        rules.push_str(&pack.render(WINDOWS_RULES_TEMPLATE, &context)?);
    }
    push(insert_rules(&core, &rules));

    // A custom agent's own prompt is written for whatever model runs it; notes meant for
    // the built-in prompts would only contradict it.
    if matches!(
        definition.core,
        CorePrompt::Builtin | CorePrompt::Frozen { .. }
    ) && let Some(key) = model_template(&mut pack, request.model)?
    {
        push(pack.render(&key, &context)?);
    }

    let surface = if task_child {
        Layer::Branch
    } else {
        Layer::Root
    };
    let layers: &[Layer] = match definition.role {
        Role::Orchestrator => &[surface],
        Role::Subagent => &[Layer::Base, Layer::Worker, surface],
    };
    for &layer in layers {
        context::set_layer(&mut context, Some(layer));
        let mut text = pack.render(CONTEXT_TEMPLATE, &context)?;
        if layer == Layer::Branch {
            let custom_body = match &definition.core {
                CorePrompt::Custom { body, .. } => body.as_str(),
                CorePrompt::Builtin | CorePrompt::Frozen { .. } => "",
            };
            if !has_contract(&text) && !has_contract(custom_body) {
                let contract_text = pack.render(CONTRACT_TEMPLATE, &context)?;
                text = format!("{text}\n\n{contract_text}");
            }
        }
        push(text);
    }
    context::set_layer(&mut context, None);

    let instructions = request.instructions;
    if !instructions.is_empty() {
        push(pack.render(INSTRUCTIONS_TEMPLATE, &context)?);
    }
    for file in instructions.files() {
        push(format!(
            "Contents of {}:\n\n{}",
            file.path.display(),
            file.text
        ));
    }
    if let Some(note) = instructions.left_out_note() {
        push(note);
    }

    push(format!(
        "{}\n{}",
        pack.text(ENVIRONMENT_TEXT)?.trim_end(),
        env.block(request.model)
    ));

    if task_child && let Some(session) = request.session {
        let mut text = format!(
            "{}\nTask id: {}\nStarted by: {}",
            pack.text(SESSION_TEXT)?.trim_end(),
            session.task_id,
            session.parent_agent
        );
        if let Some(steps) = session.max_steps {
            text.push_str(&format!(
                "\nStep limit: {steps} model calls. Finish and hand off before you reach it; work left over is lost."
            ));
        }
        if let Some(bytes) = session.handoff_bytes {
            text.push_str(&format!(
                "\nHandoff limit: the parent receives at most {bytes} bytes of your final message; past that, its middle is cut out. Keep the report within it: lead with the result, and leave out what the parent can look up itself."
            ));
        }
        if let Some(task) = &session.task {
            text.push_str(&format!("\nTask:\n{}", task.trim()));
        }
        if !session.files.is_empty() {
            text.push_str("\nFiles produced so far in the parent session:");
            for file in &session.files {
                text.push_str(&format!("\n- {}", file.display()));
            }
        }
        push(text);
    }

    // The command line's memory is the workspace's notes, which the host passes in.
    let memory_on = resolved.capabilities.features.memory
        && (resolved.memory_enabled || request.profile == Profile::Cli);
    if memory_on && let Some(memory) = request.memory.map(str::trim).filter(|m| !m.is_empty()) {
        push(format!(
            "{}\n\n{memory}",
            pack.render(MEMORY_TEMPLATE, &context)?
        ));
    }

    // Packs from before MCP support have no such template; their prompts go without.
    if !mcp_servers.is_empty() && snapshot.has_template(MCP_TEMPLATE) {
        push(pack.render(MCP_TEMPLATE, &context)?);
    }

    if !skills.is_empty() {
        push(pack.render(SKILLS_TEMPLATE, &context)?);
    }

    let mut text = parts.join("\n\n");
    text.push('\n');
    let meta = snapshot.meta();
    let metadata = PromptMetadata {
        schema_version: meta.schema,
        mode: request.mode,
        agent: definition.name.clone(),
        model: request.model.to_string(),
        pack: PackRef {
            name: meta.name.clone(),
            version: meta.version.to_string(),
            source: meta.source.to_string(),
            sha256: meta.sha256.clone(),
        },
        templates: pack.used,
        prompt_sha256: sha256_hex(text.as_bytes()),
        fallback: None,
        warnings: instructions.warnings.clone(),
        frozen: match &definition.core {
            CorePrompt::Frozen {
                key,
                template,
                pack,
            } => Some(Box::new(FrozenCore {
                key: key.clone(),
                sha256: sha256_hex(template.as_bytes()),
                pack: pack.clone(),
            })),
            CorePrompt::Builtin | CorePrompt::Custom { .. } => None,
        },
    };
    Ok(AssembledPrompt {
        text,
        metadata,
        capabilities: resolved.capabilities,
        skills: skill_set,
    })
}

/// Renders a core template frozen in a task session, checked against the contract of the
/// pack rendering the rest of the prompt, as a pack's own templates are.
fn render_frozen(
    key: &str,
    template: &str,
    pack: &PackIdentity,
    contract: &Contract,
    context: &Value,
) -> Result<String, PromptError> {
    let fail = |reason: String| PromptError::FrozenTemplate {
        key: key.to_string(),
        pack: format!("{} {}", pack.name, pack.version),
        reason,
    };
    let compiled = pack_contract::compile_checked(key, template, contract).map_err(|errors| {
        fail(
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        )
    })?;
    let mut registry = pack_contract::strict_registry();
    registry.register_template(key, compiled);
    let text = registry
        .render(key, context)
        .map_err(|e| fail(e.to_string()))?;
    Ok(tidy(&text))
}

/// The frozen definition, a built-in agent as this snapshot describes it, or a custom one.
fn find_agent(
    snapshot: &Snapshot,
    request: &TurnRequest<'_>,
) -> Result<AgentDefinition, PromptError> {
    if let Some(frozen) = request.frozen {
        return Ok(frozen.clone());
    }
    if let Some(builtin) = AgentDefinition::builtin(request.agent, snapshot) {
        return builtin;
    }
    if let Some(custom) = request
        .custom_agents
        .iter()
        .find(|a| a.name == request.agent)
    {
        return Ok(custom.clone());
    }
    let available: Vec<&str> = crate::agents::BUILTIN_AGENTS
        .iter()
        .copied()
        .chain([crate::agents::PLAN])
        .chain(request.custom_agents.iter().map(|a| a.name.as_str()))
        .collect();
    Err(PromptError::UnknownAgent {
        name: request.agent.to_string(),
        available: available.join(", "),
    })
}

#[derive(Deserialize)]
struct Families {
    families: Vec<Family>,
    default: String,
}

#[derive(Deserialize)]
struct Family {
    /// The id contains one of these…
    contains: Vec<String>,
    /// …and every one of these (`gpt` for `codex`: a codex model outside the GPT line is
    /// not one).
    #[serde(default)]
    all: Vec<String>,
    template: String,
}

/// The model-family template for `model`: the first family whose substrings the
/// lower-cased model id has, else the default. A pack without a family list has none.
fn model_template(pack: &mut Pack<'_>, model: &str) -> Result<Option<String>, PromptError> {
    if pack.snapshot.get(MODEL_FAMILIES).is_none() {
        return Ok(None);
    }
    let text = pack.text(MODEL_FAMILIES)?;
    let families: Families = serde_json::from_str(text).map_err(|e| PromptError::BadPackFile {
        key: MODEL_FAMILIES.to_string(),
        reason: e.to_string(),
    })?;
    let model = model.to_lowercase();
    let chosen = families
        .families
        .into_iter()
        .find(|f| {
            let has = |needle: &String| model.contains(&needle.to_lowercase());
            f.contains.iter().any(has) && f.all.iter().all(has)
        })
        .map_or(families.default, |f| f.template);
    Ok(Some(chosen))
}

fn has_contract(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim();
        line.starts_with('#') && line.trim_start_matches('#').trim() == DELEGATED_CONTRACT_HEADING
    })
}

/// Trims trailing spaces, collapses runs of blank lines left by template blocks, and trims
/// the ends. Only rendered templates go through this; user files are left exactly as they
/// are.
pub fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank_run = 0;
    for line in text.trim().lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank_run += 1;
            if blank_run > 1 {
                continue;
            }
        } else {
            blank_run = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.truncate(out.trim_end().len());
    out
}

/// The heading level of a Markdown ATX heading line, or `None`.
fn heading_level(line: &str) -> Option<usize> {
    let hashes = line.bytes().take_while(|&b| b == b'#').count();
    (hashes > 0 && hashes <= 6 && line[hashes..].starts_with(' ')).then_some(hashes)
}

/// Inserts each runtime-rule block (`@@ <heading>` followed by its lines) at the end of
/// that heading's section in `core`, before any blank lines that close it. A heading the
/// core does not have is added at the end with its block. Fenced code is never mistaken
/// for headings.
pub fn insert_rules(core: &str, rules: &str) -> String {
    let mut blocks: Vec<(&str, Vec<&str>)> = Vec::new();
    for line in rules.lines() {
        if let Some(heading) = line.strip_prefix("@@ ") {
            blocks.push((heading.trim(), Vec::new()));
        } else if let Some((_, body)) = blocks.last_mut()
            && !line.trim().is_empty()
        {
            body.push(line);
        }
    }
    let mut lines: Vec<&str> = core.lines().collect();
    for (heading, body) in &blocks {
        if body.is_empty() {
            continue;
        }
        let Some(level) = heading_level(heading) else {
            continue;
        };
        let mut in_fence = false;
        let mut start = None;
        let mut end = lines.len();
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("```") {
                in_fence = !in_fence;
                continue;
            }
            if in_fence {
                continue;
            }
            match start {
                None if line.trim_end() == *heading => start = Some(i),
                Some(_) if heading_level(line).is_some_and(|l| l <= level) => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        match start {
            Some(start) => {
                let mut at = end;
                while at > start + 1 && lines[at - 1].trim().is_empty() {
                    at -= 1;
                }
                lines.splice(at..at, body.iter().copied());
            }
            None => {
                lines.push("");
                lines.push(heading);
                lines.extend(body.iter().copied());
            }
        }
    }
    lines.join("\n")
}
