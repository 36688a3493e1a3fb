//! `agent mcp list`: every configured MCP server, started the way a session starts it,
//! with its state and the tools the model would be offered.

use std::io::Write;

use agent_runtime::config::Config;
use agent_runtime::data_dir::DataDir;
use agent_runtime::mcp::{McpServers, ServerState};
use anyhow::Context as _;

pub fn list(json: bool) -> anyhow::Result<()> {
    let data_dir = DataDir::locate()?;
    let text = crate::read_config(&data_dir)?;
    let config = Config::parse(&text)
        .map_err(|reason| anyhow::anyhow!("{}: {reason}", data_dir.config_file().display()))?;
    let mut out = std::io::stdout().lock();
    if config.mcp_servers.is_empty() {
        if json {
            writeln!(out, "[]")?;
        } else {
            writeln!(
                out,
                "no MCP servers configured; add a [mcp_servers.<name>] table to {}",
                data_dir.config_file().display()
            )?;
        }
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let mcp = McpServers::spawn(&config.mcp_servers, &cwd, runtime.handle());
    runtime.block_on(mcp.wait_started());
    let reports = mcp.report();
    runtime.block_on(mcp.shutdown());

    if json {
        serde_json::to_writer_pretty(&mut out, &reports)?;
        writeln!(out)?;
    } else {
        for report in &reports {
            writeln!(
                out,
                "{}  {}  ({})",
                report.name, report.state, report.transport
            )?;
            if report.state == ServerState::Ready {
                let instructions = match &report.instructions {
                    Some(text) if !text.trim().is_empty() => {
                        format!("{} bytes of instructions", text.len())
                    }
                    Some(_) | None => "no instructions".to_string(),
                };
                writeln!(out, "  {} tools, {instructions}", report.tools.len())?;
            }
            for tool in &report.tools {
                let first = tool.description.lines().next().unwrap_or("");
                let mut first: String = first.chars().take(80).collect();
                if tool.read_only {
                    first = format!("(read-only) {first}");
                }
                writeln!(out, "  {}  {first}", tool.exposed)?;
            }
        }
    }
    // A server that should run and does not is worth a non-zero exit for scripts.
    if reports
        .iter()
        .any(|r| matches!(r.state, ServerState::Failed(_)))
    {
        return Err(crate::Reported.into());
    }
    Ok(())
}
