//! What each permission mode lets a call do without asking: `read-only` reads and runs
//! commands in a read-only sandbox, `workspace` also writes under the workspace and the
//! temp directories and runs commands in a sandbox that may write there, `full` does
//! anything.

use super::{Access, PermissionMode, Permit, Policy, protected, real_path};

impl Policy {
    /// Whether the call is inside the mode: `Ok` with how it runs, or `Err` saying why not.
    pub(super) fn inside(&self, access: &Access) -> Result<Permit, String> {
        let plain = Permit { sandbox: None };
        let shared = &self.shared;
        match access {
            Access::Own | Access::Read(_) => Ok(plain),
            Access::Write(path) => {
                let real = real_path(path);
                protected::check_write(&shared.settings.protected, path, &real)?;
                match self.mode {
                    PermissionMode::Full => Ok(plain),
                    PermissionMode::ReadOnly => Err(format!(
                        "the `read-only` mode allows no writes ({})",
                        self.origin
                    )),
                    PermissionMode::Workspace => {
                        let roots = shared.writable_roots();
                        if roots.iter().any(|root| real.starts_with(real_path(root))) {
                            Ok(plain)
                        } else {
                            let shown: Vec<String> =
                                roots.iter().map(|r| r.display().to_string()).collect();
                            Err(format!(
                                "{} is outside the `workspace` mode ({}), which writes only under {}",
                                path.display(),
                                self.origin,
                                shown.join(", ")
                            ))
                        }
                    }
                }
            }
            Access::Command {
                outside_sandbox, ..
            } => {
                if self.mode == PermissionMode::Full {
                    return Ok(plain);
                }
                if *outside_sandbox {
                    return Err(format!(
                        "the command asks to run outside the sandbox of the `{}` mode ({})",
                        self.mode, self.origin
                    ));
                }
                self.sandbox_for_commands()
                    .map(|spec| Permit {
                        sandbox: Some(spec),
                    })
                    .map_err(|why| {
                        format!(
                            "{why}, so under the `{}` mode ({}) each command needs approval",
                            self.mode, self.origin
                        )
                    })
            }
            Access::Fetch(_) => {
                if self.mode == PermissionMode::Full || shared.settings.network {
                    Ok(plain)
                } else {
                    Err(format!(
                        "the `{}` mode ({}) has no network access unless `network = true` is set under [permissions]",
                        self.mode, self.origin
                    ))
                }
            }
            Access::External => {
                if self.mode == PermissionMode::Full {
                    Ok(plain)
                } else {
                    Err(format!(
                        "what this tool does is not known to the runtime, so the `{}` mode ({}) does not cover it",
                        self.mode, self.origin
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_order_from_narrow_to_wide() {
        assert!(PermissionMode::ReadOnly < PermissionMode::Workspace);
        assert!(PermissionMode::Workspace < PermissionMode::Full);
        assert_eq!("read-only".parse(), Ok(PermissionMode::ReadOnly));
        assert!(
            "rw".parse::<PermissionMode>()
                .unwrap_err()
                .contains("read-only")
        );
    }
}
