//! The contract this app's packs must satisfy (`[updates] contract`, `Client(contract=…)` in
//! Python): the agent runtime's, an app's own, or plain files. A pack declares its contract
//! in its header (see [`pack_contract::Kind`]); the client installs only packs of the kind
//! it takes, and holds an app pack's own `contract.json` to the app's.

use std::path::Path;

use pack_contract::{APP_CONTRACT_PATH, Contract, Kind};

/// What packs this client installs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Accepts {
    /// Packs of an agent schema this build knows (schema 1): the agent runtime's contract,
    /// and what every client took before packs declared a contract.
    #[default]
    Agent,
    /// Packs of plain files (`packer build --contract files`).
    Files,
    /// Packs of an app's own contract (`packer build --contract app`) whose `contract.json`
    /// fits this one ([`Contract::fits_within`]).
    App(Contract),
}

impl Accepts {
    /// Reads a config value: `"agent"`, `"files"`, or the path of an app contract file
    /// (relative to `base`).
    pub fn parse(base: &Path, value: &str) -> Result<Accepts, String> {
        match value {
            "agent" => Ok(Accepts::Agent),
            "files" => Ok(Accepts::Files),
            path => Accepts::app_file(&base.join(path)),
        }
    }

    /// The app contract in the file at `path`.
    pub fn app_file(path: &Path) -> Result<Accepts, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "contract {}: {e}; give \"agent\", \"files\" or the path of an app contract \
                 file ({{\"templates\": [...], \"variables\": {{...}}}})",
                path.display()
            )
        })?;
        Contract::app_from_json(&text)
            .map(Accepts::App)
            .map_err(|e| format!("contract {}: {e}", path.display()))
    }

    /// What a client takes when the config names no contract: the app contract a built-in
    /// pack directory ships at `contract.json`, else the agent's.
    pub fn default_for(builtin_dir: Option<&Path>) -> Result<Accepts, String> {
        match builtin_dir.map(|dir| dir.join(APP_CONTRACT_PATH)) {
            Some(path) if path.is_file() => Accepts::app_file(&path),
            Some(_) | None => Ok(Accepts::Agent),
        }
    }

    /// Whether a pack whose header says `schema` is of a kind this client takes.
    pub fn takes(&self, schema: u32) -> bool {
        match (self, Kind::of_schema(schema)) {
            (Accepts::Agent, Kind::Agent(n)) => Contract::builtin(n).is_some(),
            (Accepts::Files, Kind::Files) | (Accepts::App(_), Kind::App) => true,
            (Accepts::Agent, Kind::App | Kind::Files)
            | (Accepts::Files, Kind::Agent(_) | Kind::App)
            | (Accepts::App(_), Kind::Agent(_) | Kind::Files) => false,
        }
    }

    /// The header `schema` numbers this client takes, for the refusal of another.
    pub fn schemas(&self) -> Vec<u32> {
        match self {
            Accepts::Agent => Contract::builtin_schemas().to_vec(),
            Accepts::Files => vec![Kind::Files.schema()],
            Accepts::App(_) => vec![Kind::App.schema()],
        }
    }

    /// The contract a built-in pack directory is held to.
    pub fn builtin_contract(&self) -> Option<Contract> {
        match self {
            Accepts::Agent => Contract::builtin(1),
            Accepts::Files => Some(Contract::files()),
            Accepts::App(contract) => Some(contract.clone()),
        }
    }

    /// Why an opened pack's own contract does not do for this client, if it does not: an app
    /// pack's `contract.json` must fit the app's.
    pub fn check(&self, pack: &Contract) -> Result<(), String> {
        match self {
            Accepts::App(given) => pack.fits_within(given).map_err(|reason| {
                format!("its {APP_CONTRACT_PATH} disagrees with the app's contract: {reason}")
            }),
            Accepts::Agent | Accepts::Files => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_takes_only_its_own_packs() {
        let app = Accepts::App(Contract::app_from_json(r#"{"variables": {}}"#).unwrap());
        assert!(Accepts::Agent.takes(1) && !Accepts::Agent.takes(2));
        assert!(!Accepts::Agent.takes(1000) && !Accepts::Agent.takes(1001));
        assert!(
            Accepts::Files.takes(1000) && !Accepts::Files.takes(1) && !Accepts::Files.takes(1001)
        );
        assert!(app.takes(1001) && !app.takes(1) && !app.takes(1000));
        assert_eq!(Accepts::Files.schemas(), [1000]);
    }

    #[test]
    fn a_config_names_a_kind_or_an_app_contract_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Accepts::parse(dir.path(), "files"), Ok(Accepts::Files));
        std::fs::write(
            dir.path().join("c.json"),
            r#"{"variables": {"user": "string"}}"#,
        )
        .unwrap();
        assert!(matches!(
            Accepts::parse(dir.path(), "c.json"),
            Ok(Accepts::App(_))
        ));
        let err = Accepts::parse(dir.path(), "nope.json").unwrap_err();
        assert!(
            err.contains("give \"agent\", \"files\" or the path of an app contract file"),
            "{err}"
        );
        // A built-in directory with a contract.json declares the app's contract.
        assert_eq!(Accepts::default_for(Some(dir.path())), Ok(Accepts::Agent));
        std::fs::copy(dir.path().join("c.json"), dir.path().join("contract.json")).unwrap();
        assert!(matches!(
            Accepts::default_for(Some(dir.path())),
            Ok(Accepts::App(_))
        ));
    }
}
