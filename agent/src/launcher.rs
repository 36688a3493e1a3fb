//! The Landlock half of the sandbox launcher (`agent sandbox-exec`): the process restricts
//! itself to a [`SandboxSpec`] before it becomes the command. The library decides what the
//! sandbox allows ([`agent_runtime::sandbox`]); only this binary links Landlock and applies it.

use agent_runtime::permissions::SandboxSpec;
#[cfg(target_os = "linux")]
use agent_runtime::sandbox::{ABI_MAX_ENV, MIN_FILE_ABI, abi_ceiling};
use agent_runtime::sandbox::{Enforced, SandboxError};

/// Files every command may write to whatever the mode: writing to them changes nothing.
#[cfg(target_os = "linux")]
const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random"];

/// Restricts the calling process (and everything it starts) to `spec`. Call it before
/// starting any thread: Landlock binds the calling thread only.
#[cfg(target_os = "linux")]
pub fn restrict_self(spec: &SandboxSpec) -> Result<Enforced, SandboxError> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, Ruleset,
        RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
    };
    let ceiling = abi_ceiling()?;
    if ceiling == 0 {
        return Err(SandboxError::Unsupported(format!(
            "lowered to ABI 0 by {ABI_MAX_ENV}"
        )));
    }
    // Up to the ceiling: older kernels get what they support (best effort), newer ones
    // nothing this code has not vetted. Below NEWEST_ABI only the ceiling's features are
    // asked for, so the ruleset is what a kernel offering that ABI would enforce.
    let abi = ABI::from(i32::from(ceiling));
    let fail = |e: landlock::RulesetError| SandboxError::Ruleset(e.to_string());
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(fail)?;
    if ceiling >= 6 {
        ruleset = ruleset.scope(Scope::Signal).map_err(fail)?;
    }
    if !spec.network && ceiling >= 4 {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(fail)?;
    }
    if !spec.network && ceiling >= 6 {
        ruleset = ruleset.scope(Scope::AbstractUnixSocket).map_err(fail)?;
    }
    let status = ruleset
        .create()
        .map_err(fail)?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))
        .map_err(fail)?
        .add_rules(path_beneath_rules(DEVICES, AccessFs::from_all(abi)))
        .map_err(fail)?
        .add_rules(path_beneath_rules(&spec.writable, AccessFs::from_all(abi)))
        .map_err(fail)?
        .restrict_self()
        .map_err(fail)?;
    let kernel_abi = match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => effective_abi as i32,
        LandlockStatus::NotEnabled => {
            return Err(SandboxError::Unsupported(
                "built into the kernel but not enabled at boot".to_string(),
            ));
        }
        LandlockStatus::NotImplemented => {
            return Err(SandboxError::Unsupported(
                "not built into this kernel".to_string(),
            ));
        }
    };
    let abi = u8::try_from(kernel_abi).unwrap_or(0).min(ceiling);
    if status.ruleset == RulesetStatus::NotEnforced || abi == 0 {
        return Err(SandboxError::Unsupported(format!(
            "the ruleset was not enforced (ABI {abi})"
        )));
    }
    if abi < MIN_FILE_ABI {
        return Err(SandboxError::NoFileConfinement { abi });
    }
    if !spec.network && abi < 4 {
        return Err(SandboxError::NoNetworkRules { abi });
    }
    Ok(Enforced { abi })
}

#[cfg(not(target_os = "linux"))]
pub fn restrict_self(_spec: &SandboxSpec) -> Result<Enforced, SandboxError> {
    Err(SandboxError::Unsupported(
        "Landlock is Linux-only".to_string(),
    ))
}
