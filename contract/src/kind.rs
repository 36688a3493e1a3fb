//! The three kinds of contract a pack can declare, carried by the pack header's `schema`
//! number (and the channel entry's, which must agree), so that no field is added to either
//! and a client from before the kinds existed refuses a pack of a kind it cannot check with
//! the same "incompatible schema" refusal as any schema it does not know.

use std::fmt;

/// Header `schema` of a pack of the `files` contract: plain files, nothing required.
pub const FILES_SCHEMA: u32 = 1000;
/// Header `schema` of a pack of an app's own contract, which the pack ships at
/// [`APP_CONTRACT_PATH`].
pub const APP_SCHEMA: u32 = 1001;
/// Where a pack of [`APP_SCHEMA`] carries its contract.
pub const APP_CONTRACT_PATH: &str = "contract.json";

/// What a pack declares it satisfies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The agent runtime's contract of schema N (`contract/schema-N.json`).
    Agent(u32),
    /// An app's own contract, shipped in the pack at [`APP_CONTRACT_PATH`].
    App,
    /// Plain files: nothing required; templates, if any, must parse.
    Files,
}

impl Kind {
    /// The kind a header's `schema` number names: [`FILES_SCHEMA`], [`APP_SCHEMA`], or
    /// any other number as an agent schema (known to this build or not).
    pub fn of_schema(schema: u32) -> Kind {
        match schema {
            FILES_SCHEMA => Kind::Files,
            APP_SCHEMA => Kind::App,
            n => Kind::Agent(n),
        }
    }

    /// The header `schema` number of this kind.
    pub fn schema(self) -> u32 {
        match self {
            Kind::Agent(n) => n,
            Kind::App => APP_SCHEMA,
            Kind::Files => FILES_SCHEMA,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Agent(n) => write!(f, "agent schema {n}"),
            Kind::App => write!(f, "app contract ({APP_CONTRACT_PATH})"),
            Kind::Files => f.write_str("plain files"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_numbers_round_trip() {
        for kind in [Kind::Agent(1), Kind::Agent(7), Kind::App, Kind::Files] {
            assert_eq!(Kind::of_schema(kind.schema()), kind);
        }
        assert_eq!(Kind::of_schema(1), Kind::Agent(1));
        assert_eq!(Kind::Files.to_string(), "plain files");
    }
}
