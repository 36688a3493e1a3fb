//! Protected paths: files the file tools never change without asking, in any mode — the
//! workspace's own permission rules, which a sandboxed command or the model must not be
//! able to rewrite to grant itself more.

use std::path::{Path, PathBuf};

/// Refuses a write to one of the `protected` files, named by the path the call gives or
/// by where that path really leads (`real`).
pub(super) fn check_write(protected: &[PathBuf], path: &Path, real: &Path) -> Result<(), String> {
    match protected.iter().find(|p| *p == real || *p == path) {
        Some(protected) => Err(format!(
            "{} holds the workspace's permission rules, which only you change",
            protected.display()
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_protected_file_is_refused_by_its_name_or_where_a_link_leads() {
        let protected = [PathBuf::from("/ws/.agents/permissions.toml")];
        let rules = Path::new("/ws/.agents/permissions.toml");
        let link = Path::new("/ws/notes");
        let e = check_write(&protected, rules, rules).unwrap_err();
        assert_eq!(
            e,
            "/ws/.agents/permissions.toml holds the workspace's permission rules, which only you change"
        );
        assert!(check_write(&protected, link, rules).is_err());
        assert!(check_write(&protected, link, link).is_ok());
    }
}
